"""The ctypes libbpf loader against the kernel, with the shipped self-test program."""

from __future__ import annotations

import ctypes
import os
import struct
import time

import bpfstate
import pytest

from aiflame.collectors.ebpf import object_bytes
from aiflame.collectors.ebpf.libbpf import BpfError, BpfObject
from aiflame.collectors.ebpf.perf import cpu_clock_attr, online_cpus, perf_event_open

pytestmark = pytest.mark.usefixtures("ebpf")


def _libc() -> tuple[str, ctypes.CDLL]:
    with open("/proc/self/maps") as f:
        path = next(ln.split()[-1] for ln in f if "/libc.so" in ln or "/libc-" in ln)
    lib = ctypes.CDLL(path)
    lib.labs.argtypes, lib.labs.restype = [ctypes.c_long], ctypes.c_long
    return path, lib


def _u64s(values: list[bytes]) -> list[int]:
    return [struct.unpack("<Q", v)[0] for v in values]


def test_uprobes_ring_buffer_rodata_and_maps():
    path, libc = _libc()
    events: list[tuple[int, int, int, int]] = []
    with BpfObject(object_bytes("selftest"), "selftest") as obj:
        obj.set_rodata(target_tgid=os.getpid(), magic=0xA1F1A3E)
        obj.load()
        obj.attach_uprobe("on_call", path, symbol="labs", pid=os.getpid())
        obj.attach_uprobe("on_return", path, symbol="labs", pid=os.getpid(), retprobe=True)
        obj.attach_raw_tracepoint("on_fork", "sched_process_fork")
        rb = obj.ring_buffer("events", lambda b: events.append(struct.unpack("<QQII", b)))
        for i in range(7):
            assert libc.labs(-1000 - i) == 1000 + i
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        rb.poll(200)
        hits = dict(obj.map("hits").items())
        counts = _u64s([hits[struct.pack("<I", i)] for i in range(4)])
        by_tid = dict(obj.map("calls_by_tid").items())
        assert obj.map("calls_by_tid").delete(struct.pack("<I", os.getpid()))
        assert not obj.map("calls_by_tid").delete(struct.pack("<I", os.getpid()))
    assert counts == [7, 7, 0, 1]  # 7 calls, 7 returns, no perf tick, one fork
    assert [e[1] for e in events] == [(-1000 - i) & (2**64 - 1) for i in range(7)]
    assert {(e[0], e[2], e[3]) for e in events} == {(0xA1F1A3E, os.getpid(), os.getpid())}
    assert _u64s(list(by_tid.values())) == [7]


def test_perf_event_program_counts_cpu_ticks():
    with BpfObject(object_bytes("selftest"), "selftest") as obj:
        obj.set_rodata(target_tgid=os.getpid())
        obj.load()
        for cpu in online_cpus():
            obj.attach_perf_event("on_tick", perf_event_open(cpu_clock_attr(200), -1, cpu))
        t0 = time.process_time()
        while time.process_time() - t0 < 0.5:
            pass
        ticks = sum(_u64s(obj.map("ticks").lookup_percpu(b"\0" * 4) or []))
    assert 50 <= ticks <= 150  # 200 Hz over 0.5 s of CPU


def test_close_detaches_every_link(bpftool):
    path, _ = _libc()
    events_before = bpfstate.uprobe_events()
    obj = BpfObject(object_bytes("selftest"), "selftest")
    obj.load()
    obj.attach_uprobe("on_call", path, symbol="labs")
    obj.attach_uprobe("on_return", path, symbol="labs", retprobe=True)
    obj.attach_raw_tracepoint("on_fork", "sched_process_fork")
    obj.attach_perf_event("on_tick", perf_event_open(cpu_clock_attr(10), -1, 0))
    held = bpfstate.bpf_fds()  # this process's own: other processes may load BPF meanwhile
    assert len([k for k, _ in held if k == "link"]) == 4
    assert len([a for a in bpfstate.perf_attachments() if "probe" in a]) == 2
    obj.close()
    assert bpfstate.bpf_fds() == set()
    assert bpfstate.still_loaded(held) == set()
    assert bpfstate.perf_attachments() == []
    assert bpfstate.uprobe_events() == events_before
    with pytest.raises(BpfError, match="closed"):
        obj.map("hits")


def test_errors_name_what_failed():
    with BpfObject(object_bytes("selftest"), "selftest") as obj:
        with pytest.raises(BpfError, match="no read-only global named nope"):
            obj.set_rodata(nope=1)
        obj.load()
        with pytest.raises(BpfError, match="read-only once loaded"):
            obj.set_rodata(magic=1)
        with pytest.raises(BpfError, match="no program named missing"):
            obj.attach_uprobe("missing", "/bin/true")
        with pytest.raises(BpfError, match="uprobe /nonexistent"):
            obj.attach_uprobe("on_call", "/nonexistent", symbol="f")
        with pytest.raises(BpfError, match="key of 3 bytes"):
            obj.map("hits").lookup(b"abc")
    with pytest.raises(BpfError, match="open BPF object junk"):
        BpfObject(b"not an ELF file", "junk")
