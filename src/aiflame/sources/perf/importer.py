"""Linux ``perf script`` text: collapsed exactly as FlameGraph's ``stackcollapse-perf.pl``.

Options (keyword arguments of :func:`load`, ``aiflame`` flags in brackets) are those of the
Perl script: ``perf_pid`` [--pid], ``perf_tid`` [--tid], ``perf_kernel`` [--kernel],
``perf_jit`` [--jit], ``perf_all`` [--annotate-all], ``perf_addrs`` [--addrs] and
``perf_event_filter`` [--event-filter]; ``perf_jobs`` sets the number of processes for
large files (0: one per idle CPU). The folded output of a profile loaded with them is what the
Perl script prints. Each sample is labelled with its ``comm`` (and ``pid``/``tid`` when the
root frame includes them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from aiflame.errors import InputError
from aiflame.sources import limits
from aiflame.sources.inputs import GZIP_MAGIC, Input
from aiflame.sources.perf.collapse import Collapser, collapse, collapse_stream
from aiflame.sources.perf.parallel import collapse_file
from aiflame.sources.perf.rules import EVENT, JIT_MARK, KERNEL_MARK, WS, PerfOptions

if TYPE_CHECKING:
    from aiflame.model import FrameKind, Profile, SampleType

FORMAT = "perf-script"

# An "ADDRESS SYMBOL (MODULE)" line, as perf script prints call chains (indented, except
# in some old versions).
# "ADDR FUNC (MODULE)": ADDR, blanks, then a "(" and, after it, a ")" that ends the line.
# Possessive runs and the first "(" only: linear on long lines (a backtracking
# ".*\(.*\)" is quadratic where a line has many "(" and no ")" at its end).
_STACK_LINE = re.compile(r"[ \t]*+[0-9a-fA-F]++\s++\S[^(\n]*+\((?=.*\)\s*$)", re.ASCII)
_CLOCK_EVENTS = ("cpu-clock", "task-clock")


def _is_event_line(line: str) -> bool:
    """Whether ``line`` reads "comm pid/tid ... event:". Blanks before comm are allowed
    here (perf right-aligns short names), though stackcollapse-perf.pl then takes the line
    for a stack line."""
    line = line.lstrip(WS)
    return (
        bool(line) and line[0] != "#" and bool(EVENT.match(line)) and line.rstrip(WS).endswith(":")
    )


def sniff(head: bytes, path: str) -> bool:
    """An event line ("comm pid/tid ... event:") followed by a stack line, or several event
    lines (perf script without call chains)."""
    lines = head.decode("latin-1").split("\n")
    if len(lines) > 1:
        lines.pop()  # may be cut short
    events = other = 0
    previous_event = False
    for line in lines[:2000]:
        if not line.strip() or line[0] == "#":
            continue
        if previous_event and _STACK_LINE.match(line):
            return True
        previous_event = _is_event_line(line)
        if previous_event:
            events += 1
        else:
            other += 1
    return events >= 2 and events >= other


def options_from(options: dict[str, object]) -> tuple[PerfOptions, int]:
    """:class:`PerfOptions` and the number of jobs from ``perf_*`` keyword arguments."""
    event = options.get("perf_event_filter") or ""
    return (
        PerfOptions(
            pid=bool(options.get("perf_pid")),
            tid=bool(options.get("perf_tid")),
            kernel=bool(options.get("perf_kernel")),
            jit=bool(options.get("perf_jit")),
            annotate_all=bool(options.get("perf_all")),
            addrs=bool(options.get("perf_addrs")),
            event_filter=str(event),
            times=bool(options.get("times")),
        ),
        int(options.get("perf_jobs") or 0),  # type: ignore[call-overload]
    )


def collapse_input(source: Input, opts: PerfOptions, jobs: int = 0) -> Collapser:
    """Collapse an input: a regular uncompressed file in parallel when large, else streamed."""
    if not source.is_stdin and os.path.isfile(source.path):
        with open(source.path, "rb") as f:
            plain = f.read(2) != GZIP_MAGIC
        if plain:
            return collapse_file(source.path, opts, jobs)
    with source.open_binary(max_line=limits.max_line()) as f:
        return collapse_stream(f, opts)


def _text(s: str) -> str:
    """Latin-1 text (one character per byte, as collapsed) back to Unicode."""
    return s if s.isascii() else s.encode("latin-1").decode("utf-8", "replace")


def load(source: Input, **options: object) -> Profile:
    # The model and numpy are imported here, not above: ``folded_bytes`` (aiflame convert's
    # fast path) needs neither, and starts faster without them.
    from aiflame.sources.folded.importer import build_profile

    opts, jobs = options_from(options)
    # The module column tells kernel and JIT frames: marked while collapsing, kinds here.
    c = collapse_input(source, replace(opts, kinds=True), jobs)
    counts: dict[str, float] = {}
    roots: dict[str, str] = {}  # decoded root frame -> latin-1 one (to find its comm)
    for pname, by_rest in c.counts.items():
        root = _text(pname)
        roots.setdefault(root, pname)
        for rest, value in by_rest.items():
            key = root + _text(rest)
            counts[key] = counts.get(key, 0.0) + value
    if not counts:
        raise InputError(source.path, _why_empty(c))
    event = c.event_filter
    builder = build_profile(counts, _sample_type(event, c.periods), _frame_namer())
    builder.meta["ignored_lines"] = c.unrecognized
    builder.meta["samples_read"] = c.samples  # the rows are fewer: one per distinct stack
    if event:
        builder.meta["info:event"] = event
    if c.filtered:
        builder.meta["info:skipped"] = f"{c.filtered:,} samples of other events"
    profile = builder.build()
    if opts.times:
        return _timed_samples(profile, c, counts, source.path)
    _label_samples(profile, c, roots, opts)
    return profile


# What the registry passes to ``load`` when a timeline is asked for (``convert -f chrome``).
TIMELINE_OPTIONS = {"times": True}


def _nanoseconds(secs: str) -> int:
    """``1410597.984841`` (perf's secs.usecs, or .nsecs with --ns) as integer ns, exactly."""
    whole, _, frac = secs.partition(".")
    return int(whole) * 1_000_000_000 + int((frac + "000000000")[:9])


def _timed_samples(profile: Profile, c: Collapser, counts: dict[str, float], path: str) -> Profile:
    """``profile`` with one sample per perf sample, in input order, with its time and a
    comm/pid/tid label (the tracks of a timeline), instead of one per distinct stack."""
    import numpy as np

    from aiflame.sources.folded.importer import stack_order

    order = {key: i for i, key in enumerate(sorted(counts, key=stack_order))}
    rows: list[int] = []
    stamps: list[int] = []
    periods: list[float] = []
    labels: list[int] = []
    label_index: dict[tuple[str, str, str], int] = {}
    label_sets: list[tuple[tuple[str, str], ...]] = [()]
    for pname, rest, period, (secs, pid, tid) in c.timed:
        if not secs:
            raise InputError(
                path,
                "perf script without sample times (perf script -F without 'time'): no timeline",
            )
        comm = c.comms.get(pname, ("", pid, tid))[0]
        thread = (comm, pid, tid)
        i = label_index.get(thread)
        if i is None:
            i = label_index[thread] = len(label_sets)
            # perf prints only the tid unless asked for the pid ("comm tid [cpu] time:"):
            # each such thread is then a process of its own, so track ids stay numbers.
            track = {"comm": _text(comm), "pid": tid if pid == "?" else pid, "tid": tid}
            label_sets.append(tuple(sorted({**track, "thread": _text(comm)}.items())))
        rows.append(order[_text(pname) + _text(rest)])
        stamps.append(_nanoseconds(secs))
        periods.append(period)
        labels.append(i)
    index = np.asarray(rows, dtype=np.int64)
    return replace(
        profile,
        sample_stack=profile.sample_stack[index],
        values=np.asarray(periods, dtype=np.float64).reshape(-1, 1),
        sample_labels=np.asarray(labels, dtype=np.int64),
        label_sets=label_sets,
        timestamps=np.asarray(stamps, dtype=np.int64),
    )


def _frame_namer() -> Callable[[str, bool], tuple[str, FrameKind]]:
    """Name and kind of a collapsed frame: the kind its module's mark says, else guessed
    from the name (as for folded stacks)."""
    from aiflame.model import FrameKind
    from aiflame.symbolize.kinds import KindGuesser

    guess = KindGuesser()

    def frame_of(name: str, below_delimiter: bool) -> tuple[str, FrameKind]:
        mark = name[-2:]
        if mark == KERNEL_MARK:
            return name[:-2], FrameKind.KERNEL
        if mark == JIT_MARK:
            name = name[:-2]
            kind = guess(name, below_delimiter)
            # CPython's perf trampolines (py::func:file.py) are Python frames in a perf map
            return name, kind if kind == FrameKind.PYTHON else FrameKind.JIT
        return name, guess(name, below_delimiter)

    return frame_of


def folded_bytes(source: Input, **options: object) -> bytes:
    """The exact bytes stackcollapse-perf.pl prints for ``source``, without building a
    Profile."""
    return b"".join(folded_chunks(source, **options))


def folded_chunks(source: Input, **options: object) -> Iterator[bytes]:
    """:func:`folded_bytes` a few thousand lines at a time (the fast path of ``aiflame
    convert perf.txt -f folded``, which streams them to the output). The input is collapsed,
    and a bad one refused, before this returns."""
    opts, jobs = options_from(options)
    c = collapse_input(source, opts, jobs)
    items = c.sorted_stacks()
    if not items:
        raise InputError(source.path, _why_empty(c))
    return _batches(items)


def _batches(items: list[tuple[str, int]]) -> Iterator[bytes]:
    for i in range(0, len(items), 4096):
        yield "".join([f"{k} {v}\n" for k, v in items[i : i + 4096]]).encode("latin-1")


def _why_empty(c: Collapser) -> str:
    if not c.comms and c.filtered:
        return f"no perf samples of event '{c.event_filter}' (only other events)"
    if not c.comms:
        return (
            "no perf samples: no event line ('comm pid/tid ... event:' starting at the "
            "beginning of a line) was found"
        )
    if c.open_at_end:
        return (
            "no complete perf sample: a sample ends with a blank line, and the last one has "
            "none (stackcollapse-perf.pl drops it too)"
        )
    return f"no perf samples of event '{c.event_filter}'"


def _sample_type(event: str, periods: bool) -> SampleType:
    from aiflame.model import SampleType

    if not periods:
        return SampleType("samples", "count")
    name = event.split(":")[0] or "samples"
    return SampleType(name, "nanoseconds" if name in _CLOCK_EVENTS else "count")


def _label_samples(
    profile: Profile, c: Collapser, roots: dict[str, str], opts: PerfOptions
) -> None:
    """Label each sample with what its root frame says: comm, and pid/tid if included."""
    import numpy as np

    parent = profile.stacks.parents_array()
    root = np.where(parent >= 0, parent, np.arange(len(parent), dtype=np.int64))
    while True:  # pointer jumping: each round doubles the distance covered; roots stay
        up = root[root]
        if np.array_equal(up, root):
            break
        root = up
    frame_of = profile.stacks.frames_array()
    names = profile.strings.strings
    name_ids = profile.frames.name
    label_sets: list[tuple[tuple[str, str], ...]] = [()]
    set_of_frame: dict[int, int] = {}
    for f in np.unique(frame_of[root[profile.sample_stack]]).tolist():
        comm, pid, tid = c.comms.get(roots.get(names[name_ids[f]], ""), ("", "", ""))
        labels = {"comm": _text(comm)} if comm else {}
        if comm and (opts.pid or opts.tid):
            labels["pid"] = pid
        if comm and opts.tid:
            labels["tid"] = tid
        set_of_frame[f] = len(label_sets)
        label_sets.append(tuple(sorted(labels.items())))
    lookup = np.zeros(len(profile.frames), dtype=np.int64)
    for f, i in set_of_frame.items():
        lookup[f] = i
    profile.label_sets = label_sets
    profile.sample_labels = lookup[frame_of[root[profile.sample_stack]]]


__all__ = [
    "FORMAT",
    "PerfOptions",
    "collapse",
    "collapse_input",
    "load",
    "options_from",
    "sniff",
]
