"""Real eBPF tests: they load BPF programs into this machine's kernel.

They need root, a kernel with BTF and the system's libbpf.so.1; elsewhere they are
skipped, unless AIFLAME_REQUIRE_EBPF=1 (CI runs as root on a BTF kernel), where a missing
capability is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REQUIRED = os.environ.get("AIFLAME_REQUIRE_EBPF") == "1"
PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="session")
def ebpf() -> None:
    from aiflame.collectors.ebpf.support import unavailable_reason

    reason = unavailable_reason()
    if reason:
        if REQUIRED:
            pytest.fail(f"AIFLAME_REQUIRE_EBPF=1 but {reason}")
        pytest.skip(f"eBPF tests: {reason}")


@pytest.fixture(scope="session")
def hot(tmp_path_factory) -> Path:
    """programs/hot.c (known hot functions), built here with frame pointers."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.fail("gcc is needed to build the test program")
    out = tmp_path_factory.mktemp("hot") / "hot"
    subprocess.run(
        [
            gcc,
            "-O1",
            "-g0",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",  # hot_a -> spin stays a call, with its frame
            "-o",
            str(out),
            str(PROGRAMS / "hot.c"),
        ],
        check=True,
    )
    return out
