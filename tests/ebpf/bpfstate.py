"""What BPF state the kernel holds, from bpftool: to check nothing is left behind."""

from __future__ import annotations

import os
import subprocess


def _bpftool(*args: str) -> str:
    return subprocess.run(["bpftool", *args], capture_output=True, text=True, check=True).stdout


def links() -> set[str]:
    """Ids of every BPF link (perf-event, raw tracepoint, ...)."""
    return {ln.split(":")[0] for ln in _bpftool("link", "list").splitlines() if ln[:1].isdigit()}


def perf_attachments(pid: int | None = None) -> list[str]:
    """uprobes / perf events with a BPF program, held by ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return [ln for ln in _bpftool("perf", "list").splitlines() if ln.startswith(f"pid {pid} ")]


def uprobe_events() -> list[str]:
    """Lines of tracefs' uprobe_events (where it is mounted), e.g. legacy uprobes."""
    for root in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        path = os.path.join(root, "uprobe_events")
        if os.path.exists(path):
            with open(path) as f:
                return [ln for ln in f.read().splitlines() if ln.strip()]
    return []
