"""A :class:`RawProfile` of the eBPF CPU sampler as a Profile with the ``cpu-samples`` metric.

Stacks read root first: (a process frame, with several processes), the user frames from
the outermost caller to the interrupted function, then the kernel frames. In a Python
thread whose frames the kernel walked, the user part is the Python stack (outermost call
first, named like the PyTorch profiler's frames) followed by the native frames the Python
code called into: those above the interpreter's own frames (``_PyEval_EvalFrameDefault``
and its helpers, which the Python frames stand for), so a stack reads ``train >
Linear > forward > at::native::addmm > mkl_sgemm > [kernel]``. Every address
becomes a frame: unknown ones show as ``module+0xOFFSET`` (or ``[unknown]`` outside every
mapping), a stack the kernel could not record as a labelled placeholder, so samples are
never dropped. Labels: pid, tid, comm (the thread's name), process, cgroup, and for
Python threads gil (``held``, or ``released``: running native code that let go of it, such
as most PyTorch operators, or waiting for it).

A user stack that does not reach a thread or process start function (``_start``,
``__libc_start_main``, ``start_thread``, ``clone``...) was cut short: the unwinder follows
frame pointers and stops at the first function built without them, or at the depth limit.
Their share is recorded in the profile's meta (``aiflame info`` shows it). Without the C
library's debug symbols (``libc6-dbg``) its start functions have no name (glibc does not
export ``__libc_start_call_main`` or ``start_thread``): there a stack whose outermost frame
is an address of the C library or the dynamic loader that no symbol names counts as
complete. (A walk that broke inside another unexported libc function, such as qsort's
callback caller, then counts as complete too.)
"""

from __future__ import annotations

import errno
import functools
import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiflame.collectors.ebpf.cgroups import cgroup_paths
from aiflame.collectors.ebpf.pycode import PyFunction, called_from_python
from aiflame.collectors.ebpf.sampler import (
    GIL_HELD,
    GIL_RELEASED,
    MAX_STACK_DEPTH,
    RawProfile,
    SampleKey,
)
from aiflame.model import Frame, FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.symbolize.process import UNKNOWN_NAME, Symbol, SymbolResolver
from aiflame.symbolize.pyframes import PythonNaming

CPU_SAMPLES = SampleType("cpu-samples", "count")
# Where a complete user stack ends (glibc, musl, Go, Rust/C++ runtimes, the dynamic loader).
START_FUNCTIONS = frozenset(
    {
        "_start",
        "__libc_start_main",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "start_thread",
        "clone",
        "clone3",
        "__clone",
        "__clone3",
        "__clone_internal",
        "thread_start",
        "_dl_start_user",
        "_dl_start",
        "runtime.goexit",
        "runtime.goexit.abi0",
        "runtime.rt0_go",
        "runtime.rt0_go.abi0",
        "runtime.mstart",
    }
)
# glibc's and musl's C library and dynamic loader, by file name.
_C_RUNTIME = re.compile(r"^(?:libc\.so\.\d+|ld-linux[-\w.]*\.so\.\d+|(?:ld|libc)-musl-\w+\.so\.1)$")
_STACK_LOST = {-errno.ENOMEM: "[stack lost: stack map full]"}
USER_STACK_MISSING = "[user stack unreadable]"
PYTHON_FRAME_UNREADABLE = "[Python frame unreadable]"
# Python threads on a CPU: holding the GIL, or not (in native code that released it)
GIL_LABELS = {GIL_HELD: "held", GIL_RELEASED: "released"}
TRUNCATED_COMMENT = "aiflame truncated user stacks:"
PYTHON_COMMENT = "Python stacks:"
NO_USER_STACK = -1  # a kernel thread's


@dataclass
class StackStats:
    user_stacks: int = 0  # samples with a user stack
    truncated: int = 0  # of those, cut short
    at_depth_limit: int = 0  # of those, at the unwinder's depth limit
    python: int = 0  # of those, with the Python stack walked in the kernel

    @property
    def truncated_share(self) -> float:
        return self.truncated / self.user_stacks if self.user_stacks else 0.0


@functools.lru_cache(maxsize=1 << 16)  # a symbol on a thousand stacks is one frame
def _frame(sym: Symbol) -> Frame:
    module = sym.module.rsplit("/", 1)[-1] if sym.module else ""
    return Frame(sym.name, sym.kind, module=module)


