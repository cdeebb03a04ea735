"""Decoding the CUDA probes' records and the profile of the calls, on hand-built records."""

from __future__ import annotations

import struct

import pytest
from cuda_records import HDR, record

from aiflame.collectors.ebpf.cuda_apis import API_INDEX
from aiflame.collectors.ebpf.cuda_events import CallSum, EventLog
from aiflame.collectors.ebpf.cuda_profile import (
    ALLOC_BYTES,
    ALLOC_COUNT,
    CALLS,
    COPY_BYTES,
    LAUNCHES,
    SAMPLE_TYPES,
    SYNC_NS,
    calls_profile,
)
from aiflame.model import FrameKind

# A made-up program: function -> [start, end)
FUNCS = {
    "main": (0x1000, 0x1100),
    "alloc_site": (0x1100, 0x1200),
    "launch_site": (0x1200, 0x1300),
    "copy_site": (0x1300, 0x1400),
    "sync_site": (0x1400, 0x1500),
    "_ZN4test6kernelEPfi": (0x2000, 0x2010),  # a kernel's host stub
}
MAIN_RET = 0x1050  # return address in main after a call
A_RET, L_RET, C_RET, S_RET = 0x1180, 0x1280, 0x1380, 0x1480


def symbolize(pid: int, addrs, exact: bool):
    out = []
    for a in addrs:
        at = a if exact else a - 1
        name = next((n for n, (lo, hi) in FUNCS.items() if lo <= at < hi), f"prog+{at:#x}")
        out.append((name, FrameKind.NATIVE, "prog"))
    return out


def names(profile, metric: str) -> dict[str, float]:
    col = profile.type_index(metric)
    return {";".join(profile.stack_names(s)): v for s, v in profile.iter_stack_values(col) if v}


def feed(*records: bytes) -> EventLog:
    log = EventLog()
    for r in records:
        log(r)
    return log


def test_entry_stacks_get_the_caller_back_once():
    # Kernels before 6.11 lose the caller at a uprobe on a function's entry: the stack
    # starts with the caller's caller; newer kernels put it in. Both give the same stack.
    old = record("cudaLaunchKernel", 1, args=[0x2000], stack=[MAIN_RET], caller=L_RET)
    new = record("cudaLaunchKernel", 2, args=[0x2000], stack=[L_RET, MAIN_RET], caller=L_RET)
    log = feed(old, new)
    assert log.stacks == [(L_RET, MAIN_RET)]
    (key,) = log.calls
    assert log.calls[key].calls == 2 and key.target == 0x2000


def test_launches_named_from_the_host_stub_and_demangled_by_the_symbolizer():
    log = feed(
        *[record("cudaLaunchKernel", t, args=[0x2000], stack=[L_RET, MAIN_RET]) for t in range(5)]
    )
    p = calls_profile(log, symbolize)
    assert names(p, "launch-count") == {
        "main;launch_site;cudaLaunchKernel;-;_ZN4test6kernelEPfi": 5
    }
    kinds = [p.frames.get(f).kind for f in p.stacks.frames_of(int(p.sample_stack[0]))]
    assert kinds[-3:] == [FrameKind.RUNTIME, FrameKind.DELIMITER, FrameKind.GPU_KERNEL]
    assert [t.name for t in p.sample_types] == [t.name for t in SAMPLE_TYPES]
    assert p.meta["default_type"] == LAUNCHES


