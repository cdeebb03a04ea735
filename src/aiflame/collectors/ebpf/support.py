"""Can this process use eBPF? One line saying why not, checked before anything is loaded."""

from __future__ import annotations

import os
import platform

BTF_PATH = "/sys/kernel/btf/vmlinux"
_CAP_SYS_ADMIN, _CAP_PERFMON, _CAP_BPF = 21, 38, 39
_MACHINES = ("x86_64", "aarch64")


def _effective_caps() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def privileged() -> bool:
    """Root, or the capabilities BPF tracing needs (CAP_BPF + CAP_PERFMON, or SYS_ADMIN)."""
    if os.geteuid() == 0:
        return True
    caps = _effective_caps()
    has = lambda bit: bool(caps >> bit & 1)  # noqa: E731
    return has(_CAP_SYS_ADMIN) or (has(_CAP_BPF) and has(_CAP_PERFMON))


def unavailable_reason() -> str | None:
    """Why the eBPF collector cannot run here, or None when it can be tried."""
    if platform.system() != "Linux":
        return "eBPF needs Linux"
    if platform.machine() not in _MACHINES:
        return f"no BPF objects are shipped for {platform.machine()}"
    if not privileged():
        return "eBPF needs root (or CAP_BPF and CAP_PERFMON)"
    if not os.path.exists(BTF_PATH):
        return f"the kernel has no BTF ({BTF_PATH} is missing; CONFIG_DEBUG_INFO_BTF=y needed)"
    from aiflame.collectors.ebpf.libbpf import BpfError, library

    try:
        library()
    except BpfError as e:
        return str(e)
    return None
