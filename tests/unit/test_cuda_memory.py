"""Live GPU memory from the alloc/free probes: pairing, timeline, peak, on event streams
built as the BPF program writes them (the kernel test runs the same code on real probes)."""

from __future__ import annotations

import numpy as np
from cuda_records import record

from aiflame.collectors.ebpf.cuda_events import EventLog
from aiflame.collectors.ebpf.cuda_memory import memory_profile, replay
from aiflame.model import FrameKind, ProfileBuilder

MiB = 1 << 20
SITES = {0x100: "keep", 0x200: "temp", 0x300: "driver", 0x400: "peak", 0x500: "release",
         0x600: "oom", 0x700: "host"}  # fmt: skip


def user_stack(b: ProfileBuilder, pid: int, stack: int, log: EventLog) -> int:
    frames = [SITES.get(a, hex(a)) for a in reversed(log.stacks[stack])]
    return b.stack([b.frame(f, FrameKind.NATIVE) for f in frames])


def build(log: EventLog):
    return memory_profile(log.memory_events(), lambda b, p, s: user_stack(b, p, s, log))


def by_stack(profile, metric: str) -> dict[str, float]:
    col = profile.type_index(metric)
    return {";".join(profile.stack_names(s)): v for s, v in profile.iter_stack_values(col) if v}


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000

    def __call__(self, step: int = 1000) -> int:
        self.t += step
        return self.t


