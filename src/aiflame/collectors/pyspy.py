"""py-spy as the CPU sampler: command lines, and its speedscope output turned into samples.

py-spy's speedscope output is used rather than its folded ``raw`` output because it keeps,
per sample, the process and thread (one speedscope profile per thread), and, per frame,
the full file path and line as separate fields: nothing has to be parsed out of a name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aiflame.collectors import threadstate
from aiflame.errors import AiflameError, InputError
from aiflame.model import Frame, FrameKind, ProfileBuilder
from aiflame.symbolize.perfmap import PerfMap, clean_name
from aiflame.symbolize.pyframes import PythonNaming

_PY_EXT = (".py", ".pyw", ".pyx", ".pxd", ".pxi")
_NATIVE_SRC = re.compile(r"\.(?:c|cc|cpp|cxx|h|hh|hpp|hxx|inl|s|S|rs|cu|cuh|f90|f)$")
_SHARED_OBJECT = re.compile(r"\.so(?:\.[\w.]+)?$")
_THREAD = re.compile(r'^(?:Process (\d+) )?Thread (\S+) "(.*)"$', re.DOTALL)
# With --subprocesses py-spy roots each stack in its process and that process's parents.
_PROCESS = re.compile(r'^process (\d+):"(.*)"$', re.DOTALL)
INSTALL_HINT = "install it with: pip install py-spy (a dependency of aiflame)"


def find_pyspy() -> str:
    """Path of the py-spy executable: on PATH, or beside this interpreter's scripts."""
    found = shutil.which("py-spy")
    if found:
        return found
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(directory, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    raise AiflameError(f"py-spy is not installed; {INSTALL_HINT}")


@dataclass
class SamplerConfig:
    """One py-spy run. ``native`` stacks need the process paused (blocking mode)."""

    rate: int
    native: bool
    idle: bool
    subprocesses: bool = False
    duration: float | None = None

    def args(self, pyspy: str, pid: int, output: str) -> list[str]:
        cmd = [pyspy, "record", "--pid", str(pid), "--rate", str(self.rate)]
        cmd += ["--format", "speedscope", "--output", output]
        if self.native:
            cmd.append("--native")
        else:
            cmd.append("--nonblocking")  # Python stacks can be read without pausing
        if self.idle:
            cmd.append("--idle")
        if self.subprocesses:
            cmd.append("--subprocesses")
        if self.duration:
            cmd += ["--duration", str(max(1, round(self.duration)))]
        return cmd


@dataclass
class ThreadSamples:
    pid: int | None
    tid: str
    name: str
    samples: list[list[int]]  # indices into the shared frames, root first


@dataclass
class SpeedscopeProfile:
    frames: list[dict]
    threads: list[ThreadSamples] = field(default_factory=list)


def read_speedscope(path: str) -> SpeedscopeProfile:
    """The threads and frames of a py-spy speedscope file."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(path, f"cannot read py-spy output: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(path, f"py-spy output is not valid JSON ({e})") from None
    try:
        frames = list(data["shared"]["frames"])
        out = SpeedscopeProfile(frames)
        for prof in data["profiles"]:
            m = _THREAD.match(str(prof.get("name", "")))
            pid, tid, name = (m.group(1), m.group(2), m.group(3)) if m else (None, "?", "")
            samples = [list(s) for s in prof.get("samples", [])]
            out.threads.append(ThreadSamples(int(pid) if pid else None, tid, name, samples))
    except (KeyError, TypeError) as e:
        raise InputError(path, f"unexpected py-spy speedscope layout ({e})") from None
    return out


def native_kind(name: str) -> FrameKind:
    return (
        FrameKind.CPP
        if ("::" in name or "<" in name or name.startswith("_Z"))
        else FrameKind.NATIVE
    )


def convert_frame(
    raw: Mapping, perf_map: PerfMap | None = None, naming: PythonNaming | None = None
) -> Frame:
    """A py-spy frame as a model frame, its kind from where py-spy found it; Python frames
    named per function by ``naming`` when given (as the PyTorch profiler's are)."""
    name = str(raw.get("name") or "?")
    file = str(raw.get("file") or "")
    line = int(raw.get("line") or 0)
    if not file and not line:
        m = _PROCESS.match(name)
        if m:
            return Frame(f"process {m.group(1)}: {m.group(2)}", FrameKind.LABEL)
    if file == "?":  # an address outside every mapped binary: JIT code, or a stale map
        address = _address(name)
        sym = perf_map.lookup(address) if (perf_map and address is not None) else None
        if sym is not None:
            return Frame(clean_name(sym.name), sym.kind, module="[jit]")
        return Frame("[unknown]", FrameKind.NATIVE)
    if file.endswith(_PY_EXT) or file.startswith("<"):
        return _python(name, file, line, naming)
    if line == 0 or _NATIVE_SRC.search(file) or _SHARED_OBJECT.search(file):
        if line == 0:  # py-spy puts the binary's path where a source file would be
            module, file = os.path.basename(file), ""
        else:
            module = ""
        if _address(name) is not None:  # in a binary without a symbol for it
            return Frame(f"[{module or '?'}]", FrameKind.NATIVE, module=module)
        return Frame(name, native_kind(name), file, line, module)
    return _python(name, file, line, naming)


def _python(name: str, file: str, line: int, naming: PythonNaming | None) -> Frame:
    if naming is None:
        return Frame(name, FrameKind.PYTHON, file, line)
    named = naming.sampled(name, file, line)
    return Frame(named.name, FrameKind.PYTHON, named.file, named.line)


def _address(name: str) -> int | None:
    if name.startswith("0x"):
        try:
            return int(name, 16)
        except ValueError:
            return None
    return None


@dataclass
class StreamSpec:
    """How one py-spy output becomes samples of a :class:`ProfileBuilder`."""

    column: int
    classify: bool  # label samples with their thread state (else drop waiting ones)
    default_pid: int | None = None
    perf_maps: Callable[[int], PerfMap | None] = lambda pid: None
    process_labels: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    # Thread state by (tid, Python frames), filled by a native stream, read by a CPU stream.
    states: dict[tuple[str, tuple[Frame, ...]], set[str]] = field(default_factory=dict)
    naming: PythonNaming | None = None  # Python frames per function, as the profiler's


def add_samples(builder: ProfileBuilder, profile: SpeedscopeProfile, spec: StreamSpec) -> int:
    """Append every sample of ``profile``; returns how many were added."""
    converted: dict[tuple[int | None, int], Frame] = {}
    added = 0
    for thread in profile.threads:
        pid = thread.pid if thread.pid is not None else spec.default_pid
        perf_map = spec.perf_maps(pid) if pid is not None else None

        def frame(idx: int, pid: int | None = pid, perf_map: PerfMap | None = perf_map) -> Frame:
            f = converted.get((pid, idx))
            if f is None:
                f = converted[(pid, idx)] = convert_frame(
                    profile.frames[idx], perf_map, spec.naming
                )
            return f

        base: dict[str, object] = {"tid": thread.tid}
        if pid is not None:
            base["pid"] = pid
            base.update(spec.process_labels.get(pid, {}))
        if thread.name:
            base["thread"] = thread.name
        # Identical samples of a thread (most of them) are converted once.
        cache: dict[tuple[int, ...], tuple[int, int] | None] = {}
        for sample in thread.samples:
            key = tuple(sample)
            if key not in cache:
                cache[key] = _intern_sample(builder, [frame(i) for i in sample], base, spec)
            hit = cache[key]
            if hit is not None:
                builder.add_value(hit[0], spec.column, 1.0, hit[1])
                added += 1
    return added


def _intern_sample(
    builder: ProfileBuilder, frames: list[Frame], base: dict[str, object], spec: StreamSpec
) -> tuple[int, int] | None:
    """(stack id, label-set id) of a sample, or None for a waiting thread in a CPU stream."""
    kept: list[Frame] = []
    for f in frames:
        if kept and f.name.startswith("[") and kept[-1] == f:
            continue  # a run of unnamed frames in one library reads as one
        kept.append(f)
    if all(f.kind == FrameKind.LABEL for f in kept):
        return None  # a thread caught starting or ending, with no frame yet
    state = threadstate.classify(kept)
    labels = dict(base)
    python_part = (str(base["tid"]), tuple(f for f in kept if f.kind == FrameKind.PYTHON))
    if spec.classify:
        labels["state"] = state
        spec.states.setdefault(python_part, set()).add(state)
    elif state != threadstate.ACTIVE or spec.states.get(python_part, {state}) == {threadstate.IDLE}:
        # py-spy took a waiting thread for a running one: the native sampler's pauses wake
        # sleeping threads for an instant, so a line only ever seen idle stays idle.
        return None
    stack = builder.stack(builder.frames.intern_frame(f) for f in kept)
    return stack, builder.labels(labels)


def pids_in(profile: SpeedscopeProfile) -> set[int]:
    return {t.pid for t in profile.threads if t.pid is not None}


def explain_failure(stderr: str, pid: int, exited: bool = False) -> str:
    """One line for a py-spy run that failed, from its error output.

    ``exited``: the process is gone, which explains most errors of a run that started late.
    """
    text = stderr.strip()
    low = text.lower()
    if exited:
        return f"process {pid} exited before it could be sampled"
    if "permission denied" in low or "operation not permitted" in low:
        return (
            f"not permitted to read process {pid} (py-spy needs ptrace: run as the same user "
            "or root, and check /proc/sys/kernel/yama/ptrace_scope)"
        )
    if "failed to find python version" in low or "failed to get process executable" in low:
        return f"process {pid} does not look like a Python program py-spy can read"
    if "no such process" in low or "no such file" in low:
        return f"process {pid} exited before it could be sampled"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error")]
    last = (errors or lines or ["no output"])[-1]
    return f"py-spy failed on process {pid}: {last}"