class _UserSymbols:
    """Symbols of one process's user addresses, trying each maps snapshot, newest first
    (an older one is parsed only for addresses the newer ones do not cover)."""

    def __init__(self, resolver: SymbolResolver, pid: int, texts: Sequence[str]) -> None:
        self.resolver = resolver
        self.pid = pid
        self.texts = list(reversed(texts)) or [""]

    def symbolize(self, addrs: list[int]) -> dict[int, Symbol]:
        out: dict[int, Symbol] = {}
        todo = sorted(set(addrs))
        for text in self.texts:
            if not todo:
                break
            psym = self.resolver.process(self.pid, text)
            missing = []
            for a, sym in zip(todo, psym.symbolize(todo), strict=True):
                if sym.name == UNKNOWN_NAME and not sym.module:
                    missing.append(a)
                    out.setdefault(a, sym)
                else:
                    out[a] = sym
            todo = missing
        return out


def _reaches_start(syms: list[Symbol]) -> bool:
    """Whether a user stack (innermost first) reaches its thread's or process's start: a
    start function in it, or an unnamed address of the C library outermost (its start
    functions where libc's debug symbols are not installed)."""
    # glibc's internal aliases (__GI___clone) name the same functions
    if any(s.name.removeprefix("__GI_") in START_FUNCTIONS for s in syms):
        return True
    if not syms:
        return False
    outer = syms[-1]
    base = os.path.basename(outer.module)
    return bool(_C_RUNTIME.match(base)) and outer.name.startswith(f"{base}+0x")


def _lookup_addresses(stack: tuple[int, ...]) -> list[int]:
    """Addresses to symbolize: return addresses minus one, so they fall inside the call
    (a call that ends a function would otherwise name the next function)."""
    return [stack[0], *(a - 1 for a in stack[1:])] if stack else []


class _PythonFrames:
    """Python stacks of ``raw`` as model frames, each function named once."""

    def __init__(self, raw: RawProfile, naming: PythonNaming) -> None:
        self.raw = raw
        self.naming = naming
        self._named: dict[PyFunction | None, Frame] = {}

    def of(self, key: SampleKey) -> list[Frame] | None:
        """The sample's Python frames, outermost first; None when it has none."""
        if key.python_stack < 0:
            return None
        functions = self.raw.python_frames.get((key.pid, key.python_stack))
        if not functions:
            return None
        return [self._frame(f) for f in reversed(functions)]

    def _frame(self, function: PyFunction | None) -> Frame:
        frame = self._named.get(function)
        if frame is None:
            if function is None:
                frame = Frame(PYTHON_FRAME_UNREADABLE, FrameKind.LABEL)
            else:
                named = self.naming.code(function.qualname, function.file, function.first_line)
                frame = Frame(named.name, FrameKind.PYTHON, named.file, named.line)
            self._named[function] = frame
        return frame


@dataclass
class StackCache:
    """What :func:`build_profile` worked out for each stack, kept across the profiles of a
    continuous profiler: a stack (its ids are hashes of its addresses) of a process is
    symbolized once, not every period. :meth:`forget` a process once it has exited."""

    # (pid, user, kernel, Python stack, comm) -> (frames, truncated, at the depth limit)
    stacks: dict[tuple[int, int, int, int, str], tuple[tuple[Frame, ...], bool, bool]] = field(
        default_factory=dict
    )
    cgroups: dict[int, str] = field(default_factory=dict)  # cgroup id -> path ("" unknown)

    def forget(self, pids: set[int]) -> None:
        if pids:
            self.stacks = {k: v for k, v in self.stacks.items() if k[0] not in pids}


