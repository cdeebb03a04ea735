"""``aiflame mcp`` driven by the MCP SDK's own client over stdio (and streamable HTTP with a
token): the tools are listed, each is called on real traces and profiles of tests/data, and
its numbers equal those of the aiflame command it names in its provenance (run here as a
separate process); answers carry their provenance and stay small; paths outside the roots
are refused."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip(
    "mcp.server.mcpserver", reason="aiflame mcp needs the mcp extra: pip install -e '.[mcp]'"
)

from mcpclient import Session, aiflame_env, stdio_server

from aiflame.mcp.bounds import name as short
from aiflame.model.folded import split_stack

DATA = Path(__file__).resolve().parents[1] / "data"
BERT = "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
RANKS = "kineto/hta/trace_filter"  # a directory of two ranks' traces
RECORDING = "server/torch_train_cpu.pb.gz"
STALLS = "gpu_instructions/rocprofiler_sdk/pc_sampling_stochastic_debug.csv"
SNAPSHOT = "memory/medium_128_inference_memory_snapshot.pickle.gz"
MAX_CHARS = 60_000
LOCAL_TOOLS = {
    "analyze_trace",
    "top_functions",
    "top_kernels",
    "gpu_stall_reasons",
    "diff_profiles",
    "memory_at_peak",
}


def cli(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "aiflame", *args],
        capture_output=True,
        text=True,
        env=aiflame_env(),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def session():
    with Session(stdio_server("--root", str(DATA))) as s:
        yield s


def named(rows: list[dict]) -> list[dict]:
    """Rows as the MCP answers give them: long names elided in the middle."""
    return [{**r, "name": short(r["name"])} for r in rows]


def check_provenance(answer: dict, files: list[str] | None = None) -> dict:
    p = answer["provenance"]
    assert p["metric"]["unit"] and "computed_by" in p and "samples" in p
    if files is not None:
        assert [i["path"] for i in p["inputs"]] == [str((DATA / f).resolve()) for f in files]
        assert all(i["bytes"] > 0 for i in p["inputs"])
    assert len(json.dumps(answer)) <= MAX_CHARS
    return p


def test_tools_are_listed_with_their_schemas(session):
    tools = {t.name: t for t in session.tools()}
    assert set(tools) == LOCAL_TOOLS  # no --server: no fleet tools
    for t in tools.values():
        assert t.description and t.input_schema["type"] == "object"
        assert t.annotations.read_only_hint is True
    assert tools["top_functions"].input_schema["properties"]["limit"]["maximum"] == 100


def test_analyze_trace_equals_aiflame_analyze(session):
    a = session.answer("analyze_trace", {"paths": [BERT], "top": 5})
    check_provenance(a, [BERT])
    want = json.loads(cli("analyze", str(DATA / BERT), "--json", "-", "--top", "5").stdout)
    (got,), (rank,) = a["ranks"], want["ranks"]
    assert got["time_breakdown"] == rank["time_breakdown"]
    assert got["top_kernels"] == named(rank["top_kernels"][:5])
    assert got["top_ops"] == named(rank["top_ops"][:5])
    assert [(f["rule"], f["severity"], f["cost_us"]) for f in got["findings"]] == [
        (f["rule"], f["severity"], f["cost_us"]) for f in rank["findings"][:5]
    ]
    assert got["findings"] and all(f["fix"] for f in got["findings"])
    assert a["provenance"]["samples"]["gpu_activities"] > 0


def test_analyze_a_directory_of_ranks(session):
    a = session.answer("analyze_trace", {"paths": [RANKS], "top": 3})
    want = json.loads(cli("analyze", str(DATA / RANKS), "--json", "-", "--top", "3").stdout)
    assert (
        [r["name"] for r in a["ranks"]]
        == [r["name"] for r in want["ranks"]]
        == [
            "rank 0",
            "rank 1",
        ]
    )
    for got, rank in zip(a["ranks"], want["ranks"], strict=True):
        assert got["time_breakdown"] == rank["time_breakdown"]
        assert got["top_kernels"] == named(rank["top_kernels"][:3])
    assert a["job"]["time_breakdown_sum"] == want["job"]["time_breakdown_sum"]
    assert len(a["provenance"]["inputs"]) == 2


def test_top_functions_equals_aiflame_top(session):
    for args, flags in (
        ({"paths": [RECORDING], "limit": 7}, []),
        ({"paths": [RECORDING], "by": "total", "kind": "python", "limit": 4},
         ["--by", "total", "--kind", "python"]),
        ({"paths": [BERT], "metric": "gpu-time", "limit": 5}, ["--metric", "gpu-time"]),
    ):  # fmt: skip
        a = session.answer("top_functions", args)
        n = str(args["limit"])
        want = json.loads(
            cli("top", str(DATA / args["paths"][0]), "-n", n, "--json", *flags).stdout
        )
        assert a["functions"] == named(want["functions"]) and a["total"] == want["total"]
        p = check_provenance(a, args["paths"])
        assert p["metric"] == {"name": want["metric"], "unit": want["unit"]}
        assert p["samples"] == want["samples"]
        assert p["command"].startswith("aiflame top ")


def test_top_kernels_of_a_trace_and_of_a_profile(session):
    a = session.answer("top_kernels", {"paths": [BERT], "limit": 4})
    want = json.loads(cli("analyze", str(DATA / BERT), "--json", "-", "--top", "4").stdout)
    assert a["ranks"][0]["kernels"] == named(want["ranks"][0]["top_kernels"][:4])
    assert a["provenance"]["metric"]["unit"] == "microseconds"
    # a flame graph's gpu-kernel frames (the trace read as a profile, as aiflame top reads it)
    b = session.answer("top_kernels", {"paths": [RECORDING]})
    assert b["kernels"] == []  # a CPU recording has no GPU kernel


def test_gpu_stall_reasons_equal_aiflame_analyze(session):
    a = session.answer("gpu_stall_reasons", {"paths": [STALLS], "limit": 3})
    want = json.loads(cli("analyze", str(DATA / STALLS), "--json", "-", "--top", "3").stdout)
    stalls = want["gpu_stalls"]
    assert a["total_samples"] == stalls["total_samples"]
    assert [k["kernel"] for k in a["kernels"]] == [
        short(k["kernel"]) for k in stalls["kernels"][:3]
    ]
    for got, k in zip(a["kernels"], stalls["kernels"], strict=False):
        assert got["reasons"] == k["reasons"][:3] and got["samples"] == k["samples"]
    assert [f["title"] for f in a["findings"]] == [f["title"] for f in stalls["findings"][:3]]
    check_provenance(a, [STALLS])


def folded_by_leaf(text: str) -> tuple[dict[str, list[float]], float, float]:
    """Self values per leaf frame of ``stack base test`` lines, and the two totals."""
    leaf: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    tb = tt = 0.0
    for line in text.splitlines():
        stack, b, t = line.rsplit(" ", 2)
        frames = split_stack(stack)
        leaf[frames[-1]][0] += float(b)
        leaf[frames[-1]][1] += float(t)
        tb, tt = tb + float(b), tt + float(t)
    return leaf, tb, tt


def test_diff_equals_aiflame_diff(session, tmp_path):
    base, test = f"{RANKS}/sampled_rank-0.json.gz", f"{RANKS}/sampled_rank-1.json.gz"
    a = session.answer("diff_profiles", {"base": base, "test": test, "limit": 5})
    out = tmp_path / "d.folded"
    cli("diff", str(DATA / base), str(DATA / test), "-o", str(out))
    leaf, tb, tt = folded_by_leaf(out.read_text())
    assert (a["total_base"], a["total_test"]) == (tb, tt)
    assert a["grew"] and a["shrank"]
    for row in a["grew"] + a["shrank"]:
        match = [v for k, v in leaf.items() if short(k) == row["name"]]
        assert [(row["self_base"], row["self_test"])] == [tuple(v) for v in match]
    changes = sorted((t - b for b, t in leaf.values()), reverse=True)
    assert [r["self_change"] for r in a["grew"]] == changes[:5]
    check_provenance(a, [base, test])


def test_memory_at_the_peak_equals_aiflame_memory(session, tmp_path):
    a = session.answer("memory_at_peak", {"path": SNAPSHOT, "limit": 3})
    out = tmp_path / "m.folded"
    cli("memory", str(DATA / SNAPSHOT), "-o", str(out))
    lines = [line.rsplit(" ", 1) for line in out.read_text().splitlines()]
    values = sorted(((float(v), split_stack(s)) for s, v in lines), key=lambda x: -x[0])
    assert a["metric_total_bytes"] == sum(v for v, _ in values)
    assert [s["bytes"] for s in a["stacks"]] == [v for v, _ in values[:3]]
    for got, (_, frames) in zip(a["stacks"], values, strict=False):
        assert got["stack_leaf_first"] == [short(f) for f in reversed(frames)][:24]
    assert a["summary"]["peak bytes"].startswith("1.62 GiB")
    p = check_provenance(a, [SNAPSHOT])
    assert p["metric"] == {"name": "peak-bytes", "unit": "bytes"}


def test_bad_inputs_are_tool_errors_with_one_message(session, tmp_path):
    r = session.call("top_functions", {"paths": ["/etc/passwd"]})
    assert r.is_error and "outside the directories" in r.content[0].text
    r = session.call("top_functions", {"paths": ["../../../etc/passwd"]})
    assert r.is_error and "outside the directories" in r.content[0].text
    r = session.call("top_functions", {"paths": [RECORDING], "metric": "nope"})
    assert r.is_error and "no metric 'nope'" in r.content[0].text
    r = session.call("gpu_stall_reasons", {"paths": [RECORDING]})
    assert r.is_error and "no GPU PC samples" in r.content[0].text
    r = session.call("top_functions", {"paths": [RECORDING], "limit": 1000})
    assert r.is_error  # the schema bounds the rows
    r = session.call("memory_at_peak", {"path": "server/PROVENANCE.md"})
    assert r.is_error and "\n" not in r.content[0].text.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_streamable_http_with_a_token(session, tmp_path):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    token = "mcp-http-token-0123456789"
    (tmp_path / "token").write_text(token + "\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "mcp", "--root", str(DATA),
         "--http", f"127.0.0.1:{port}", "--token-file", str(tmp_path / "token")],
        env=aiflame_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                denied = httpx2.post(url, json={}, timeout=5)
                break
            except httpx2.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.3)
        assert denied.status_code == 401
        wrong = httpx2.post(url, json={}, headers={"Authorization": "Bearer nope"}, timeout=5)
        assert wrong.status_code == 401
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300)
        with Session(streamable_http_client(url, http_client=client)) as http:
            assert {t.name for t in http.tools()} == LOCAL_TOOLS
            args = {"paths": [RECORDING], "limit": 5}
            got = http.answer("top_functions", args)
            same = session.answer("top_functions", args)
            got["provenance"].pop("computed_at")
            same["provenance"].pop("computed_at")
            assert got == same
    finally:
        proc.terminate()
        proc.wait(30)


def test_http_needs_a_token_file():
    out = subprocess.run(
        [sys.executable, "-m", "aiflame", "mcp", "--http", "127.0.0.1:8765"],
        capture_output=True, text=True, env=aiflame_env(), timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and "needs --token-file" in out.stderr
    assert out.stderr.count("\n") == 1
