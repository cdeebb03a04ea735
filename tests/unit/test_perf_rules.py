"""The per-line rules of the perf script collapser against the Perl patterns they replace.

Python's ``re`` backtracks like Perl's for these patterns, so the original expressions of
stackcollapse-perf.pl (compiled with re.ASCII, as Perl sees bytes) are the reference for the
faster rewrites, on hand-picked lines and on every line of the generated corpus.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from aiflame.sources.perf import collapse as perf_collapse
from aiflame.sources.perf.rules import (
    EVENT,
    HEADER,
    PERIOD,
    TIME,
    WS,
    PerfOptions,
    fragment,
    frame_names,
    namer,
    parse_stack_line,
    perl_split_arrow,
    strip_offset,
    tidy,
)

FUZZ = Path(__file__).parent.parent / "data" / "perf" / "fuzz"

# The patterns as written in stackcollapse-perf.pl (commit 41fee1f).
PERL_EVENT = re.compile(r"^(\S.+?)\s+(\d+)\/*(\d+)*\s+", re.ASCII)
PERL_PERIOD = re.compile(r":\s*(\d+)*\s+(\S+):\s*$", re.ASCII)
PERL_STACK = re.compile(r"^\s*(\w+)\s*(.+) \((.*)\)", re.ASCII)
PERL_OFFSET = re.compile(r"\+0x[\da-f]+$", re.ASCII)
PERL_GO = re.compile(r"\.\(.*\)\.")
PERL_ARGS = re.compile(r"\((?!anonymous namespace\)).*")

TRICKY = [
    "java 25607 4794564.109216: 1 cycles:",
    "java 12688 [002] 6544038.708352: 235 cpu-clock:",
    "V8 WorkerThread 25607 4794564.109216: 104345 cycles:",
    "java 24636/25607 [000] 4794564.109216: 1 cycles:",
    "V8 WorkerThread 24636/25607 [000] 94564.109216: 100 cycles:",
    "a 12 1.0: 3 cycles:",
    "ab 12/ x 1.0: cycles:",
    "kworker/0:1 7 [000] 1.5:  cycles:P: ",
    "comm 12+0x1 (lib)",
    "abc 1//2 [3] 4.5: 0 x:y: \r",
    "\t    7f1e214c24d9 SpinPause (/lib/libjvm.so)",
    "\tabc (lib)",
    "\t7f12  foo+0x1 (lib)",
    "\tffffffff8103ce3b native_safe_halt+0x5 ([kernel.kallsyms]) ",
    "\t1 std::function<void (int)>::operator()(int) const+0x12 (/bin/x (deleted))",
    "\t1 x (y) z (m)",
    "ffffffff8103d0ca native_write_msr_safe ([kernel.kallsyms])",
    "\t abc_def +0x1f (m)",
    "\t\r7f foo (m)",
]


def corpus_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(FUZZ.glob("fuzz-??.txt.gz")):
        lines += gzip.decompress(path.read_bytes()).decode("latin-1").split("\n")
    return sorted(set(lines) | set(TRICKY))


LINES = corpus_lines()


def test_corpus_is_big_enough():
    assert len(LINES) > 1000


def test_event_pattern_rewrite():
    for line in LINES:
        a, b = EVENT.match(line), PERL_EVENT.match(line)
        assert (a and a.groups()) == (b and b.groups()), line


def test_period_pattern_rewrite():
    for line in LINES:
        a, b = PERIOD.search(line), PERL_PERIOD.search(line)
        assert (a and a.groups()) == (b and b.groups()), line


def test_header_fast_path_agrees():
    matched = 0
    for line in LINES:
        h = HEADER.match(line)
        if h:
            matched += 1
            comm, pid, tid, secs, period, event = h.groups()
            assert TIME.search(line).group(1) == secs, line  # type: ignore[union-attr]
            assert PERL_EVENT.match(line).groups() == (comm, pid, tid), line  # type: ignore[union-attr]
            assert PERL_PERIOD.search(line).groups() == (period, event), line  # type: ignore[union-attr]
    assert matched > 100


def test_stack_line_split():
    for line in LINES:
        m = PERL_STACK.match(line)
        assert parse_stack_line(line) == (m and m.groups()), line


def test_offset_and_tidy():
    for line in LINES:
        parsed = parse_stack_line(line)
        if not parsed:
            continue
        func = parsed[1]
        assert strip_offset(func) == PERL_OFFSET.sub("", func, count=1), func
        for part in perl_split_arrow(func):
            want = part.replace(";", ":")
            if not PERL_GO.search(want):
                want = PERL_ARGS.sub("", want, count=1)
            assert tidy(part) == want.replace('"', "").replace("'", ""), part


@pytest.mark.parametrize(
    ("text", "parts"),
    [("a->b", ["a", "b"]), ("->a", ["", "a"]), ("a->", ["a"]), ("->", []), ("", []), ("a", ["a"])],
)
def test_perl_split(text, parts):
    assert perl_split_arrow(text) == parts


OPTIONS = [PerfOptions(), PerfOptions(annotate_all=True), PerfOptions(jit=True, addrs=True)]
OPTIONS.append(PerfOptions(kernel=True))


@pytest.mark.parametrize("opts", OPTIONS)
def test_namer_is_frame_names(opts):
    name = namer(opts)
    for line in LINES:
        parsed = parse_stack_line(line)
        if parsed:
            pc, func, mod = parsed[0], strip_offset(parsed[1]), parsed[2]
            for java in (False, True):
                assert name(pc, func, mod, java) == fragment(
                    frame_names(pc, func, mod, java, opts)
                ), line


@pytest.mark.parametrize("opts", OPTIONS)
def test_normal_form_gives_the_raw_lines_frames(opts):
    """Where a normalised line is trusted, it names the same frames as the raw line."""
    c = perf_collapse.Collapser(opts)
    trusted = 0
    for line in LINES:
        if not line or line[0] not in WS or "\x01" in line or "\x02" in line:
            continue
        key = perf_collapse._ADDRESS.sub("\n\x01", "\n" + line)
        key = perf_collapse._OFFSET.sub("\x02 (", key)[1:]
        if not key.startswith("\x01"):
            continue
        for java in (False, True):
            frag = c._from_key(key, java)
            if frag is None:
                continue
            trusted += 1
            pc, func, mod = parse_stack_line(line)  # type: ignore[misc]
            assert frag == fragment(frame_names(pc, strip_offset(func), mod, java, opts)), line
    assert trusted > 200