def pattern_log(pid: int = 100) -> EventLog:
    """The pattern of tests/ebpf/cuda/memory_target.c (see there), as records."""
    log, now, addr = EventLog(), Clock(), 0x7E0000000000

    def alloc(api, site, size, out, ret=0):
        log(record(api, now(), args=[0x10, size], result=out, ret=ret, duration=500,
                   stack=[site], pid=pid, tid=pid))  # fmt: skip

    def free(api, site, ptr, ret=0):
        log(record(api, now(), args=[ptr], ret=ret, duration=300, stack=[site], pid=pid, tid=pid))

    for i in range(3):
        alloc("cudaMalloc", 0x100, MiB, addr + i * MiB)
    temp = addr + 3 * MiB
    for _ in range(4):  # the same address every time, as an allocator reuses it
        alloc("cudaMalloc", 0x200, 2 * MiB, temp)
        free("cudaFree", 0x200, temp)
    alloc("cuMemAlloc_v2", 0x300, MiB // 2, addr + 5 * MiB)
    alloc("cudaMalloc", 0x400, 8 * MiB, addr + 6 * MiB)
    free("cudaFree", 0x500, addr + 6 * MiB)
    alloc("cudaMalloc", 0x600, 1 << 40, 0, ret=2)  # out of memory
    alloc("cudaMallocHost", 0x700, 64 * 1024, 0x55550000)
    free("cudaFreeHost", 0x700, 0x55550000)
    return log


def test_the_pattern_live_at_the_peak_and_allocated_by_stack():
    p = build(pattern_log())
    assert by_stack(p, "peak-bytes") == {
        "keep;cudaMalloc": 3 * MiB,
        "driver;cuMemAlloc_v2": MiB // 2,
        "peak;cudaMalloc": 8 * MiB,
    }
    assert p.meta["peak_bytes"] == 11.5 * MiB
    assert by_stack(p, "alloc-bytes") == {
        "keep;cudaMalloc": 3 * MiB,
        "temp;cudaMalloc": 8 * MiB,
        "driver;cuMemAlloc_v2": MiB // 2,
        "peak;cudaMalloc": 8 * MiB,
        "host;cudaMallocHost": 64 * 1024,
    }
    assert by_stack(p, "alloc-count") == {
        "keep;cudaMalloc": 3,
        "temp;cudaMalloc": 4,
        "driver;cuMemAlloc_v2": 1,
        "peak;cudaMalloc": 1,
        "host;cudaMallocHost": 1,
    }
    assert by_stack(p, "failed-alloc-count") == {"oom;cudaMalloc": 1}
    assert by_stack(p, "failed-alloc-bytes") == {"oom;cudaMalloc": 1 << 40}
    tl = p.meta["memory_timeline"]
    live = [v / MiB for v in tl["live_bytes"]]
    assert live == [1, 2, 3, 5, 3, 5, 3, 5, 3, 5, 3, 3.5, 11.5, 3.5]
    assert tl["peak_index"] == 12 and tl["points"] == 14
    assert tl["scope"].startswith("process ")  # the chart's header: one process, every GPU
    counts = p.meta["memory_counts"]
    assert counts["frees"] == 6 and counts["failed_allocs"] == 1  # 4 temp, release, host
    assert (
        "3.50 MiB" in p.meta["info:allocated"] and "64.00 KiB" in p.meta["info:pinned host memory"]
    )


def test_free_times_and_labels_follow_each_allocation():
    p = build(pattern_log())
    free_ns = p.meta["free_time_ns"]
    assert len(free_ns) == len(p)
    live_at_end = {
        ";".join(p.stack_names(int(p.sample_stack[i])))
        for i in range(len(p))
        if free_ns[i] < 0 and p.values[i, p.type_index("alloc-count")]
    }
    assert live_at_end == {"keep;cudaMalloc", "driver;cuMemAlloc_v2"}
    for i in range(len(p)):
        if free_ns[i] >= 0:
            assert free_ns[i] > p.timestamps[i]
    memories = {p.labels_of(i)["memory"] for i in range(len(p))}
    assert memories == {"device", "host"}


def test_timeline_blocks_give_the_live_bytes_at_every_point():
    p = build(pattern_log())
    tl = p.meta["memory_timeline"]
    b = tl["blocks"]
    first = b["first_sample"]
    for k, live in enumerate(tl["live_bytes"]):
        held = sum(
            s for s, a, f in zip(b["size"], b["alloc"], b["free"], strict=True) if a <= k < f
        )
        assert held == live
    # the blocks are the first samples, in order: their stacks hold the GPU allocations
    sizes = p.values[first : first + len(b["size"]), p.type_index("alloc-bytes")]
    assert sizes.tolist() == b["size"]


def test_frees_that_pair_with_nothing_change_nothing():
    log, now = EventLog(), Clock()
    log(record("cudaMalloc", now(), args=[0x10, 100], result=0xA000, stack=[0x100]))
    log(record("cudaFree", now(), args=[0], stack=[0x200]))  # free(NULL): a no-op
    log(record("cudaFree", now(), args=[0xA000], ret=1, stack=[0x200]))  # failed: still live
    log(record("cudaFree", now(), args=[0xF000], stack=[0x200]))  # allocated before recording
    allocs = replay(log.memory_events())
    assert allocs.free_ns.tolist() == [-1]
    c = allocs.counts
    assert (c["null_frees"], c["failed_frees"], c["unmatched_frees"], c["frees"]) == (1, 1, 1, 0)
    p = build(log)
    assert by_stack(p, "peak-bytes") == {"keep;cudaMalloc": 100}
    assert "1 frees of memory allocated before recording" in p.meta["info:memory calls"]


def test_a_reused_address_without_a_free_seen_ends_the_older_allocation():
    log, now = EventLog(), Clock()
    log(record("cudaMalloc", now(), args=[0x10, 100], result=0xA000, stack=[0x100]))
    log(record("cudaMalloc", now(), args=[0x10, 30], result=0xA000, stack=[0x200]))
    allocs = replay(log.memory_events())
    assert allocs.counts["unseen_frees"] == 1
    assert allocs.free_ns.tolist() == [allocs.alloc_ns[1], -1]
    assert build(log).meta["peak_bytes"] == 100


def test_allocations_are_live_from_return_to_the_entry_of_the_free():
    # Thread 2's free enters while thread 1's allocation of another block is still inside
    # cudaMalloc: at no moment were both blocks live.
    log = EventLog()
    log(record("cudaMalloc", 100, args=[0x10, 50], result=0xA000, duration=10, tid=1))
    log(record("cudaMalloc", 200, args=[0x10, 70], result=0xB000, duration=100, tid=1))
    log(record("cudaFree", 250, args=[0xA000], duration=100, tid=2))
    p = build(log)
    assert p.meta["peak_bytes"] == 70
    assert p.meta["memory_timeline"]["live_bytes"] == [50, 0, 70]


def test_each_process_has_its_own_peak_and_the_highest_makes_the_timeline():
    log, now = EventLog(), Clock()
    log(record("cudaMalloc", now(), args=[0x10, 10], result=0xA000, pid=1, tid=1))
    log(record("cudaMalloc", now(), args=[0x10, 500], result=0xA000, pid=2, tid=2))
    log(record("cudaFree", now(), args=[0xA000], pid=2, tid=2))
    log(record("cudaMalloc", now(), args=[0x10, 20], result=0xB000, pid=1, tid=1))
    p = build(log)
    assert p.meta["peak_pid"] == 2 and p.meta["peak_bytes"] == 500
    peak = p.type_index("peak-bytes")
    by_pid = {}
    for i in range(len(p)):
        pid = p.labels_of(i)["pid"]
        by_pid[pid] = by_pid.get(pid, 0) + p.values[i, peak]
    assert by_pid == {"1": 30, "2": 500}  # the address 0xA000 is per process
    assert "PID 1 30 bytes" in p.meta["info:peaks by process"]


def test_long_streams_are_decimated_and_the_blocks_stay_exact_at_kept_points():
    rng = np.random.default_rng(7)
    log, now = EventLog(), Clock()
    live: list[int] = []
    for i in range(6000):
        if live and rng.random() < 0.45:
            a = live.pop(int(rng.integers(len(live))))
            log(record("cudaFree", now(), args=[a]))
        else:
            a = 0x10000000 + i * 0x1000
            log(record("cudaMalloc", now(), args=[0x10, int(rng.integers(1, 1 << 20))], result=a))
            live.append(a)
    p = build(log)
    tl = p.meta["memory_timeline"]
    assert len(tl["live_bytes"]) < tl["points"] <= 6000
    assert max(tl["live_bytes"]) == p.meta["peak_bytes"]
    b = tl["blocks"]
    size, alloc, free = (np.array(b[k]) for k in ("size", "alloc", "free"))
    for k in range(0, len(tl["live_bytes"]), 97):
        assert size[(alloc <= k) & (k < free)].sum() == tl["live_bytes"][k]


def test_no_allocation_at_all():
    log, now = EventLog(), Clock()
    log(record("cudaMalloc", now(), args=[0x10, 64], ret=100, stack=[0x600]))  # no device
    log(record("cudaFree", now(), args=[0x1234], ret=100, stack=[0x600]))
    p = build(log)
    assert "memory_timeline" not in p.meta and "peak_bytes" not in p.meta
    assert by_stack(p, "failed-alloc-count") == {"oom;cudaMalloc": 1}
    assert p.meta["memory_counts"]["failed_frees"] == 1


def test_continuous_periods_keep_what_was_live_at_each_process_peak():
    """The agent's live memory, one period at a time: in-use is what was live at the
    process's peak in the period (allocations carried from earlier periods included), not
    what is left at its end; a period without events peaks at its start."""
    from aiflame.collectors.ebpf.cuda_memory import LiveMemory

    log = pattern_log()
    end_of_pattern = int(log.memory_events()["ts"].max()) + 10_000
    now, late = Clock(), 0x7F0000000000
    now.t = end_of_pattern + 1_000_000
    for api, size, ptr, site in (
        ("cudaMalloc", 4 * MiB, late, 0x800),  # live 7.5 MiB: this period's peak
        ("cudaFree", 0, late, 0x800),
        ("cudaFree", 0, 0x7E0000000000, 0x100),  # one kept block freed: live 2.5
    ):
        args = [0x10, size] if api == "cudaMalloc" else [ptr]
        log(record(api, now(), args=args, result=ptr if size else 0, duration=400,
                   stack=[site], pid=100, tid=100))  # fmt: skip
    events = log.memory_events()
    first, third = events[events["ts"] < end_of_pattern], events[events["ts"] > end_of_pattern]
    live = LiveMemory()
    names = {**SITES, 0x800: "late"}

    def inuse(sites) -> dict[str, tuple[int, int]]:
        return {
            names[log.stacks[stack][-1]]: (s.inuse_bytes, s.inuse_count)
            for (_pid, stack, _api), s in sites.items()
            if s.inuse_count
        }

    assert inuse(live.period(first)) == {
        "keep": (3 * MiB, 3), "driver": (MiB // 2, 1), "peak": (8 * MiB, 1),
    }  # fmt: skip
    assert inuse(live.period(events[:0])) == {"keep": (3 * MiB, 3), "driver": (MiB // 2, 1)}
    sites = live.period(third)
    assert inuse(sites) == {"keep": (3 * MiB, 3), "driver": (MiB // 2, 1), "late": (4 * MiB, 1)}
    late_site = next(s for (_, st, _), s in sites.items() if log.stacks[st][-1] == 0x800)
    assert (late_site.alloc_bytes, late_site.alloc_count) == (4 * MiB, 1)
    assert inuse(live.period(events[:0])) == {"keep": (2 * MiB, 2), "driver": (MiB // 2, 1)}
