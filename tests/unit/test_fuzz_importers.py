"""Every importer on mutants of its real inputs: a profile that every writer writes, or one
clear error (an AiflameError); never another exception, a hang or memory without bound.

hypothesis draws the damage to a real file of tests/data: byte edits (flips, values set,
cuts, insertions, repeats), or a format-aware mutation of tools/fuzz_mutants.py (numbers
at the edges, long names, hostile names, deep nesting, SQLite and pickle damage, pickle
bombs...) seeded by it. Every format is also given its own deep nesting (slices, stacks,
NVTX ranges, snapshot frames, pprof location chains thousands deep) and its numbers at the
edges of int64 and beyond, and GPU traces are analyzed too; HPCToolkit directories get one
file damaged (an hpcstruct nested 40,000 deep, int64 edges in binary records). Each
example runs in a child process limited to 1 GiB more address space and 60 s
(tests/limited.py), so a failure is a failed test, not a swapping machine.

A few seconds per importer by default, the same examples each run; with
``AIFLAME_FUZZ_SECONDS=N`` each importer is fuzzed for N seconds with fresh examples. An
input that fails is written to tests/data/fuzz/<format>/ (keep it: test_kept_inputs replays
every file there, so a fixed crash stays fixed).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from limited import GIB, run_limited

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import fuzz_mutants  # noqa: E402

DATA = ROOT / "tests" / "data"
KEPT = DATA / "fuzz"
NOT_INPUTS = ("PROVENANCE.md", "LICENSE")
SECONDS = float(os.environ.get("AIFLAME_FUZZ_SECONDS", "0") or 0)
EXAMPLES = 8  # per importer and batch: a few seconds
MEMORY = 1 * GIB
TIMEOUT = 60.0
# Nsight Compute reports are read by NVIDIA's ncu_report, which deadlocks in a child forked
# from a process that has already loaded it (its threads' locks): they are fuzzed by
# tools/fuzz_commands.py, whose runs are new processes, instead.
SEEDS = {k: v for k, v in fuzz_mutants.seed_files().items() if k != "nsight-compute"}


def check_file(path: str) -> str:
    """Load ``path`` and write it in every output format; analyze it when it is a GPU
    trace (in the limited child)."""
    from aiflame.errors import AiflameError
    from aiflame.render.registry import FORMATS, render
    from aiflame.sources.registry import load

    try:
        profile = load(path)
    except AiflameError:
        return "refused"
    for fmt in FORMATS:
        with contextlib.suppress(AiflameError):  # a clear refusal (pprof beyond int64...)
            render(profile, fmt)
    if profile.meta.get("format") in TRACE_FORMATS:
        from aiflame.analysis import analyze

        with contextlib.suppress(AiflameError):
            analyze([path])
    return "read"


TRACE_FORMATS = ("kineto", "trace-events", "nsys")


# -- mutations ----------------------------------------------------------------------------

_EDIT = st.tuples(
    st.sampled_from(["flip", "set", "insert", "delete", "repeat", "cut"]),
    st.floats(0, 1, exclude_max=True),
    st.integers(0, 255),
    st.integers(1, 4096),
)


def _apply(data: bytes, edits: list[tuple[str, float, int, int]]) -> bytes:
    b = bytearray(data)
    for op, where, value, n in edits:
        if not b:
            break
        i = int(where * len(b))
        if op == "flip":
            b[i] ^= 1 << (value % 8)
        elif op == "set":
            b[i] = value
        elif op == "insert":
            b[i:i] = bytes([value]) * (n % 64 + 1)
        elif op == "delete":
            del b[i : i + n]
        elif op == "repeat":
            b[i:i] = b[i : i + n] * (value % 8 + 1)
        else:
            del b[i:]
    return bytes(b)


@st.composite
def mutants(draw: st.DrawFn, fmt: str) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(SEEDS[fmt]))
    data = seed.read_bytes()
    if draw(st.booleans()):  # format-aware, from the fuzzer's mutators
        rng = random.Random(draw(st.integers(0, 2**32)))
        name, data = fuzz_mutants.mutate(rng, fmt, data)
        return f"{seed.name}: {name}", data
    plain = data[:2] == b"\x1f\x8b" and fmt not in ("nsys",)
    if plain:
        data = gzip.decompress(data)
    data = _apply(data, draw(st.lists(_EDIT, min_size=1, max_size=4)))
    if plain and draw(st.booleans()):
        data = gzip.compress(data, mtime=0)
    return f"{seed.name}: byte edits", data


@st.composite
def structured(draw: st.DrawFn, fmt: str, kind: str) -> tuple[str, bytes]:
    """A real input of ``fmt`` nested thousands deep (``kind`` "deep": slices, stacks,
    NVTX ranges, snapshot frames...) or with numbers at the edges of int64 and beyond
    ("edges"), by the mutations of tools/fuzz_mutants.py, seeded by hypothesis."""
    seed = draw(st.sampled_from(SEEDS[fmt]))
    data = seed.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if kind == "deep":
        mutation = fuzz_mutants.deep_nesting_for(fmt)
        assert mutation is not None, f"no deep-nesting mutation for {fmt}"
    else:
        mutation = fuzz_mutants.numeric_edges_for(fmt)
    rng = random.Random(draw(st.integers(0, 2**32)))
    try:
        out = mutation(rng, data)
    except Exception:  # a mutation that does not apply to this seed (as mutate() does)
        out = data
    if draw(st.booleans()):
        out = gzip.compress(out, mtime=0)
    return f"{seed.name}: {mutation.__name__}", out


def _keep(fmt: str, data: bytes) -> Path:
    where = KEPT / fmt
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{hashlib.sha1(data).hexdigest()[:16]}.bin"
    path.write_bytes(data)
    return path


def _verdict(path: Path) -> str | None:
    """None when ``path`` is read or refused cleanly, else what went wrong."""
    outcome = run_limited(check_file, str(path), memory=MEMORY, timeout=TIMEOUT)
    if outcome.status == "ok":
        return None
    if outcome.status == "raised":
        name, message, tb = outcome.value
        return f"{name}: {message}\n{tb}"
    return f"{outcome.status} ({outcome.value}) after {outcome.seconds:.1f} s"


# -- the tests ----------------------------------------------------------------------------


def _fuzz(fmt: str, tmp_path: Path, strategy: Any = None, examples: int = EXAMPLES) -> None:
    @settings(
        max_examples=examples if not SECONDS else 50,
        deadline=None,
        database=None,
        derandomize=not SECONDS,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy if strategy is not None else mutants(fmt))
    def one(mutant: tuple[str, bytes]) -> None:
        what, data = mutant
        path = tmp_path / "mutant"
        path.write_bytes(data)
        problem = _verdict(path)
        if problem:
            kept = _keep(fmt, data)
            pytest.fail(f"{fmt} ({what}), kept as {kept.relative_to(ROOT)}: {problem}")

    end = time.monotonic() + SECONDS
    one()
    while time.monotonic() < end:
        one()


@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_importer_survives_mutants(fmt: str, tmp_path: Path) -> None:
    _fuzz(fmt, tmp_path)


@pytest.mark.parametrize("kind", ["deep", "edges"])
@pytest.mark.parametrize("fmt", sorted(SEEDS))
def test_importer_survives_deep_nesting_and_numbers_at_the_edges(
    fmt: str, kind: str, tmp_path: Path
) -> None:
    """Every format nested thousands deep, and with int64's edges in its numbers: read
    (and written, and analyzed) within the limits, or refused in one line."""
    _fuzz(fmt, tmp_path, structured(fmt, kind), examples=2)


@st.composite
def damaged_directories(draw: st.DrawFn, into: Path) -> tuple[str, Path]:
    seed = draw(st.sampled_from(fuzz_mutants.directory_seeds()["hpctoolkit"]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    target = Path(tempfile.mkdtemp(dir=into)) / seed.name
    return fuzz_mutants.mutate_directory(rng, seed, target), target


def test_hpctoolkit_directories_survive_damage(tmp_path: Path) -> None:
    """An HPCToolkit measurement directory or database with one file damaged (an
    hpcstruct nested 40,000 deep, int64 edges in binary records, byte edits)."""

    @settings(
        max_examples=6 if not SECONDS else 50,
        deadline=None,
        database=None,
        derandomize=not SECONDS,
        suppress_health_check=list(HealthCheck),
    )
    @given(damaged_directories(tmp_path))
    def one(damaged: tuple[str, Path]) -> None:
        what, path = damaged
        problem = _verdict(path)
        if problem:
            pytest.fail(f"hpctoolkit ({what}), in {path}: {problem}")

    one()


def _kept_inputs() -> list[Path]:
    return sorted(p for p in KEPT.rglob("*") if p.is_file() and p.name not in NOT_INPUTS)


@pytest.mark.parametrize("path", _kept_inputs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_kept_inputs(path: Path) -> None:
    """Inputs that once broke an importer: each is now read or refused in one line."""
    problem = _verdict(path)
    assert problem is None, problem


def test_the_limit_turns_runaway_memory_into_a_failure() -> None:
    """The helper the fuzz tests rely on: a child that allocates without bound is stopped
    by its address-space limit, and a child that hangs by the timeout."""

    def grow() -> int:
        chunks = []
        while True:
            chunks.append(bytearray(64 << 20))

    assert run_limited(grow, memory=256 << 20, timeout=30).status == "memory"
    assert run_limited(time.sleep, 30, timeout=1).status == "timeout"
    assert run_limited(len, "abc").value == 3
