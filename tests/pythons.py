"""CPython interpreters of every version the eBPF walker reads (3.8-3.15), for the tests.

They are looked for in pyenv (``~/.pyenv/versions/3.X.*``), among the system's
(``/usr/bin/python3.X``), and in the Debian and Ubuntu chroots that ``.ci/pythons``
installs under ``.cache/pythons/<release>/`` (``AIFLAME_PYTHONS_DIR`` elsewhere): CI has no
pyenv, and a program run in a chroot is profiled through ``/proc/PID/root``, as programs
in containers are.

A version found nowhere is a skip that names it and how to install it, unless it is listed
in ``AIFLAME_REQUIRE_PYTHONS`` (``.ci/run`` lists the versions it installed): there it is a
failure.

This module sits beside tests/conftest.py, whose directory pytest puts on ``sys.path``.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

VERSIONS = [(3, m) for m in range(8, 16)]
ROOT = Path(__file__).resolve().parents[1]
CHROOTS = Path(os.environ.get("AIFLAME_PYTHONS_DIR") or ROOT / ".cache" / "pythons")
# where .ci/pythons installs each version: (release, archive)
INSTALLED_BY_CI = {
    (3, 8): "Ubuntu focal",
    (3, 9): "Debian bullseye",
    (3, 10): "Ubuntu jammy",
    (3, 11): "this machine's Debian bookworm",
    (3, 12): "Ubuntu noble",
    (3, 13): "Debian sid",
    (3, 14): "Debian sid",
    (3, 15): "Debian sid",
}


def required() -> set[tuple[int, int]]:
    words = os.environ.get("AIFLAME_REQUIRE_PYTHONS", "").split()
    return {(int(w.split(".")[0]), int(w.split(".")[1])) for w in words}


@dataclass(frozen=True)
class Interpreter:
    version: tuple[int, int]
    exe: str  # as the interpreter sees it (inside its root)
    root: str = "/"  # a chroot, or "/" for this machine's own
    origin: str = ""  # pyenv, system, or the chroot's release

    @property
    def name(self) -> str:
        return f"{self.version[0]}.{self.version[1]}-{self.origin}"

    def argv(self, script: str, *args: str) -> list[str]:
        """The command that runs ``script`` (a path as the interpreter sees it)."""
        if self.root == "/":
            return [self.exe, script, *args]
        return [shutil.which("chroot") or "/usr/sbin/chroot", self.root, self.exe, script, *args]

    @contextmanager
    def workdir(self) -> Iterator[tuple[Path, str]]:
        """A fresh directory the interpreter can read: (its path here, as it sees it)."""
        base = Path(self.root) / "tmp"
        here = Path(tempfile.mkdtemp(prefix="aiflame-test-", dir=base))
        try:
            yield here, "/" + str(here.relative_to(self.root))
        finally:
            shutil.rmtree(here, ignore_errors=True)


def _version_of(exe: str) -> tuple[int, int] | None:
    base = os.path.basename(exe)
    parts = base.removeprefix("python").split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def find_all() -> list[Interpreter]:
    """Every interpreter of a version in VERSIONS found here, one per file."""
    found: dict[str, Interpreter] = {}

    def add(exe: str, root: str, origin: str) -> None:
        version = _version_of(exe)
        host = os.path.join(root, exe.lstrip("/"))
        if version in VERSIONS and os.access(host, os.X_OK):
            found.setdefault(os.path.realpath(host), Interpreter(version, exe, root, origin))

    for exe in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))):
        add(exe, "/", "pyenv")
    for exe in sorted(glob.glob("/usr/bin/python3.*")):
        add(exe, "/", "system")
    if CHROOTS.is_dir():
        for release in sorted(p for p in CHROOTS.iterdir() if p.is_dir()):
            for host in sorted(glob.glob(f"{release}/usr/bin/python3.*")):
                add("/usr/bin/" + os.path.basename(host), str(release), release.name)
    return sorted(found.values(), key=lambda i: (i.version, i.origin))


def params() -> list[object]:
    """pytest parameters: every interpreter found, and a version found nowhere as None
    (:func:`need` skips or fails it)."""
    found = find_all()
    out: list[object] = [pytest.param(i, id=i.name) for i in found]
    have = {i.version for i in found}
    for v in VERSIONS:
        if v not in have:
            out.append(pytest.param((None, v), id=f"{v[0]}.{v[1]}-missing"))
    return out


def need(param: object) -> Interpreter:
    """The interpreter of a :func:`params` parameter; a missing version is skipped, or
    fails where it is required."""
    if isinstance(param, Interpreter):
        return param
    _, version = param  # type: ignore[misc]
    v = f"{version[0]}.{version[1]}"
    origin = INSTALLED_BY_CI[version]
    reason = f"Python {v} is not installed here (.ci/pythons installs it from {origin})"
    if version in required():
        pytest.fail(f"AIFLAME_REQUIRE_PYTHONS names {v} but {reason}")
    pytest.skip(reason)