def test_driver_launches_named_at_module_load_and_through_kernel_aliases():
    f_a, k_b, f_b = 0x5000, 0x6000, 0x7000
    log = feed(
        record("cuModuleGetFunction", 1, args=[0, 0, 0], result=f_a, name=b"_ZN6driver1aEv"),
        record("cuLibraryGetKernel", 2, result=k_b, name=b"_Z1bPf"),
        record("cuKernelGetFunction", 3, args=[0, k_b], result=f_b, stack=[L_RET]),
        *[record("cuLaunchKernel", 10 + i, args=[f_a], stack=[L_RET, MAIN_RET]) for i in range(3)],
        *[record("cuLaunchKernel", 20 + i, args=[f_b], stack=[L_RET, MAIN_RET]) for i in range(2)],
        record("cuLaunchKernel", 30, args=[0x9999], stack=[L_RET, MAIN_RET]),
    )
    p = calls_profile(log, symbolize)
    assert names(p, "launch-count") == {
        "main;launch_site;cuLaunchKernel;-;driver::a()": 3,
        "main;launch_site;cuLaunchKernel;-;b(float*)": 2,
        "main;launch_site;cuLaunchKernel;-;[unknown kernel]": 1,
    }
    assert log.count({"alias"}) == 0  # naming calls are not calls of the profile


def test_an_alias_recorded_before_its_kernel_name_is_resolved_later():
    log = feed(
        record("cuKernelGetFunction", 1, args=[0, 0x6000], result=0x7000, stack=[L_RET]),
        record("cuLibraryGetKernel", 2, result=0x6000, name=b"late_kernel"),
    )
    assert log.kernel_name(100, 0x7000) == "late_kernel"


def test_failed_allocations_are_calls_with_an_error_not_bytes():
    log = feed(
        record("cudaMalloc", 1, args=[0x10, 4096], ret=0, result=0xA000, stack=[A_RET], duration=5),
        record("cudaMalloc", 2, args=[0x10, 1 << 40], ret=2, stack=[A_RET], duration=5),
        record("cudaMalloc", 3, args=[0x10, 1 << 40], ret=2, stack=[A_RET], duration=5),
    )
    p = calls_profile(log, symbolize)
    assert names(p, "alloc-bytes") == {"alloc_site;cudaMalloc": 4096}
    assert names(p, "alloc-count") == {"alloc_site;cudaMalloc": 1}
    assert names(p, "api-calls") == {"alloc_site;cudaMalloc": 3}
    errors = {p.labels_of(i).get("error") for i in range(len(p))}
    assert errors == {None, "2"}
    assert {p.labels_of(i)["memory"] for i in range(len(p))} == {"device"}


def test_sync_time_copies_and_graphs():
    log = feed(
        record("cudaStreamSynchronize", 1, duration=1500, stack=[S_RET, MAIN_RET]),
        record("cudaStreamSynchronize", 2, duration=2500, stack=[S_RET, MAIN_RET]),
        record("cudaMemcpy", 3, args=[0, 0, 4096, 1], stack=[C_RET]),  # HtoD
        record("cudaMemcpyAsync", 4, args=[0, 0, 100, 2], stack=[C_RET]),  # DtoH
        record("cudaMemcpy2D", 5, args=[0, 64, 0, 64, 16, 8, 3], stack=[C_RET]),  # 16 x 8 DtoD
        record("cuMemcpyDtoH_v2", 6, args=[0, 0, 7], stack=[C_RET]),
        record("cuMemcpy", 7, args=[0, 0, 9], stack=[C_RET]),
        record("cudaGraphLaunch", 8, args=[0x77, 0], stack=[L_RET]),
    )
    p = calls_profile(log, symbolize)
    assert names(p, "sync-time") == {"main;sync_site;cudaStreamSynchronize": 4000}
    assert names(p, "copy-bytes") == {
        "copy_site;cudaMemcpy;-;Memcpy HtoD": 4096,
        "copy_site;cudaMemcpyAsync;-;Memcpy DtoH": 100,
        "copy_site;cudaMemcpy2D;-;Memcpy DtoD": 128,
        "copy_site;cuMemcpyDtoH_v2;-;Memcpy DtoH": 7,
        "copy_site;cuMemcpy;-;Memcpy default": 9,
    }
    assert names(p, "launch-count") == {"launch_site;cudaGraphLaunch;-;[CUDA graph]": 1}
    graph = next(i for i in range(len(p)) if p.values[i, LAUNCHES])
    assert p.stack_frames(int(p.sample_stack[graph]))[-1].kind == FrameKind.LABEL
    # every call is in api-calls, and no metric leaks into another
    totals = p.totals()
    assert totals[CALLS] == 8 and totals[SYNC_NS] == 4000 and totals[COPY_BYTES] == 4340
    assert totals[ALLOC_BYTES] == totals[ALLOC_COUNT] == 0


