#!/usr/bin/env python3
"""Small inputs nested thousands deep, through the commands, with two aiflame source trees
side by side (``--before``: an older checkout's ``src``; ``--after``: this one).

    python benchmarks/bench_deep_nesting.py --before /path/to/old/src [--after src]

Each run is a new process limited to 2 GiB of address space and 120 s (as the fuzzer's
runs are); the table gives wall seconds and peak RSS of each, and how it ended (ok, error:
one line, or the failure). Inputs: a Kineto trace of ``aten::item`` and
``cudaStreamSynchronize`` nested alternately (286 KB and 1.4 MB), Chrome traces of 'B'
events nested 5,000 and 9,000 deep, an evented speedscope profile nested 2,500 deep, a
folded file with one stack 2,040 deep sorted before 70,000 short ones, an hpcstruct of
40,000 nested inlined calls in an HPCToolkit measurement directory, and an Austin file
with a 100,000-character name full of " (".
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HPCTOOLKIT = ROOT / "tests/data/gpu_instructions/hpctoolkit/loops-cuda-nvidiapc-t.m"
LIMIT = 2 << 30


def kineto(path: Path, depth: int) -> Path:
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime" if i % 2 else "cpu_op",
            "name": "cudaStreamSynchronize" if i % 2 else "aten::item",
            "pid": 1,
            "tid": 1,
            "ts": 1_000_000 + i,
            "dur": 10_000_000 - 2 * i,
            "args": {"correlation": i, "External id": i},
        }
        for i in range(depth)
    ]
    events += [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 2,
         "args": {"correlation": c, "device": 0, "stream": 7}}
        for c, ts in ((1, 1_000_000), (3, 21_000_000))
    ]  # fmt: skip
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def chrome(path: Path, depth: int) -> Path:
    path.write_text(json.dumps([{"ph": "B", "name": "f", "ts": i} for i in range(depth)]))
    return path


def speedscope(path: Path, depth: int) -> Path:
    events = [{"type": "O", "frame": i % 5, "at": i} for i in range(depth)]
    events += [{"type": "C", "frame": (depth - 1 - i) % 5, "at": depth + i} for i in range(depth)]
    path.write_text(
        json.dumps({
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": [{"name": f"f{i}"} for i in range(5)]},
            "profiles": [{"type": "evented", "name": "deep", "unit": "none", "startValue": 0,
                          "endValue": 2 * depth, "events": events}],
        })
    )  # fmt: skip
    return path


def wide(path: Path) -> Path:
    deep = ";".join(f"a{i % 3}" for i in range(2_040))
    path.write_text(f"{deep} 1\n" + "".join(f"b;s{i} 1\n" for i in range(70_000)))
    return path


def hpcstruct(where: Path) -> Path:
    copy = where / "measurements.m"
    shutil.copytree(HPCTOOLKIT, copy)
    module = "/builds/hpctoolkit/hpctoolkit/ci/build/tests2/data/meas/testmeas-loops-cuda"
    text = (
        '<?xml version="1.0"?>\n<HPCToolkitStructure i="0" version="4.9" n="">\n'
        f'<LM i="2" n="{module}" has-calls="0" v="{{}}">\n<F i="3" n="loops.cu">\n'
        '<P i="4" n="main" l="35" v="{[0xade0-0xade1)}">\n'
        + '<A l="2" n="f">' * 40_000
        + '<S l="9" v="{[0xa000-0xb000)}"/>' * 2_000
    )
    struct = copy / "structs" / "testmeas-loops-cuda.hpcstruct.gz"
    struct.write_bytes(gzip.compress(text.encode(), 9, mtime=0))
    return copy


def austin(path: Path) -> Path:
    path.write_text(f"# austin: 3.0.0\n# mode: wall\n\nP1;T1;a.py:<{' (' * 50_000}>:3 10\n")
    return path


def cases(work: Path) -> list[tuple[str, Path, list[str]]]:
    k286, k1400 = kineto(work / "k286.json", 2_000), kineto(work / "k1400.json", 10_000)
    c5, c9 = chrome(work / "c5000.json", 5_000), chrome(work / "c9000.json", 9_000)
    s25 = speedscope(work / "s2500.json", 2_500)
    out = []
    for name, path in (("kineto nested syncs", k286), ("kineto nested syncs", k1400)):
        out.append((name, path, ["analyze", str(path)]))
    for name, path in (("chrome B 5,000 deep", c5), ("chrome B 9,000 deep", c9),
                       ("speedscope 2,500 deep", s25)):  # fmt: skip
        for fmt in ("folded", "speedscope", "pprof"):
            out.append((f"{name} -f {fmt}", path, ["convert", str(path), "-f", fmt]))
    w = wide(work / "wide.folded")
    out += [
        (f"wide + one deep -f {f}", w, ["convert", str(w), "-f", f])
        for f in ("pprof", "speedscope")
    ]
    h = hpcstruct(work)
    out.append(("hpcstruct 40,000 nested", h / "structs" / "testmeas-loops-cuda.hpcstruct.gz",
                ["convert", str(h), "-f", "folded"]))  # fmt: skip
    a = austin(work / "x.austin")
    out.append(("austin long ( name", a, ["convert", str(a), "-f", "folded"]))
    return out


def run(src: str, argv: list[str], out: Path) -> tuple[str, float, float]:
    """(outcome, seconds, peak RSS MiB) of one command (peak RSS by GNU time)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    rss = out.with_name("rss.txt")
    cmd = [sys.executable, "-m", "aiflame", *argv]
    if argv[0] == "convert":
        cmd += ["-o", str(out)]
    start = time.monotonic()
    try:
        r = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", str(rss), *cmd],
            capture_output=True, timeout=120, preexec_fn=limit,
            env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        err = r.stderr.decode().strip()
        if r.returncode == 0:
            outcome = "ok"
        elif "out of memory" in err or "MemoryError" in err:
            outcome = "out of memory"
        elif r.returncode == 1 and len(err.splitlines()) == 1:
            outcome = "refused: " + err[len("aiflame: error: ") :]
        else:
            outcome = f"failed ({r.returncode})"
    except subprocess.TimeoutExpired:
        outcome = "over 120 s"
    seconds = time.monotonic() - start
    try:
        peak = int(rss.read_text().split()[-1]) / 1024
    except (OSError, ValueError, IndexError):
        peak = float("nan")
    out.unlink(missing_ok=True)
    return outcome, seconds, peak


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--before", required=True, help="an older aiflame's src directory")
    p.add_argument("--after", default=str(ROOT / "src"), help="this aiflame's src (default)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        print("| input, command | before | after |\n|---|---|---|")
        for name, path, argv in cases(work):
            out = work / (
                "out" + {"pprof": ".pb.gz", "speedscope": ".json"}.get(argv[-1], ".folded")
            )
            size = sum(f.stat().st_size for f in [path]) / 1024
            before = run(args.before, argv, out)
            after = run(args.after, argv, out)
            print(
                f"| {name} ({size:,.0f} KB) | {before[1]:.1f} s, {before[2]:,.0f} MiB, {before[0]}"
                f" | {after[1]:.1f} s, {after[2]:,.0f} MiB, {after[0][:70]} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
