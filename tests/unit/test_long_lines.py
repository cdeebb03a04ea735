"""No quadratic work: every text format read with 100,000-character lines and names, in
every shape that made a backtracking pattern slow, within a time bound; and the linear
rewrites of stackcollapse-perf.pl's patterns match exactly what the Perl patterns match."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import re
import sqlite3
import time
from pathlib import Path

import pytest

from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb
from aiflame.render.registry import render
from aiflame.sources.folded.importer import looks_folded
from aiflame.sources.nsys import labels as nsys_labels
from aiflame.sources.perf import rules as perf_rules
from aiflame.sources.perf.importer import _STACK_LINE
from aiflame.sources.registry import load

N = 100_000
# Each shape once made one of the readers' patterns backtrack quadratically.
SHAPES = {
    "blanks": " " * N,
    "word then blanks": "a" + " " * N + "x",
    "open parens": "(" * N,
    "blank parens": " (" * (N // 2),
    "unclosed calls": "x (" * (N // 3),
    "colons": ":" * N,
    "words": "ab " * (N // 3),
    "go methods": ".(a) " * (N // 5),
    "arrows": "a->" * (N // 3),
    "digits and blanks": "1 " * (N // 2),
    "rank": "rank " * (N // 5),
}
BOUND = 20.0  # seconds: linear work takes well under one; the quadratic took minutes
DATA = Path(__file__).parents[1] / "data"
TRITON = DATA / "kineto" / "tracelens" / "torch_compile_triton" / "trace.json.gz"
EVENT = "python 1234/1234 [000] 100.000000: 1 cycles:\n"
STACK = "\t    ffff main (/bin/x)\n"


def timed_load(path: Path, fmt: str | None = None) -> None:
    start = time.monotonic()
    try:
        profile = load(str(path), fmt)
    except Exception as e:  # refused is fine: the point is how long it took
        assert type(e).__name__ == "InputError", e
    else:
        for out in ("folded", "html"):
            render(profile, out)
    elapsed = time.monotonic() - start
    assert elapsed < BOUND, f"{path.name}: {elapsed:.1f} s"


@pytest.mark.parametrize("shape", SHAPES)
def test_folded(tmp_path, shape):
    text = SHAPES[shape]
    path = tmp_path / "x.folded"
    path.write_text(f"a;b 1\na;{text};c 2\n{text}\n{text} 3\na;c 3\n")
    timed_load(path, "folded")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("where", ["stack line", "function", "event line", "module"])
def test_perf_script(tmp_path, shape, where):
    text = SHAPES[shape]
    line = {
        "stack line": f"\t    ffff {text}\n",
        "function": f"\t    ffff {text} (/lib/x.so)\n",
        "event line": f"py{text} 12/12 [000] 1.0: 1 cycles:\n",
        "module": f"\t    ffff f ({text}\n",
    }[where]
    path = tmp_path / "perf.txt"
    path.write_text(EVENT + line + STACK + "\n" + EVENT + STACK + "\n")
    timed_load(path, "perf-script")


@pytest.mark.parametrize("shape", ["blanks", "unclosed calls", "colons", "go methods", "rank"])
def test_speedscope(tmp_path, shape):
    name = SHAPES[shape]
    doc = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": name, "file": name}, {"name": "main"}]},
        "profiles": [
            {"type": "sampled", "name": name, "unit": "none", "startValue": 0, "endValue": 2,
             "samples": [[1, 0], [1]], "weights": [1, 1]}
        ],
    }  # fmt: skip
    path = tmp_path / "x.speedscope.json"
    path.write_text(json.dumps(doc))
    timed_load(path)


@pytest.mark.parametrize("shape", ["blanks", "unclosed calls", "colons", "go methods", "rank"])
@pytest.mark.parametrize("kind", ["kineto", "trace-events"])
def test_chrome_trace(tmp_path, shape, kind):
    name = SHAPES[shape]
    if kind == "kineto":
        doc = json.loads(gzip.decompress(TRITON.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("cat") in ("kernel", "cpu_op", "python_function"):
                e["name"] = f"{name}{e['name']}"
    else:
        doc = {"traceEvents": [
            {"ph": "X", "name": name, "cat": name, "ts": 1, "dur": 5, "pid": 1, "tid": 1},
            {"ph": "B", "name": f"{name}(1): f", "ts": 2, "pid": 1, "tid": 1},
            {"ph": "E", "ts": 3, "pid": 1, "tid": 1},
        ]}  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    timed_load(path)


@pytest.mark.parametrize("shape", ["blanks", "unclosed calls", "go methods", "colons"])
def test_pprof(tmp_path, shape):
    msg = pb.Profile()
    msg.string_table.extend(["", "samples", "count", SHAPES[shape], SHAPES[shape] + ".py"])
    msg.sample_type.add(type=1, unit=2)
    msg.function.add(id=1, name=3, system_name=3, filename=4)
    msg.location.add(id=1).line.add(function_id=1, line=7)
    msg.sample.add(location_id=[1], value=[3])
    path = tmp_path / "x.pb.gz"
    path.write_bytes(gzip.compress(msg.SerializeToString()))
    timed_load(path)


@pytest.mark.parametrize("shape", ["blanks", "rank", "unclosed calls"])
def test_nsys_names(tmp_path, shape):
    """Strings of an Nsight export (kernel, NVTX and thread names) 100,000 long."""
    path = tmp_path / "x.sqlite"
    path.write_bytes((DATA / "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite").read_bytes())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE StringIds SET value = ? || value", (SHAPES[shape],))
    conn.commit()
    conn.close()
    timed_load(path)


# -- the patterns themselves ----------------------------------------------------------------

OLD_EVENT = re.compile(r"(\S.+?)\s+(\d+)/*(\d+)?\s+", re.ASCII)
OLD_PERIOD = re.compile(r":\s*(\d+)?\s+(\S+):\s*$", re.ASCII)
OLD_STACK = re.compile(r"\s*(\w+)\s*(.+) \((.*)\)", re.ASCII)
OLD_GO = re.compile(r"\.\(.*\)\.")
OLD_STACK_LINE = re.compile(r"[ \t]*[0-9a-fA-F]+\s+\S.*\(.*\)\s*$", re.ASCII)
OLD_FOLDED = re.compile(r"^\S.*?\s+(\d+(?:\.\d*)?)\s*$")
OLD_RANK = re.compile(r"\brank\s*[:=#]?\s*(\d+)", re.IGNORECASE)


def _groups(m: re.Match[str] | None) -> object:
    return None if m is None else (m.group(0), m.groups())


def _same_as_the_backtracking_patterns(s: str) -> None:
    assert _groups(OLD_EVENT.match(s)) == _groups(perf_rules.EVENT.match(s)), s
    assert _groups(OLD_PERIOD.search(s)) == _groups(perf_rules.PERIOD.search(s)), s
    m = OLD_STACK.match(s)
    assert (m.groups() if m else None) == perf_rules._stack_match(s), s
    assert bool(OLD_GO.search(s)) == perf_rules._go_method(s), s
    assert bool(OLD_STACK_LINE.match(s)) == bool(_STACK_LINE.match(s)), s
    if s and s.splitlines() == [s]:
        assert bool(OLD_FOLDED.match(s)) == looks_folded(s), s
    a, b = OLD_RANK.search(s), nsys_labels._RANK.search(s)
    assert (a and a.group(0, 1)) == (b and b.group(0, 1)), s


def test_linear_patterns_match_what_perl_matches():
    """Every string of up to 5 characters from the characters that matter, and random
    longer ones: the same matches and the same groups."""
    alphabet = [" ", "\t", "a", "1", "(", ")", ":", "/", ".", "_", "\xa0", "r"]
    for n in range(6):
        for chars in itertools.product(alphabet, repeat=n):
            _same_as_the_backtracking_patterns("".join(chars))
    rng = random.Random(7)
    pieces = [*alphabet, "rank", "ffff", " (", ") ", ": ", "->", ".(", ")."]
    for _ in range(20_000):
        _same_as_the_backtracking_patterns("".join(rng.choices(pieces, k=rng.randint(3, 25))))


@pytest.mark.parametrize("shape", SHAPES)
def test_patterns_are_linear(shape):
    text = SHAPES[shape]
    start = time.monotonic()
    for s in (text, "a" + text, text + "x", "   ffff " + text, "py " + text + ":"):
        perf_rules.EVENT.match(s)
        perf_rules.PERIOD.search(s)
        perf_rules.parse_stack_line(s)
        perf_rules._stack_match(s)
        perf_rules.tidy(s)
        _STACK_LINE.match(s)
        looks_folded(s)
        nsys_labels._RANK.search(s)
    assert time.monotonic() - start < 2.0
