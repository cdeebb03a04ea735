"""GPU instruction-level samples: the sample type, frame names, stall labels and classes.

Every PC-sampling source (HPCToolkit, rocprofv3, Nsight Compute, CUPTI dumps, iaprof)
builds the same picture above the GPU kernel:

    CPU frames ; runtime call ; - ; kernel ; source line(s) ; instruction ; stall reason

Source lines are ``gpu-source`` frames named ``file:line`` (one per inline level, outermost
first), instructions ``gpu-instruction`` frames named ``MNEMONIC operands @ +0xoffset``
(the offset, function-relative, is also the frame's address), and the stall reason is a
``gpu-stall`` leaf frame with the vendor's own name. Each sample also carries the labels
``stall`` (that name) and ``stall_class`` (one of :data:`STALL_CLASSES`), which colour the
stall frames and sort them in the page's legend, whatever the vendor.
"""

from __future__ import annotations

import os
import re

from aiflame.model.profile import SampleType

GPU_SAMPLES = SampleType("gpu-samples", "count")

STALL_LABEL = "stall"
STALL_CLASS_LABEL = "stall_class"

# meta keys: how long one sample stands for, where the source says it.
META_PERIOD = "gpu_sample_period"  # number, e.g. 1024
META_PERIOD_UNIT = "gpu_sample_period_unit"  # "cycles" or "nanoseconds"
META_JOIN = "gpu_samples_join"  # how samples met their launch stacks (see transforms/gpujoin)
# A trace's GPU launches: {"correlation": int64 array, "stack": int64 array of the stack of
# the CPU call that launched each (-1: unknown)}; Profile.with_stacks keeps it valid.
LAUNCHES = "gpu_launches"

MEMORY = "memory latency"
SHORT_DEPENDENCY = "short dependency"
SYNCHRONIZATION = "synchronization"
FRONT_END = "front end"
PIPE = "scheduler/pipe"
ISSUED = "issued"
OTHER = "other"

# Legend order: the classes a kernel engineer acts on first come first.
STALL_CLASSES = (MEMORY, SHORT_DEPENDENCY, SYNCHRONIZATION, FRONT_END, PIPE, ISSUED, OTHER)

# Vendor reason names (lowercase, prefixes such as smsp__pcsamp_warps_issue_stalled_
# removed) -> class. NVIDIA names are those of CUPTI's PC Sampling API and Nsight Compute;
# HPCToolkit's are the legacy CUPTI activity reasons (GINS:STL_*); AMD's are rocprofiler's
# stochastic-sampling reasons; Intel's are the EU stall types.
_CLASS_OF: dict[str, str] = {
    # NVIDIA (Volta and later)
    "long_scoreboard": MEMORY,
    "imc_miss": MEMORY,
    "drain": MEMORY,
    "lg_throttle": PIPE,
    "mio_throttle": PIPE,
    "tex_throttle": PIPE,
    "math_pipe_throttle": PIPE,
    "dispatch_stall": PIPE,
    "dispatch": PIPE,
    "not_selected": PIPE,
    "short_scoreboard": SHORT_DEPENDENCY,
    "wait": SHORT_DEPENDENCY,
    "barrier": SYNCHRONIZATION,
    "membar": SYNCHRONIZATION,
    "sleeping": SYNCHRONIZATION,
    "sleep": SYNCHRONIZATION,
    "no_instructions": FRONT_END,
    "no_inst": FRONT_END,
    "branch_resolving": FRONT_END,
    "selected": ISSUED,
    "misc": OTHER,
    # Nsight Compute CSV short names
    "long_sb": MEMORY,
    "short_sb": SHORT_DEPENDENCY,
    "imc": MEMORY,
    "lg": PIPE,
    "mio": PIPE,
    "tex": PIPE,
    "math": PIPE,
    # HPCToolkit / legacy CUPTI activity reasons
    "stl_none": ISSUED,
    "stl_ifet": FRONT_END,
    "stl_idep": SHORT_DEPENDENCY,
    "stl_gmem": MEMORY,
    "stl_tmem": MEMORY,
    "stl_cmem": MEMORY,
    "stl_sync": SYNCHRONIZATION,
    "stl_pipe": PIPE,
    "stl_mthr": PIPE,
    "stl_nsel": PIPE,
    "stl_othr": OTHER,
    "stl_slp": SYNCHRONIZATION,
    # AMD (rocprofiler-sdk stochastic PC sampling)
    "no_instruction_available": FRONT_END,
    "alu_dependency": SHORT_DEPENDENCY,
    "waitcnt": MEMORY,
    "internal_instruction": OTHER,
    "barrier_wait": SYNCHRONIZATION,
    "arbiter_not_win": PIPE,
    "arbiter_win_ex_stall": PIPE,
    "other_wait": OTHER,
    "sleep_wait": SYNCHRONIZATION,
    "issued": ISSUED,
    # Intel EU stalls (iaprof)
    "active": ISSUED,
    "control": FRONT_END,
    "pipestall": PIPE,
    "send": MEMORY,
    "dist_acc": SHORT_DEPENDENCY,
    "sbid": MEMORY,
    "sync": SYNCHRONIZATION,
    "inst_fetch": FRONT_END,
    "tdr": OTHER,
    "other": OTHER,
}

_PREFIXES = ("smsp__pcsamp_warps_issue_stalled_", "stall_", "gins:")


def reason_key(reason: str) -> str:
    """The vendor-neutral lookup key of a reason name (lowercase, prefixes removed)."""
    key = reason.strip().lower()
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


def stall_class(reason: str) -> str:
    """The normalized class of a vendor's stall reason name; unknown names are ``other``."""
    return _CLASS_OF.get(reason_key(reason), OTHER)


NVIDIA_STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
NOT_ISSUED_SUFFIX = "_not_issued"


def is_not_issued_subset(reason: str) -> bool:
    """NVIDIA's ``*_not_issued`` reasons count samples already counted by their reason."""
    return reason.strip().lower().endswith(NOT_ISSUED_SUFFIX)


def nvidia_reason_name(counter: str) -> str:
    """``smsp__pcsamp_warps_issue_stalled_long_scoreboard`` -> ``long_scoreboard``."""
    return (
        counter[len(NVIDIA_STALL_PREFIX) :] if counter.startswith(NVIDIA_STALL_PREFIX) else counter
    )


def source_line_name(file: str, line: int) -> str:
    """``loops.cu:12``: the frame name of a GPU source line (the file's base name)."""
    base = os.path.basename(file) if file else "??"
    return f"{base}:{line}" if line > 0 else base


_SPACES = re.compile(r"\s+")


def instruction_name(text: str, offset: int) -> str:
    """``LDG.E R3, [R2.64] @ +0xe0``: an instruction's text (spaces squeezed, ``;`` dropped)
    and its function-relative offset; just ``+0xe0`` when the text is unknown."""
    clean = _SPACES.sub(" ", text.replace(";", " ")).strip()
    return f"{clean} @ +{offset:#x}" if clean else f"+{offset:#x}"
