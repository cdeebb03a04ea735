"""Writing PC Sampling Utility files with NVIDIA's own writer (``CuptiUtilPutPcSampData`` of
``libpcsamplingutil``, PyPI ``nvidia-cuda-cupti``), from records given here.

The records are the caller's (made up, or copied from a real report); the bytes are what
NVIDIA's library writes for them, so the reader is tested against the real format.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

BOOTSTRAP = os.path.join(
    os.path.dirname(__file__), "..", "..", "src", "aiflame", "collectors", "torch_bootstrap"
)
sys.path.insert(0, os.path.abspath(BOOTSTRAP))
import aiflame_cupti_api as api  # noqa: E402

# The reasons of CUPTI's PC Sampling API on Volta and later (cuptiPCSamplingGetStallReasons):
# each with its _not_issued subset. The indices are made up; real ones vary per GPU.
NVIDIA_REASONS = [
    "barrier",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "imc_miss",
    "lg_throttle",
    "long_scoreboard",
    "math_pipe_throttle",
    "membar",
    "mio_throttle",
    "misc",
    "no_instructions",
    "not_selected",
    "selected",
    "short_scoreboard",
    "sleeping",
    "tex_throttle",
    "wait",
]


def reason_table() -> dict[int, str]:
    out = {}
    for i, r in enumerate(NVIDIA_REASONS):
        out[2 * i + 1] = "smsp__pcsamp_warps_issue_stalled_" + r
        out[2 * i + 2] = "smsp__pcsamp_warps_issue_stalled_" + r + "_not_issued"
    return out


@dataclass
class Rec:
    crc: int
    function: str
    offset: int
    stalls: Sequence[tuple[int, int]]  # (reason index, samples)
    correlation: int = 0
    function_index: int = 0


@dataclass
class Buf:
    records: Sequence[Rec]
    total: int | None = None  # default: the counting rule applied to the records
    dropped: int = 0
    range_id: int = 0
    keep: list = field(default_factory=list)


def find_util() -> str | None:
    for p in sys.path:
        found = sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libpcsamplingutil.so")))
        if found:
            return found[0]
    return None


def write_dump(
    path: str,
    buffers: Sequence[Buf],
    reasons: dict[int, str],
    period: int = 10,
    mode: int = api.COLLECTION_MODE_KERNEL_SERIALIZED,
) -> None:
    lib = ctypes.CDLL(find_util())
    names = [n.encode() for n in reasons.values()]
    idx = list(reasons)
    n = len(idx)
    table = api.PcSamplingStallReasons(
        n, (ctypes.c_char_p * n)(*names), (ctypes.c_uint32 * n)(*idx)
    )
    for k, buf in enumerate(buffers):
        keep = []
        recs = (api.PCSamplingPCData * len(buf.records))()
        counted = 0
        for r, rec in zip(recs, buf.records, strict=True):
            sr = (api.PCSamplingStallReason * len(rec.stalls))(*rec.stalls)
            keep += [sr, rec.function.encode()]
            r.size = ctypes.sizeof(api.PCSamplingPCData)
            r.cubinCrc = rec.crc
            r.pcOffset = rec.offset
            r.functionIndex = rec.function_index
            r.functionName = keep[-1]
            r.stallReasonCount = len(rec.stalls)
            r.stallReason = ctypes.cast(sr, ctypes.POINTER(api.PCSamplingStallReason))
            r.correlationId = rec.correlation
            counted += sum(s for i, s in rec.stalls if not reasons[i].endswith("_not_issued"))
        d = api.PCSamplingData()
        d.size = ctypes.sizeof(api.PCSamplingData)
        d.collectNumPcs = d.totalNumPcs = len(buf.records)
        d.totalSamples = counted if buf.total is None else buf.total
        d.droppedSamples = buf.dropped
        d.rangeId = buf.range_id
        d.pPcData = ctypes.cast(recs, ctypes.POINTER(api.PCSamplingPCData))
        cfg = (api.PCSamplingConfigurationInfo * 3)()
        cfg[0].attributeType = api.ATTR_STALL_REASON
        cfg[0].attributeData.stallReasonData.stallReasonCount = n
        sel = (ctypes.c_uint32 * n)(*idx)
        cfg[0].attributeData.stallReasonData.pStallReasonIndex = sel
        cfg[1].attributeType = api.ATTR_SAMPLING_PERIOD
        cfg[1].attributeData.samplingPeriod = period
        cfg[2].attributeType = api.ATTR_COLLECTION_MODE
        cfg[2].attributeData.collectionMode = mode
        params = api.PutPcSampDataParams(
            api.struct_size(api.PutPcSampDataParams, "fileName"),
            api.PC_SAMPLING_BUFFER_PC_TO_COUNTER_DATA,
            ctypes.addressof(d),
            3,
            cfg,
            ctypes.pointer(table) if k == 0 else None,  # names once, as the sample does
            path.encode(),
        )
        rc = lib.CuptiUtilPutPcSampData(ctypes.byref(params))
        if rc != 0:
            raise RuntimeError(f"CuptiUtilPutPcSampData failed: {rc}")
        del keep
