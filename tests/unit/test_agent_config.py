"""The agent's configuration: TOML and flags; a bad one is one line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiflame.agent.config import AgentConfig, ConfigError, load_file, spool_queues, validate

SRC = Path(__file__).resolve().parents[2] / "src"


def test_a_full_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    conf = tmp_path / "agent.toml"
    conf.write_text(
        f"""
host = "gpu-node-17"
period = 5
spool_max_mb = 64
[server]
url = "https://aiflame.example.com"
token_file = "{token}"
[pyroscope]
url = "https://profiles.example.com"
api = "ingest"
user = "123456"
password_file = "{token}"
tenant = "team-a"
[profiling]
cpu_hz = 49
cpu_budget_percent = 2.5
cuda = false
[labels]
static = {{ cluster = "a" }}
env = {{ team = "TEAM", model = "MODEL_NAME" }}
[api]
listen = "127.0.0.1:9465"
token_file = "{token}"
[tracing]
kineto_socket_dirs = ["/run/aiflame/kineto"]
max_duration_ms = 30000
"""
    )
    c = validate(load_file(str(conf)))
    assert (c.host, c.period, c.spool_max_bytes) == ("gpu-node-17", 5.0, 64 << 20)
    assert c.server.url == "https://aiflame.example.com" and c.server.token == "s3cret"
    assert (c.pyroscope.api, c.pyroscope.user, c.pyroscope.password, c.pyroscope.tenant) == (
        "ingest", "123456", "s3cret", "team-a",
    )  # fmt: skip
    assert (c.cpu_hz, c.cpu_budget, c.cuda) == (49, 0.025, False)
    assert c.static_labels == {"cluster": "a"} and c.env_labels == {
        "team": "TEAM",
        "model": "MODEL_NAME",
    }
    assert c.api_listen == "127.0.0.1:9465" and c.api_token == "s3cret"
    assert c.kineto_socket_dirs == ["/run/aiflame/kineto"] and c.trace_max_duration_ms == 30000
    assert spool_queues(c) == ["server", "pyroscope"]


def test_defaults():
    c = validate(AgentConfig())
    assert (c.period, c.cpu_hz, c.cpu_budget, c.metrics_listen) == (
        15.0,
        19,
        0.01,
        "127.0.0.1:9464",
    )
    assert c.env_labels == {"team": "AIFLAME_TEAM", "model": "AIFLAME_MODEL"}
    assert spool_queues(c) == ["local"]


def test_an_empty_token_file_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("")
    conf = tmp_path / "agent.toml"
    conf.write_text(f'[server]\ntoken_file = "{empty}"\n')
    with pytest.raises(ConfigError, match="is empty"):
        load_file(str(conf))


def test_a_bad_configuration_is_one_line_and_status_2(tmp_path):
    bad = tmp_path / "agent.toml"
    cases = {
        "period = 0\n": "period 0 s",
        "[profiling]\ncpu_hz = 'fast'\n": "profiling.cpu_hz: expected int",
        "[nope]\n": "unknown key nope",
        "[api]\nlisten = '0.0.0.0:9465'\n": "only with a token",
        "[server]\nurl = 'ftp://x'\n": "expected http:// or https://",
        "this is not toml": "not valid TOML",
        "[labels]\nenv = { 'bad-name' = 'X' }\n": "not a valid label name",
    }
    for text, expected in cases.items():
        bad.write_text(text)
        run = subprocess.run(
            [sys.executable, "-m", "aiflame", "agent", "--config", str(bad)],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2, (text, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("aiflame: error:"), run.stderr
        assert expected in lines[0], (text, lines[0])


def test_aiflame_trace_without_an_agent_is_one_line(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiflame",
            "trace",
            "--pid",
            "1",
            "--agent",
            str(tmp_path / "none.sock"),
        ],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert (
        run.stderr.strip()
        == f"aiflame: error: no aiflame agent at {tmp_path / 'none.sock'} (is it running?)"
    )
