"""System programs some tests need (compilers, binutils, bpftool, perl), by Debian package.

A test that needs one is skipped where it is missing, with a reason naming the program and
the package that provides it, unless ``AIFLAME_REQUIRE_EBPF=1`` (CI installs them all and
runs as root on a BTF kernel): there a missing one fails the test. Use the ``tools`` mark
(``@pytest.mark.tools("gcc", "nm")``, also as a module's ``pytestmark``; tests/conftest.py
applies it) or call :func:`need` inside a test or fixture.

This module sits beside tests/conftest.py, whose directory pytest puts on ``sys.path``.
"""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRED = os.environ.get("AIFLAME_REQUIRE_EBPF") == "1"

# Program -> the Debian package that provides it (apt-get install PACKAGE).
PACKAGES = {
    "bpftool": "bpftool",
    "clang": "clang",
    "llvm-strip": "llvm",
    "gcc": "gcc",
    "g++": "g++",
    "perl": "perl",
    "nm": "binutils",
    "readelf": "binutils",
    "objcopy": "binutils",
    "strip": "binutils",
    "c++filt": "binutils",
}
# bpftool lives in sbin, which is not on every user's PATH (sudo keeps the caller's).
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def find(tool: str) -> str | None:
    """Path of ``tool``: on PATH, or in the sbin directories."""
    found = shutil.which(tool)
    if found is None and tool == "bpftool":
        found = next((p for d in _SBIN if os.access(p := os.path.join(d, tool), os.X_OK)), None)
    return found


def missing_reason(*tools: str) -> str | None:
    """``needs gcc, nm (apt-get install gcc binutils)`` for the missing ones, or None."""
    absent = [t for t in tools if find(t) is None]
    if not absent:
        return None
    packages = " ".join(dict.fromkeys(PACKAGES.get(t, t) for t in absent))
    return f"needs {', '.join(absent)} (apt-get install {packages})"


def unavailable(reason: str) -> None:
    """Skip the test for ``reason``; with AIFLAME_REQUIRE_EBPF=1, fail it."""
    if REQUIRED:
        pytest.fail(f"AIFLAME_REQUIRE_EBPF=1 but {reason}")
    pytest.skip(reason)


def need(*tools: str) -> None:
    """Skip (or, with AIFLAME_REQUIRE_EBPF=1, fail) unless every one of ``tools`` is here."""
    reason = missing_reason(*tools)
    if reason:
        unavailable(reason)


def need_root(why: str) -> None:
    """Skip (or, with AIFLAME_REQUIRE_EBPF=1, fail) unless this process runs as root."""
    if os.geteuid() != 0:
        unavailable(f"needs root: {why}")