def test_memory_events_are_kept_one_by_one_in_arrival_order():
    recs = [
        record("cudaMalloc", 10, args=[0x10, 64], result=0xA000, duration=3, stack=[A_RET]),
        record("cudaFree", 20, args=[0xA000], duration=2, stack=[A_RET, MAIN_RET]),
        record("cudaLaunchKernel", 30, args=[0x2000], stack=[L_RET]),
    ]
    log = feed(*recs)
    ev = log.memory_events()
    assert ev["api"].tolist() == [API_INDEX["cudaMalloc"], API_INDEX["cudaFree"]]
    assert ev["result"].tolist() == [0xA000, 0]
    assert [log.stacks[s] for s in ev["stack"].tolist()] == [(A_RET,), (A_RET, MAIN_RET)]
    assert ev["duration"].tolist() == [3, 2]
    assert log.first_ts == 10 and log.last_ts == 30


def test_unknown_functions_and_faulted_names_are_counted_not_fatal():
    bad = bytearray(record("cudaLaunchKernel", 1, args=[1], stack=[L_RET]))
    struct.pack_into("<H", bad, HDR.size - 8, 65000)  # an api id this aiflame does not know
    fault = bytearray(record("cuModuleGetFunction", 2, result=0x5000, name=b""))
    fault[HDR.size - 5] |= 2  # F_NAME_FAULT
    log = feed(bytes(bad), bytes(fault))
    assert log.records == 2 and not log.calls and log.name_faults == 1


@pytest.mark.parametrize("api", ["cudaMallocHost", "cudaHostAlloc", "cuMemAllocHost_v2"])
def test_pinned_host_allocations_are_labelled_host(api):
    log = feed(record(api, 1, args=[0x10, 256], result=0xB000, stack=[A_RET]))
    p = calls_profile(log, symbolize)
    assert p.labels_of(0)["memory"] == "host" and names(p, "alloc-bytes")


def test_sums_read_from_the_kernel_join_the_events():
    log = feed(
        record("cuModuleGetFunction", 1, result=0x5000, name=b"_ZN6driver1aEv"),
        record("cudaLaunchKernel", 2, args=[0x2000], stack=[L_RET, MAIN_RET]),  # one event
    )
    # (pid, tid, api, error, stack innermost first, caller, target, sums)
    launch, memcpy = API_INDEX["cudaLaunchKernel"], API_INDEX["cudaMemcpy"]
    log.add_sum(100, 100, launch, 0, (MAIN_RET,), L_RET, 0x2000, CallSum(4, 0, 0, 0))
    log.add_sum(100, 100, API_INDEX["cuLaunchKernel"], 0, (L_RET,), L_RET, 0x5000, CallSum(3))
    log.add_sum(100, 100, memcpy, 0, (C_RET,), C_RET, 2, CallSum(2, 0, 512, 0))
    log.add_sum(100, 100, API_INDEX["cudaDeviceSynchronize"], 999, (S_RET,), S_RET, 0,
                CallSum(1, 70, 0, 0))  # fmt: skip
    p = calls_profile(log, symbolize)
    assert names(p, "launch-count") == {
        "main;launch_site;cudaLaunchKernel;-;_ZN4test6kernelEPfi": 5,  # caller put back
        "launch_site;cuLaunchKernel;-;driver::a()": 3,
    }
    assert names(p, "copy-bytes") == {"copy_site;cudaMemcpy;-;Memcpy DtoH": 512}
    assert names(p, "sync-time") == {"sync_site;cudaDeviceSynchronize": 70}
    assert {p.labels_of(i).get("error") for i in range(len(p))} == {None, "999"}
    log.summed.clear()  # read again: the kernel's totals replace the previous reading
    assert log.count({"launch"}) == 1
