"""Real eBPF tests: they load BPF programs into this machine's kernel.

They need root, a kernel with BTF and the system's libbpf.so.1 (Debian package libbpf1);
some also gcc (test programs) and bpftool (to check nothing is left attached). Elsewhere
they are skipped, naming what is missing, unless AIFLAME_REQUIRE_EBPF=1 (CI runs as root
on a BTF kernel with those packages), where a missing capability is a failure.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import systools

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="session")
def ebpf() -> None:
    from aiflame.collectors.ebpf.support import unavailable_reason

    reason = unavailable_reason()
    if reason:
        systools.unavailable(f"eBPF tests: {reason}")


@pytest.fixture(scope="session")
def bpftool() -> None:
    """For the tests that ask the kernel, through bpftool, what is still attached."""
    systools.need("bpftool")


@pytest.fixture(scope="session")
def hot(tmp_path_factory) -> Path:
    """programs/hot.c (known hot functions), built here with frame pointers."""
    systools.need("gcc")
    out = tmp_path_factory.mktemp("hot") / "hot"
    subprocess.run(
        [
            "gcc",
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
