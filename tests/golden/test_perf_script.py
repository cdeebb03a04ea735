"""perf script collapsing, line for line against FlameGraph's stackcollapse-perf.pl.

Expected files are FlameGraph's and inferno's own results, or the Perl script's output where
those differ from it (see the PROVENANCE.md files in tests/data/perf).
"""

from __future__ import annotations

import gzip
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from perf_fuzz import OPTIONS as FUZZ_OPTIONS
from perf_fuzz import SEEDS, expected_name, generate

from aiflame.errors import InputError
from aiflame.render.folded import render_folded
from aiflame.sources import load
from aiflame.sources.perf import parallel as perf_parallel
from aiflame.sources.perf.collapse import (
    Collapser,
    collapse,
    collapse_stream,
    folded_text,
    iter_chunks,
)
from aiflame.sources.perf.importer import sniff
from aiflame.sources.perf.rules import PerfOptions

DATA = Path(__file__).parent.parent / "data" / "perf"
FG = DATA / "flamegraph"
INF = DATA / "inferno"
FUZZ = DATA / "fuzz"

# stackcollapse-perf.pl flag -> PerfOptions
PERL_FLAGS = {
    "": PerfOptions(),
    "pid": PerfOptions(pid=True),
    "tid": PerfOptions(tid=True),
    "kernel": PerfOptions(kernel=True),
    "jit": PerfOptions(jit=True),
    "all": PerfOptions(annotate_all=True),
    "addrs": PerfOptions(addrs=True),
}
# ... and the aiflame flag for it
CLI_FLAGS = {"pid": "--pid", "tid": "--tid", "kernel": "--kernel", "jit": "--jit"}
CLI_FLAGS |= {"all": "--annotate-all", "addrs": "--addrs"}


