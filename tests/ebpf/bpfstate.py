"""What BPF state the kernel holds, from bpftool: to check nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import time

import systools


def _bpftool(*args: str) -> str:
    exe = systools.find("bpftool")
    assert exe, "bpftool is not installed (tests that use it ask for the bpftool fixture)"
    return subprocess.run([exe, *args], capture_output=True, text=True, check=True).stdout


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


def bpf_fds(pid: int | None = None) -> set[tuple[str, int]]:
    """("link" | "prog" | "map", id) of every BPF object a process holds a descriptor of.

    Exact for one process, whatever other processes load meanwhile."""
    pid = os.getpid() if pid is None else pid
    out: set[tuple[str, int]] = set()
    base = f"/proc/{pid}/fdinfo"
    try:
        fds = os.listdir(base)
    except OSError:
        return out
    for fd in fds:
        try:
            with open(os.path.join(base, fd)) as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except OSError:
            continue
        for kind in ("link", "prog", "map"):
            if f"{kind}_id" in fields:
                out.add((kind, int(fields[f"{kind}_id"])))
                break
    return out


def programs() -> set[int]:
    """Ids of every BPF program loaded in the kernel."""
    out = _bpftool("prog", "list")
    return {int(ln.split(":")[0]) for ln in out.splitlines() if ln[:1].isdigit()}


def still_loaded(held: set[tuple[str, int]], wait_s: float = 3.0) -> set[tuple[str, int]]:
    """Which of these links / programs the kernel still has after ``wait_s`` (it frees
    them asynchronously, after an RCU grace period, once the last descriptor closes)."""
    deadline = time.monotonic() + wait_s
    while True:
        links_now = {int(i) for i in links()}
        progs_now = programs()
        left = {
            (k, i)
            for k, i in held
            if (k == "link" and i in links_now) or (k == "prog" and i in progs_now)
        }
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
