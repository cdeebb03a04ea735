"""Austin (the CPython frame stack sampler) text output.

A sample is one line ``P<pid>;T<thread>;<frame>;...;<frame> <metrics>``, root first, and
metadata lines ``# key: value`` open and close the file (``# austin: 3.7.0``,
``# mode: wall``, ``# interval: 1000``, ``# duration: 457631``...). By version:

* Austin 3 and 4: frames ``file:function:line`` (Austin 4 writes qualified names,
  ``Thread._bootstrap``, and threads as ``T<interpreter>:<tid>``); ``:GC:`` and
  ``:INVALID:`` mark garbage collection and frames Austin could not read; austinp adds
  native frames (``libfoo.so:symbol:offset``) and ``kernel:symbol:0``.
* Austin 2: frames ``function (file:line)``, or ``function (file);L<line>``.
* Austin 1: ``Thread <tid>;...`` without the process.

Metrics by ``# mode``: ``wall`` and ``cpu`` one time in microseconds; ``memory`` the bytes
allocated (positive) or released (negative) since the previous sample; ``full``
``time,idle,memory`` (Austin 3) or ``time alloc dealloc`` (Austin 2, KiB). They become
the sample types ``wall-time`` and ``cpu-time`` (nanoseconds: the time of samples whose
thread was not idle), ``alloc-bytes`` and ``dealloc-bytes``, as austin-python's
statistics count them. Process and thread are labels (``pid``, ``tid``: ``--group-by``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.sources.inputs import Input, decode_head
from aiflame.symbolize.kinds import guess_kind
from aiflame.symbolize.pyframes import PythonNaming

FORMAT = "austin"

WALL = SampleType("wall-time", "nanoseconds")
CPU = SampleType("cpu-time", "nanoseconds")
ALLOC = SampleType("alloc-bytes", "bytes")
DEALLOC = SampleType("dealloc-bytes", "bytes")
MODE_TYPES = {
    "wall": (WALL,),
    "cpu": (CPU,),
    "memory": (ALLOC, DEALLOC),
    "full": (WALL, CPU, ALLOC, DEALLOC),
}
NO_FRAMES = "[no Python frames]"
SPECIAL = {"GC": "[GC]", "INVALID": "[invalid frame]"}

_HEAD = re.compile(r"^(?:P\d+;T[^;\s]+|Thread [0-9A-Fa-fx]+)[; ]")
_ALT_LINE = re.compile(r"\);L(\d+)")  # Austin 2's "function (file);L12"
_PY_FILE = re.compile(r"\.py[xw]?$|^<")  # a Python source, or <frozen ...>, <string>


def sniff(head: bytes, path: str) -> bool:
    lines = [ln for ln in decode_head(head).splitlines()[:40] if ln.strip()]
    if not lines:
        return False
    if lines[0].startswith("# austin:"):
        return True
    samples = [ln for ln in (lines[:-1] or lines) if not ln.startswith("# ")]
    good = sum(1 for ln in samples if _HEAD.match(ln))
    return bool(samples) and good >= max(1, (len(samples) + 1) // 2)


def _paren_frame(text: str) -> tuple[str, str, int] | None:
    r"""(function, file, line) of Austin 2's ``function (file:12)``, or None. Split by hand:
    a pattern like ``(.*?) \((.*):(\d+)\)`` backtracks for minutes on a long name full of
    " (" (the first " (" is where the file starts, the last ":" where its line does)."""
    if not text.endswith(")"):
        return None
    head, colon, line = text[:-1].rpartition(":")
    function, paren, file = head.partition(" (")
    if not (colon and paren and line.isdecimal()):
        return None
    return function, file, int(line)


@dataclass
class _Lines:
    """The samples of a file summed per distinct line head, and its metadata."""

    meta: dict[str, str] = field(default_factory=dict)
    sums: dict[str, list[float]] = field(default_factory=dict)  # head -> wall, cpu, +, -
    ignored: int = 0
    kib_memory: bool = False  # Austin 2's full mode counts memory in KiB
    negative: bool = False  # a single-metric file without header: memory if any < 0
    shapes: set[int] = field(default_factory=set)  # numbers of metrics seen per line


def _read(source: Input) -> _Lines:
    out = _Lines()
    sums, get = out.sums, out.sums.get
    with source.open_text() as f:
        for raw in f:
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            if line.startswith("#"):
                key, sep, value = line[1:].strip().partition(":")
                if sep:
                    out.meta[key.strip()] = value.strip()
                continue
            head, values = _split_metrics(line)
            if head is None or not _HEAD.match(head + " "):
                out.ignored += 1
                continue
            out.shapes.add(len(values))
            acc = get(head)
            if acc is None:
                acc = sums[head] = [0.0, 0.0, 0.0, 0.0]
            if len(values) == 1:
                v = values[0]  # a time, or in memory mode a signed size
                acc[0] += v
                if v > 0:
                    acc[2] += v
                else:
                    acc[3] -= v
                    out.negative = out.negative or v < 0
            elif len(values) == 3 and "," in line.rpartition(" ")[2]:
                time, idle, memory = values  # Austin 3 full mode: time,idle,memory
                acc[0] += time
                if not idle:
                    acc[1] += time
                if memory > 0:
                    acc[2] += memory
                else:
                    acc[3] -= memory
            else:
                time, alloc, dealloc = values  # Austin 2 full mode: time alloc dealloc
                out.kib_memory = True
                acc[0] += time
                acc[1] += time
                acc[2] += abs(alloc)
                acc[3] += abs(dealloc)
    return out


def _split_metrics(line: str) -> tuple[str | None, list[float]]:
    """(head, metrics) of a sample line, (None, []) if its metrics do not parse."""
    head, _, tail = line.rpartition(" ")
    try:
        if "," in tail:
            parts = tail.split(",")
            if len(parts) != 3:
                return None, []
            return head, [float(p) if p else 0.0 for p in parts]
        value = float(tail)
    except ValueError:
        return None, []
    # Austin 2's full mode: three space-separated numbers.
    pre, _, second = head.rpartition(" ")
    first_head, _, first = pre.rpartition(" ")
    if first_head and _is_int(first) and _is_int(second) and _HEAD.match(first_head + " "):
        return first_head, [float(first), float(second), value]
    return head, [value]


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


class _Frames:
    """Frame ids of Austin frame strings, parsed once each."""

    def __init__(self, builder: ProfileBuilder) -> None:
        self.b = builder
        self.naming = PythonNaming(read_sources=False)
        self._ids: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        fid = self._ids.get(text)
        if fid is None:
            fid = self._ids[text] = self._parse(text)
        return fid

    def _parse(self, text: str) -> int:
        m = _paren_frame(text)
        if m:  # Austin 1 and 2
            function, file, line = m
        else:
            file, sep, rest = text.rpartition(":")
            file, sep2, function = file.rpartition(":")
            if not (sep and sep2):
                return self.b.frame(text, guess_kind(text))
            if not file and function in SPECIAL and not rest:
                return self.b.frame(SPECIAL[function], FrameKind.LABEL)
            line = int(rest) if rest.isdecimal() else 0
        if file == "kernel":  # austinp -k
            return self.b.frame(function, FrameKind.KERNEL)
        if _PY_FILE.search(file) or not file:
            named = self.naming.sampled(function, file, line)
            return self.b.frame(named.name, FrameKind.PYTHON, named.file, named.line)
        # austinp's native frames: the binary (or native@address) and the symbol.
        module = file.rsplit("/", 1)[-1]
        kind = guess_kind(function)
        if kind == FrameKind.PYTHON:  # CPython's own C functions (PyEval_...) are C
            kind = FrameKind.NATIVE
        return self.b.frame(function, kind, module=module)


def load(source: Input, **_: object) -> Profile:
    lines = _read(source)
    if not lines.sums:
        raise InputError(source.path, "no Austin samples found (expected 'P<pid>;T<tid>;...')")
    mode = lines.meta.get("mode") or _guess_mode(lines)
    types = MODE_TYPES.get(mode)
    if types is None:
        raise InputError(source.path, f"unknown Austin mode '{mode}' (wall, cpu, memory, full)")
    builder = ProfileBuilder(types)
    frames = _Frames(builder)
    labels: dict[str, int] = {}
    no_frames = -1
    scale = 1024.0 if lines.kib_memory else 1.0
    picks = {"wall": (0,), "cpu": (0,), "memory": (2, 3), "full": (0, 1, 2, 3)}[mode]
    for head, acc in lines.sums.items():
        values = [acc[i] * (1000.0 if i < 2 else scale) for i in picks]
        if not any(values):
            continue
        thread, _sep, stack_text = _split_head(head)
        lab = labels.get(thread)
        if lab is None:
            lab = labels[thread] = builder.labels(_thread_labels(thread))
        if stack_text:
            ids = [frames(t) for t in _frame_texts(stack_text)]
            stack = builder.stack(ids)
        else:
            if no_frames < 0:
                no_frames = builder.stack([builder.frame(NO_FRAMES, FrameKind.LABEL)])
            stack = no_frames
        builder.add(stack, values, lab)
    builder.meta.update(_meta(lines, mode))
    return builder.build()


def _guess_mode(lines: _Lines) -> str:
    """Mode of a file without its header: by the shape of its metrics."""
    if 3 in lines.shapes:
        return "full"
    return "memory" if lines.negative else "wall"


def _split_head(head: str) -> tuple[str, str, str]:
    """(``P<pid>;T<tid>``, ``;``, frames) of a line's head."""
    if head.startswith("Thread "):  # Austin 1
        thread, sep, frames = head.partition(";")
        return thread, sep, frames
    first = head.find(";")
    second = head.find(";", first + 1)
    if second < 0:
        return head, "", ""
    return head[:second], ";", head[second + 1 :]


