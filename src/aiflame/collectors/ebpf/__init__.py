"""The eBPF collector: BPF programs (bpf/*.bpf.c, shipped compiled in objects/) loaded
through the system's libbpf (:mod:`.libbpf`), no compiler needed at run time."""

from __future__ import annotations

import platform
from importlib import resources

from aiflame.errors import AiflameError


def object_bytes(stem: str, machine: str | None = None) -> bytes:
    """The compiled ``bpf/<stem>.bpf.c`` for this machine's architecture."""
    arch = machine or platform.machine()
    ref = resources.files(__package__).joinpath("objects", arch, f"{stem}.bpf.o")
    try:
        return ref.read_bytes()
    except FileNotFoundError:
        raise AiflameError(f"no BPF object {stem} for {arch} in this aiflame build") from None
