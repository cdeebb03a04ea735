"""Small inputs with a hostile structure, built by the tests that need them: slices and
stacks nested thousands deep, an hpcstruct of 40,000 nested inlined calls in a kilobyte of
gzip, and the command runner that holds each run to 2 GiB and a time limit."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from limited import GIB, limit_command

DATA = Path(__file__).parents[1] / "data"
HPCTOOLKIT = DATA / "gpu_instructions" / "hpctoolkit" / "loops-cuda-nvidiapc-t.m"
NSYS = DATA / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
SNAPSHOT = DATA / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"
KINETO = (
    DATA
    / "kineto"
    / "hta"
    / "critical_path"
    / "simple_add"
    / "benchmark_result_493459_1694039959_trace.json.gz"
)


def aiflame(
    *args: str, timeout: float = 120, memory: int = 2 * GIB, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``aiflame ARGS`` in a process limited to ``memory`` bytes of address space."""
    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args],
        capture_output=True,
        timeout=timeout,
        preexec_fn=limit_command(memory),
        env={**os.environ, **(env or {})},
    )


def one_error_line(r: subprocess.CompletedProcess, *fragments: str) -> str:
    err = r.stderr.decode()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert r.returncode == 1 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("aiflame: error: "), err
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def kineto_nested_syncs(path: Path, depth: int = 2_000) -> Path:
    """A Kineto trace of about 286 KB: ``aten::item`` and ``cudaStreamSynchronize``
    alternately nested ``depth`` deep on one thread (``depth / 2`` synchronizing calls, each
    inside all the others), and two kernels."""
    events = []
    for i in range(depth):
        sync = i % 2 == 1
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime" if sync else "cpu_op",
                "name": "cudaStreamSynchronize" if sync else "aten::item",
                "pid": 1,
                "tid": 1,
                "ts": 1_000_000 + i,
                "dur": 10_000_000 - 2 * i,
                "args": {"correlation": i, "External id": i},
            }
        )
    for corr, ts in ((1, 1_000_000), (3, 21_000_000)):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": 2,
                "args": {"correlation": corr, "device": 0, "stream": 7},
            }
        )
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "A100"}]}
    return _write(path, {**doc, "traceEvents": events})


def chrome_nested(path: Path, depth: int) -> Path:
    """A Chrome trace of 'B' events nested ``depth`` deep and never ended (30 bytes each)."""
    return _write(path, [{"ph": "B", "name": "f", "ts": i} for i in range(depth)])


def speedscope_evented(path: Path, depth: int) -> Path:
    """An evented speedscope profile opening and closing frames ``depth`` deep."""
    events = [{"type": "O", "frame": i % 5, "at": i} for i in range(depth)]
    events += [{"type": "C", "frame": (depth - 1 - i) % 5, "at": depth + i} for i in range(depth)]
    doc = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": f"f{i}"} for i in range(5)]},
        "profiles": [
            {
                "type": "evented",
                "name": "deep",
                "unit": "none",
                "startValue": 0,
                "endValue": 2 * depth,
                "events": events,
            }
        ],
    }
    return _write(path, doc)


def hpctoolkit_with_struct(where: Path, body: str) -> Path:
    """A copy of the real HPCToolkit measurement directory whose host binary's hpcstruct
    (gzip) holds ``body`` inside procedure ``main``."""
    copy = where / "measurements.m"
    shutil.copytree(HPCTOOLKIT, copy)
    struct = copy / "structs" / "testmeas-loops-cuda.hpcstruct.gz"
    module = "/builds/hpctoolkit/hpctoolkit/ci/build/tests2/data/meas/testmeas-loops-cuda"
    head = (
        '<?xml version="1.0"?>\n<HPCToolkitStructure i="0" version="4.9" n="">\n'
        f'<LM i="2" n="{module}" has-calls="0" v="{{}}">\n<F i="3" n="loops.cu">\n'
        '<P i="4" n="main" l="35" v="{[0xade0-0xade1)}">\n'
    )
    struct.write_bytes(gzip.compress((head + body).encode(), 9, mtime=0))
    return copy


__all__ = [
    "GIB",
    "KINETO",
    "NSYS",
    "SNAPSHOT",
    "aiflame",
    "chrome_nested",
    "hpctoolkit_with_struct",
    "kineto_nested_syncs",
    "one_error_line",
    "speedscope_evented",
]