def build_profile(
    raw: RawProfile,
    resolver: SymbolResolver,
    process_frames: bool = False,
    naming: PythonNaming | None = None,
    cache: StackCache | None = None,
    labels: bool = True,
) -> tuple[Profile, StackStats]:
    """The Profile of ``raw``; ``process_frames``: root each stack at its process's name;
    ``naming``: how Python frames are named (the target's ``sys.path``); ``cache``: stacks
    worked out before (a continuous profiler's earlier periods); ``labels=False``: no
    sample labels, one sample per stack (a continuous profiler labels the series)."""
    builder = ProfileBuilder([CPU_SAMPLES])
    python = _PythonFrames(raw, naming or PythonNaming())
    cache = cache if cache is not None else StackCache()

    def cache_key(k: SampleKey) -> tuple[int, int, int, int, str]:
        return (
            k.pid,
            k.user_stack,
            k.kernel_stack,
            k.python_stack,
            k.comm if process_frames else "",
        )

    todo = [k for k, _ in raw.counts if cache_key(k) not in cache.stacks]
    kernel_addrs = {
        a
        for k in todo
        if k.kernel_stack >= 0
        for a in _lookup_addresses(_stack(raw, k.kernel_stack))
    }
    ksyms = dict(
        zip(
            sorted(kernel_addrs),
            resolver.kernel().symbolize(sorted(kernel_addrs)),
            strict=True,
        )
    )
    by_pid: dict[int, set[int]] = defaultdict(set)
    for k in todo:
        if k.user_stack >= 0:
            by_pid[k.pid].update(_lookup_addresses(_stack(raw, k.user_stack)))
    usyms = {
        pid: _UserSymbols(resolver, pid, raw.maps.get(pid, ())).symbolize(sorted(addrs))
        for pid, addrs in by_pid.items()
    }
    for key in todo:
        ck = cache_key(key)
        if ck in cache.stacks:
            continue
        py_frames = python.of(key)
        frames = _frames(raw, key, ksyms, usyms.get(key.pid, {}), process_frames, py_frames)
        truncated = at_limit = False
        if py_frames is None and key.user_stack >= 0:
            user = _stack(raw, key.user_stack)
            syms = [usyms[key.pid][a] for a in _lookup_addresses(user)]
            at_limit = len(user) >= MAX_STACK_DEPTH
            truncated = at_limit or not _reaches_start(syms)
        cache.stacks[ck] = (tuple(frames), truncated, at_limit)
    unknown = {k.cgroup for k, _ in raw.counts} - cache.cgroups.keys() if labels else set()
    if unknown:
        found = cgroup_paths(unknown)
        cache.cgroups.update({c: found.get(c, "") for c in unknown})
    stats = StackStats()
    ids: dict[tuple[int, int, int, int, str], int] = {}
    # the cached stacks share their Frame objects: each is interned once per profile
    frame_ids: dict[int, int] = {}  # id(Frame) -> frame id (the cache keeps them alive)

    def frame_id(f: Frame) -> int:
        found = frame_ids.get(id(f))
        if found is None:
            found = frame_ids[id(f)] = builder.frames.intern_frame(f)
        return found

    unlabelled: dict[int, float] = {}  # stack id -> samples (labels=False)
    for key, count in raw.counts:
        ck = cache_key(key)
        stack_frames, truncated, at_limit = cache.stacks[ck]
        stack_id = ids.get(ck)
        if stack_id is None:
            stack_id = ids[ck] = builder.stack(map(frame_id, stack_frames))
        walked = key.python_stack >= 0 and bool(raw.python_frames.get((key.pid, key.python_stack)))
        if walked:  # complete down to the program's first Python frame
            stats.user_stacks += count
            stats.python += count
        elif key.user_stack >= 0:
            stats.user_stacks += count
            stats.at_depth_limit += count if at_limit else 0
            stats.truncated += count if truncated else 0
        if not labels:
            unlabelled[stack_id] = unlabelled.get(stack_id, 0.0) + count
            continue
        sample_labels = {
            "pid": key.pid,
            "tid": key.tid,
            "comm": key.comm,
            "process": raw.process_names.get(key.pid, key.comm if key.pid == key.tid else ""),
            "cgroup": cache.cgroups.get(key.cgroup) or f"id {key.cgroup}",
            "gil": GIL_LABELS.get(key.python_gil, "") if walked else "",
        }
        label_id = builder.labels({k: v for k, v in sample_labels.items() if v})
        builder.add(stack_id, float(count), label_id)
    for stack_id, samples in unlabelled.items():
        builder.add(stack_id, samples)
    builder.meta.update(_meta(raw, stats))
    return builder.build(), stats


def _stack(raw: RawProfile, sid: int) -> tuple[int, ...]:
    return raw.stacks.get(sid, ())