def gunzip(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


def collapsed(data: bytes, options: PerfOptions, chunk: int | None = None) -> bytes:
    """What aiflame's collapser prints, as bytes (its text is Latin-1, one char per byte)."""
    c = Collapser(options)
    for text in iter_chunks(io.BytesIO(data), *([chunk] if chunk else [])):
        c.feed_text(text)
    return folded_text(c.result()).encode("latin-1")


def assert_same(got: bytes, expected: bytes, name: str) -> None:
    if got == expected:
        return
    g, e = got.split(b"\n"), expected.split(b"\n")
    for i, (x, y) in enumerate(zip(g, e, strict=False)):
        if x != y:
            pytest.fail(f"{name} line {i + 1}:\n  got      {x[:300]!r}\n  expected {y[:300]!r}")
    pytest.fail(f"{name}: {len(g)} lines, expected {len(e)}")


# -- FlameGraph's test.sh: 13 inputs x 6 options -------------------------------------------------


def _test_sh_cases() -> list[tuple[str, str]]:
    """(input stem, option) pairs as test.sh runs them."""
    script = (FG / "test.sh").read_text()
    opts = re.search(r"for opt in ([\w ]+); do", script).group(1).split()  # type: ignore[union-attr]
    stems = sorted(p.name[: -len(".txt.gz")] for p in (FG / "inputs").glob("*.txt.gz"))
    return [(stem, opt) for opt in opts for stem in stems]


def fg_expected(stem: str, opt: str) -> Path:
    name = f"{stem}-collapsed{'-' + opt if opt else ''}.txt.gz"
    fixed = FG / "results-41fee1f" / name
    return fixed if fixed.exists() else FG / "results" / name


CASES = _test_sh_cases()


def test_test_sh_has_all_cases():
    assert len(CASES) == 13 * 6
    assert {opt for _, opt in CASES} == set(PERL_FLAGS) - {""}


@pytest.mark.parametrize(("stem", "opt"), CASES, ids=[f"{s}-{o}" for s, o in CASES])
def test_flamegraph_results(stem: str, opt: str):
    data = gunzip(FG / "inputs" / f"{stem}.txt.gz")
    assert_same(collapsed(data, PERL_FLAGS[opt]), gunzip(fg_expected(stem, opt)), stem)


@pytest.mark.parametrize("stem", sorted({s for s, _ in CASES}))
def test_flamegraph_default_options(stem: str):
    data = gunzip(FG / "inputs" / f"{stem}.txt.gz")
    expected = gunzip(FG / "results-41fee1f" / f"{stem}-collapsed.txt.gz")
    assert_same(collapsed(data, PerfOptions()), expected, stem)
    # Same through the other entry points: iterable of lines, tiny chunks.
    lines = io.TextIOWrapper(io.BytesIO(data), encoding="latin-1", newline="\n")
    assert folded_text(collapse(lines)).encode("latin-1") == expected
    assert collapsed(data, PerfOptions(), chunk=61) == expected


def _tidy_java_roots(text: str) -> str:
    """Apply the Java rule of FlameGraph PR #147 to stale results: frames of stacks whose
    root starts with "java" lose a leading "L" when they contain a "/"."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames[0].startswith("java"):
            frames[1:] = [f[1:] if f.startswith("L") and "/" in f else f for f in frames[1:]]
        key = ";".join(frames)
        counts[key] = counts.get(key, 0) + int(count)
    return "".join(f"{k} {counts[k]}\n" for k in sorted(counts))


STALE = [(s, o) for s, o in CASES if (FG / "results-41fee1f" / fg_expected(s, o).name).exists()]


def test_stale_results_are_the_java_cases():
    assert sorted(STALE) == sorted(
        (s, o)
        for s in (
            "perf-java-faults-01",
            "perf-java-stacks-01",
            "perf-java-stacks-02",
            "perf-vertx-stacks-01",
        )
        for o in ("pid", "tid")
    )


@pytest.mark.parametrize(("stem", "opt"), STALE, ids=[f"{s}-{o}" for s, o in STALE])
def test_stale_results_differ_only_by_java_rule(stem: str, opt: str):
    stale = gunzip(FG / "results" / f"{stem}-collapsed-{opt}.txt.gz").decode("latin-1")
    data = gunzip(FG / "inputs" / f"{stem}.txt.gz")
    got = collapsed(data, PERL_FLAGS[opt]).decode("latin-1")
    assert got != stale
    assert got == _tidy_java_roots(stale)


# -- inferno's edge cases ------------------------------------------------------------------------

# inferno's tests use its defaults, except where the expected file names an option.
INFERNO = {
    "cpp-stacks-std-function": "",
    "empty-line": "",
    "go-stacks": "",
    "java-inline": "",
    "no-events": "",
    "single-event": "",
    "single-line-stacks": "",
    "sourcepawn-jitdump": "jit",
    "versioned-vmlinux": "kernel",
    "weird-stack-line": "",
}


def inferno_input(stem: str) -> bytes:
    return gunzip(INF / "inputs" / f"{stem}.txt.gz")


def inferno_name(stem: str, opt: str) -> str:
    return f"{stem}-collapsed{'-' + opt if opt else ''}.txt.gz"


@pytest.mark.parametrize("stem", sorted(INFERNO))
def test_inferno_inputs_as_stackcollapse(stem: str):
    opt = INFERNO[stem]
    expected = gunzip(INF / "results-41fee1f" / inferno_name(stem, opt))
    assert_same(collapsed(inferno_input(stem), PERL_FLAGS[opt]), expected, stem)


def test_inferno_no_events():
    assert collapsed(inferno_input("no-events"), PerfOptions()) == gunzip(
        INF / "results" / inferno_name("no-events", "")
    )


@pytest.mark.parametrize("stem", ["go-stacks", "java-inline"])
def test_inferno_counts_an_unterminated_last_sample(stem: str):
    """inferno counts the last sample without a blank line after it; Perl (and aiflame)
    drop it. With the blank line added, the results agree."""
    data = inferno_input(stem)
    expected = gunzip(INF / "results" / inferno_name(stem, ""))
    assert collapsed(data, PerfOptions()) != expected
    assert_same(collapsed(data + b"\n", PerfOptions()), expected, stem)


def test_inferno_marks_jitdump_libraries_as_jit():
    """inferno also annotates jitted-PID-N.so frames with _[j]; Perl only /tmp/perf-PID.map."""
    expected = gunzip(INF / "results" / inferno_name("sourcepawn-jitdump", "jit"))
    got = collapsed(inferno_input("sourcepawn-jitdump") + b"\n", PerfOptions(jit=True))
    assert b"_[j]" not in got
    assert got == expected.replace(b"_[j]", b"")


# -- generated odd inputs -------------------------------------------------------------------------

FUZZ_CASES = [(seed, flag) for seed in SEEDS for flag in FUZZ_OPTIONS]


@pytest.mark.parametrize("seed", list(SEEDS))
def test_fuzz_inputs_are_current(seed: int):
    assert gunzip(FUZZ / f"fuzz-{seed:02d}.txt.gz") == generate(seed)


@pytest.mark.parametrize(("seed", "flag"), FUZZ_CASES, ids=[f"{s}-{f}" for s, f in FUZZ_CASES])
def test_fuzz_against_stackcollapse(seed: int, flag: str):
    data = gunzip(FUZZ / f"fuzz-{seed:02d}.txt.gz")
    expected = gunzip(FUZZ / expected_name(seed, flag))
    options = PerfOptions(**FUZZ_OPTIONS[flag])  # type: ignore[arg-type]
    assert_same(collapsed(data, options), expected, f"fuzz {seed} {flag}")
    assert_same(collapsed(data, options, chunk=97), expected, f"fuzz {seed} {flag} (chunks)")


# -- parallel ranges -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stem", "event"),
    [
        ("perf-cycles-instructions-01", "instructions"),  # two event types: filter is global
        ("perf-iperf-stacks-pidtid-01", "cpu-clock"),
        ("perf-vertx-stacks-01", None),  # no "period event:" lines: stays serial
    ],
)
def test_parallel_ranges_give_the_same_result(stem, event, tmp_path, monkeypatch):
    data = gunzip(FG / "inputs" / f"{stem}.txt.gz")
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    monkeypatch.setattr(perf_parallel, "PARALLEL_MIN_BYTES", 0)
    starts = perf_parallel.range_starts(io.BytesIO(data), len(data), 3)
    assert len(starts) == 3 and all(data[s - 2 : s] == b"\n\n" for s in starts[1:])
    assert perf_parallel.first_event(io.BytesIO(data), starts[1]) == event
    # kinds=True: what the Profile path collapses with (kernel and JIT frames marked)
    for opts in (PerfOptions(tid=True), PerfOptions(kernel=True), PerfOptions(kinds=True)):
        serial = collapse_stream(io.BytesIO(data), opts)
        par = perf_parallel.collapse_file(str(path), opts, jobs=3)
        assert par.result() == serial.result()
        assert (par.unrecognized, par.filtered) == (serial.unrecognized, serial.filtered)
        assert par.samples == serial.samples


# -- the importer and the command line -----------------------------------------------------------


def test_sniff_recognises_perf_and_not_folded():
    for stem, _ in CASES[:13]:
        assert sniff(gunzip(FG / "inputs" / f"{stem}.txt.gz")[:65536], "x"), stem
    for path in list((FG / "results").glob("*.gz"))[:20]:
        assert not sniff(gunzip(path)[:65536], "x"), path.name


def test_load_labels_and_meta(tmp_path):
    path = tmp_path / "iperf.txt.gz"
    path.write_bytes((FG / "inputs" / "perf-iperf-stacks-pidtid-01.txt.gz").read_bytes())
    profile = load(str(path), perf_tid=True)
    assert profile.meta["format"] == "perf-script"
    assert profile.meta["info:event"] == "cpu-clock"
    labels = {profile.label_sets[i] for i in set(profile.sample_labels.tolist())}
    assert all({k for k, _ in ls} == {"comm", "pid", "tid"} for ls in labels)
    for i in range(len(profile)):  # the labels say what the root frame says
        comm, pid, tid = (
            dict(profile.label_sets[int(profile.sample_labels[i])])[k]
            for k in ("comm", "pid", "tid")
        )
        root = profile.stack_names(int(profile.sample_stack[i]))[0]
        assert root == f"{comm}-{pid}/{tid}".replace(" ", "_")
    expected = gunzip(fg_expected("perf-iperf-stacks-pidtid-01", "tid")).decode()
    assert render_folded(profile) == expected


def test_info_counts_the_samples_read_not_the_rows(capsys):
    # 'info' said "samples: 6" of a file with 333 samples of the event shown: the rows of a
    # collapsed profile are its distinct stacks.
    from aiflame.cli.main import main

    mixed = FG / "inputs" / "perf-cycles-instructions-01.txt.gz"
    events = re.findall(rb"^\S.*? (cycles|instructions): *$", gunzip(mixed), re.M)
    assert (events.count(b"instructions"), events.count(b"cycles")) == (333, 111)
    assert main(["info", str(mixed)]) == 0
    assert "samples:     333 (6 rows once identical stacks merge)" in capsys.readouterr().out
    assert main(["info", str(mixed), "--event-filter", "cycles"]) == 0
    assert "samples:     111 (" in capsys.readouterr().out
    assert load(str(mixed)).meta["samples_read"] == 333
    both = [str(mixed), str(FG / "inputs" / "perf-vertx-stacks-01.txt.gz")]
    vertx = load(both[1]).meta["samples_read"]
    assert main(["info", *both]) == 0  # merged inputs add their samples up
    assert f"samples:     {333 + vertx:,} (" in capsys.readouterr().out


def test_load_event_filter_and_errors(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(gunzip(FG / "inputs" / "perf-cycles-instructions-01.txt.gz"))
    cycles = load(str(path), perf_event_filter="cycles")
    assert cycles.meta["info:event"] == "cycles"
    assert "samples of other events" in str(cycles.meta["info:skipped"])
    with pytest.raises(InputError, match="no perf samples of event 'nope'"):
        load(str(path), perf_event_filter="nope")
    unterminated = tmp_path / "one.txt"
    unterminated.write_bytes(inferno_input("single-event"))
    with pytest.raises(InputError, match="the last one has none"):
        load(str(unterminated), "perf-script")


def test_utf8_names_round_trip(tmp_path):
    text = "pytho\u00f1 12 1.5: 3 cycles:\n\t1 f\u00fcnc\u00e9 (/lib/\u00e9.so)\n\n"
    path = tmp_path / "u.txt"
    path.write_bytes(text.encode("utf-8"))
    assert render_folded(load(str(path))) == "pytho\u00f1;f\u00fcnc\u00e9 3\n"


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args], input=stdin, capture_output=True, check=False
    )


def test_cli_prints_what_stackcollapse_prints(tmp_path):
    stem, opt = "perf-vertx-stacks-01", "all"
    data = gunzip(FG / "inputs" / f"{stem}.txt.gz")
    expected = gunzip(fg_expected(stem, opt))
    path = tmp_path / f"{stem}.txt"
    path.write_bytes(data)
    out = run_cli("convert", str(path), "-f", "folded", "-o", "-", CLI_FLAGS[opt])
    assert out.returncode == 0, out.stderr
    assert_same(out.stdout, expected, "cli")
    # stdin, and a .gz file
    out = run_cli("convert", "-", "-f", "folded", "-o", "-", "--annotate-all", stdin=data)
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected
    out = run_cli(
        "convert", str(FG / "inputs" / f"{stem}.txt.gz"), "-f", "folded", "-o", "-", "--tid"
    )
    assert out.stdout == gunzip(fg_expected(stem, "tid"))


def test_cli_error_is_one_line(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"java 12 1.0: cycles:\n\t1 main (/bin/x)\n")
    out = run_cli("convert", str(path), "-f", "folded", "-o", "-")
    assert out.returncode == 1
    assert out.stderr.decode().count("\n") == 1 and str(path) in out.stderr.decode()
