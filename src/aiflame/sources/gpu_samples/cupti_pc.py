"""CUPTI PC Sampling API dumps: the ``.dat`` files of NVIDIA's PC Sampling Utility and of the
``pc_sampling_continuous`` injection library (and of ``aiflame record --gpu-pc-sampling``).

Each PC record names its cubin (by CRC), its function, its offset in that function and,
per stall reason, a sample count. The counting rule is CUPTI's: a sample is counted once,
by its reason; the ``*_not_issued`` reasons count a subset of those same samples again and
are left out (a buffer's ``totalSamples`` equals the sum of the other reasons).

The cubins that ran are looked for beside the dump (``*.cubin``, as the injection library
writes them as ``1.cubin``, ``2.cubin``..., in a ``cubins/`` folder, or in ``NAME.cubins/``
for ``NAME.dat`` as ``aiflame record --gpu-pc-sampling`` writes them); each is matched by
its ``cuptiGetCubinCrc``, and then every PC gets its SASS text and its source line(s) from
the cubin symbolizer. Without the cubin (or without NVIDIA's tools), the instruction is
named by its offset alone.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict

from aiflame.errors import InputError
from aiflame.model import Profile, ProfileBuilder, gpu
from aiflame.sources.gpu_samples.cupti_pc_file import DumpError, is_dump, read_dump
from aiflame.sources.gpu_samples.stacks import GpuStacks
from aiflame.sources.inputs import Input
from aiflame.symbolize import cubin as cubins
from aiflame.symbolize.cxa import demangle_all

FORMAT = "cupti-pc"
COLLECTION_MODES = {1: "continuous", 2: "kernel-serialized"}


def sniff(head: bytes, path: str) -> bool:
    return is_dump(head)


def load(source: Input, **_: object) -> Profile:
    try:
        buffers = read_dump(source.read_bytes())
    except DumpError as e:
        raise InputError(source.path, str(e)) from None
    if not buffers:
        raise InputError(source.path, "PC sampling file with no buffers")
    found = find_cubins(source.path)
    return build_profile(buffers, found)


def find_cubins(path: str) -> dict[int, cubins.Cubin]:
    """CRC -> symbolized cubin, for the cubins beside a dump (quietly none if the tools
    are missing: the profile then names instructions by offset)."""
    if path == "-" or not os.path.exists(path):
        return {}
    folder = os.path.dirname(os.path.abspath(path))
    own = os.path.splitext(os.path.abspath(path))[0] + ".cubins"  # aiflame record's layout
    out: dict[int, cubins.Cubin] = {}
    for d in (own, folder, os.path.join(folder, "cubins")):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if not name.endswith(".cubin"):
                continue
            try:
                c = cubins.load_cubin_file(os.path.join(d, name))
            except cubins.CubinError as e:
                warnings.warn(f"{e}: no SASS for its samples", stacklevel=1)
                continue
            out[c.crc] = c
    return out


def build_profile(buffers, found: dict[int, cubins.Cubin]) -> Profile:
    b = ProfileBuilder([gpu.GPU_SAMPLES])
    stacks = GpuStacks(b)
    names = demangle_all({r.function_name for buf in buffers for r in buf.records})
    reason_names = {}
    for buf in buffers:
        reason_names.update(buf.reason_names)
    reason_of: dict[int, str | None] = {}
    for idx, raw in reason_names.items():
        reason_of[idx] = None if gpu.is_not_issued_subset(raw) else gpu.nvidia_reason_name(raw)
    counted = dropped = total = 0
    per_pc: dict[tuple, float] = defaultdict(float)
    for buf in buffers:
        total += buf.total_samples
        dropped += buf.dropped_samples
        for r in buf.records:
            for idx, samples in r.stalls:
                reason = reason_of.get(idx, f"reason {idx}")
                if reason is None or samples == 0:
                    continue
                key = (r.cubin_crc, r.function_name, r.pc_offset, r.correlation_id, reason)
                per_pc[key] += samples
                counted += samples
    for (crc, function, offset, corr, reason), samples in per_pc.items():
        kernel = names.get(function, function) or "[unknown kernel]"
        sid = stacks.kernel(kernel)
        cubin = found.get(crc)
        inst = cubin.instruction(function, offset) if cubin else None
        if inst is not None and inst.offset == offset:
            sid = stacks.lines(sid, inst.lines)
            sid = stacks.instruction(sid, inst.text, offset)
        else:
            sid = stacks.instruction(sid, "", offset)
        sid = stacks.stall(sid, reason)
        extra = {"cubin": f"{crc:#x}"}
        if corr:
            extra["correlation"] = str(corr)
        b.add(sid, samples, stacks.labels(reason, extra))
    periods = {buf.sampling_period for buf in buffers if buf.sampling_period}
    if len(periods) == 1:
        b.meta[gpu.META_PERIOD] = 2 ** periods.pop()
        b.meta[gpu.META_PERIOD_UNIT] = "cycles"
    modes = {COLLECTION_MODES.get(buf.collection_mode or 0) for buf in buffers} - {None}
    if modes:
        b.meta["info:cupti_collection_mode"] = ", ".join(sorted(modes))  # type: ignore[arg-type]
    b.meta["cupti_total_samples"] = total
    b.meta["cupti_counted_samples"] = counted
    if dropped:
        b.meta["info:warnings"] = f"CUPTI dropped {dropped} samples (buffers full)"
    missing = {r.cubin_crc for buf in buffers for r in buf.records} - set(found)
    if missing and buffers[0].records:
        b.meta["info:cubins"] = (
            f"no cubin for {len(missing)} CRC(s) beside the dump: instructions named by offset"
        )
    return b.build()