def _frames(
    raw: RawProfile,
    key: SampleKey,
    ksyms: dict[int, Symbol],
    usyms: dict[int, Symbol],
    process_frames: bool,
    python: list[Frame] | None = None,
) -> list[Frame]:
    out: list[Frame] = []
    if process_frames:
        name = raw.commands.get(key.pid) or raw.process_names.get(key.pid) or key.comm or "?"
        out.append(Frame(f"{name} ({key.pid})" if key.pid else name, FrameKind.LABEL))
    if python is not None:
        out.extend(python)
        if key.user_stack >= 0:
            addrs = _lookup_addresses(_stack(raw, key.user_stack))
            interpreter = raw.python_modules.get(key.pid, "")
            keep = called_from_python([usyms[a].module for a in addrs], interpreter)
            out.extend(_frame(usyms[a]) for a in reversed(addrs[:keep]))
    elif key.user_stack >= 0:
        addrs = _lookup_addresses(_stack(raw, key.user_stack))
        out.extend(_frame(usyms[a]) for a in reversed(addrs))
    elif key.user_stack in _STACK_LOST:
        out.append(Frame(_STACK_LOST[key.user_stack], FrameKind.LABEL))
    elif key.user_stack != NO_USER_STACK:
        out.append(Frame(USER_STACK_MISSING, FrameKind.LABEL))
    if key.kernel_stack >= 0:
        addrs = _lookup_addresses(_stack(raw, key.kernel_stack))
        out.extend(_frame(ksyms[a]) for a in reversed(addrs))
    elif key.kernel_stack in _STACK_LOST:
        out.append(Frame(_STACK_LOST[key.kernel_stack], FrameKind.LABEL))
    if not out:
        out.append(Frame(key.comm or "[unknown]", FrameKind.LABEL))
    return out


def _meta(raw: RawProfile, stats: StackStats) -> dict[str, object]:
    s = raw.stats
    meta: dict[str, object] = {
        "info:sampler": f"eBPF perf-event sampling, {raw.freq} Hz on {raw.cpus} CPUs",
        "ebpf_stats": dict(s),
        "truncated_user_stacks": [stats.truncated, stats.user_stacks],
    }
    if stats.user_stacks:
        depth = f", {stats.at_depth_limit:,} at the depth limit" if stats.at_depth_limit else ""
        meta["info:truncated stacks"] = (
            f"{stats.truncated_share * 100:.1f}% of {stats.user_stacks:,} user stacks end "
            f"before a start function (code without frame pointers{depth})"
        )
    if stats.python or raw.python_unsupported:
        meta["info:python stacks"] = _python_line(raw, stats)
    meta["info:ebpf losses"] = losses_line(s)
    # pprof keeps comments, not meta: `aiflame info` reads the share back from there
    meta["comments"] = [
        f"{TRUNCATED_COMMENT} {stats.truncated}/{stats.user_stacks}",
        f"eBPF losses: {meta['info:ebpf losses']}",
    ]
    if "info:python stacks" in meta:
        meta["comments"].append(f"{PYTHON_COMMENT} {meta['info:python stacks']}")  # type: ignore[attr-defined]
    return meta


def truncated_stacks(meta: dict[str, object]) -> tuple[int, int] | None:
    """(truncated, total) user stacks recorded in a profile's meta or pprof comments."""
    pair = meta.get("truncated_user_stacks")
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return int(pair[0]), int(pair[1])
    for comment in meta.get("comments", ()) or ():  # type: ignore[attr-defined]
        text = str(comment)
        if text.startswith(TRUNCATED_COMMENT):
            t, _, n = text[len(TRUNCATED_COMMENT) :].strip().partition("/")
            if t.isdigit() and n.isdigit():
                return int(t), int(n)
    return None


def _python_line(raw: RawProfile, stats: StackStats) -> str:
    walked = len(raw.python_modules)
    parts = [
        f"walked in the kernel in {walked} process{'es' if walked != 1 else ''}: "
        f"{stats.python:,} samples with Python frames"
    ]
    failed = raw.stats.get("python_failed", 0)
    if failed:
        parts.append(f"{failed:,} unreadable")
    if raw.stats.get("python_depth"):
        parts.append(f"{raw.stats['python_depth']:,} cut at the depth limit")
    reasons = sorted(set(raw.python_unsupported.values()))
    if reasons:
        parts.append("not walked: " + "; ".join(reasons[:3]))
    return ", ".join(parts)


def losses_line(s: dict[str, int]) -> str:
    """Every loss the kernel side counted, in one line (``none`` when there was none)."""
    parts = []
    if s.get("counts_full"):
        parts.append(f"{s['counts_full']:,} samples (count map full)")
    if s.get("stacks_full"):
        parts.append(f"{s['stacks_full']:,} stacks (stack map full)")
    if s.get("user_stack_empty"):
        parts.append(f"{s['user_stack_empty']:,} unreadable user stacks")
    if s.get("kernel_stack_failed"):
        parts.append(f"{s['kernel_stack_failed']:,} kernel stacks")
    if s.get("events_lost"):
        parts.append(f"{s['events_lost']:,} process announcements (ring buffer full)")
    return "lost " + "; ".join(parts) if parts else "none"
