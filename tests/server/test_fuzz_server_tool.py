"""tools/fuzz_server.py itself: its cases cover every endpoint, survive their JSON form (the
replay file), and a short run against a real server ends with no failure."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import fuzz_server  # noqa: E402


def test_cases_cover_every_endpoint_and_round_trip():
    seeds = fuzz_server.Seeds()
    rng = random.Random(3)
    cases = [fuzz_server.generate(rng, seeds) for _ in range(400)]
    kinds = {c.endpoint.split(" ")[0] for c in cases}
    assert {
        "push",
        "ingest",
        "telemetry",
        "heartbeat",
        "trace",
        "trace-request",
        "querier",
        "read",
    } <= kinds
    for c in cases[:50]:
        back = fuzz_server.Case.from_json(json.loads(json.dumps(c.to_json())))
        assert back == c
    swept = fuzz_server.sweep(seeds)
    assert len(swept) > 2000
    assert any("SelectSeries.step=nan" in c.mutation for c in swept)
    assert any(c.path == "/api/v1/agents/heartbeat" and b"1e400" in c.body for c in swept)


def test_a_short_run_finds_nothing(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "fuzz_server.py"),
            "--cases",
            "60",
            "--no-sweep",
            "--minutes",
            "3",
            "--seed",
            "5",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cases"] == 60, r.stdout[-2000:] + r.stderr[-2000:]
    assert summary["failures"] == 0 and r.returncode == 0, r.stdout[-3000:]