def _frame_texts(stack: str) -> list[str]:
    if ");L" in stack:  # Austin 2's alternative layout: "function (file);L12"
        stack = _ALT_LINE.sub(r":\1)", stack)
    return stack.split(";")


def _thread_labels(thread: str) -> dict[str, str]:
    if thread.startswith("Thread "):
        return {"tid": thread[7:]}
    pid, _, tid = thread.partition(";")
    labels = {"pid": pid[1:], "tid": tid[1:]}
    interpreter, colon, native = labels["tid"].partition(":")
    if colon:  # Austin 4: T<interpreter>:<thread>
        labels["tid"] = native
        if interpreter != "0":
            labels["interpreter"] = interpreter
    return labels


def _meta(lines: _Lines, mode: str) -> dict[str, object]:
    meta: dict[str, object] = {"default_type": 0, "ignored_lines": lines.ignored}
    meta["austin_metadata"] = dict(lines.meta)
    version = lines.meta.get("austin")
    meta["info:recorded by"] = f"austin {version}" if version else "austin"
    meta["info:mode"] = mode
    interval = lines.meta.get("interval")
    if interval and interval.isdigit():
        meta["info:sampling interval"] = f"{int(interval)} us"
    duration = lines.meta.get("duration")
    if duration and duration.isdigit():
        meta["info:duration"] = f"{int(duration) / 1e6:.3f} s"
    if lines.meta.get("python"):
        meta["info:python"] = lines.meta["python"]
    return meta
