"""GPU telemetry through the real nvidia-ml-py binding on a stand-in libnvidia-ml.so.1 (built
here, values set by the test): the telemetry documents the agent pushes have the exact
busy, allocated and useful GPU-seconds and estimated FLOP of the definitions
(docs/fleet-protocol.md), per workload; a real Prometheus (Debian's package), started here
on loopback, scrapes the agent and serves the dcgm-exporter series back through its HTTP
API. Not seen on a real GPU: what a driver reports, only how the agent reads it."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from agent_helpers import need
from standin_server import StandIn

from aiflame.agent.gpu_peaks import PEAKS

pytestmark = pytest.mark.usefixtures("ebpf")
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
H100_PEAKS = dict(PEAKS)["H100"]
MiB = 1 << 20


def nvml_conf(path: Path, a: int, b: int, c: int, acct_ms: int) -> None:
    """The stand-in's values, replaced whole (it re-reads the file while the agent polls:
    a poll between a truncate and the write would see no devices)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        "\n".join(
            [
                "devices=2",
                "0.name=NVIDIA H100 80GB HBM3",
                "0.uuid=GPU-8e0c4a1b-0000-4000-8000-000000000001",
                "0.pci=00000000:19:00.0",
                "0.util=80",
                f"0.mem_used={30 * 1024 * MiB}",
                f"0.mem_total={80 * 1024 * MiB}",
                "0.power_mw=540200",
                "0.sm_clock=1980",
                "0.temp=61",
                "0.arch=9",
                "0.gpm=1",
                "0.gpm.2=60",  # SM active
                "0.gpm.3=33",  # SM occupancy
                "0.gpm.5=40",  # any tensor
                "0.gpm.7=40",  # HMMA
                "0.gpm.6=0",
                "0.gpm.10=38",  # DRAM
                "0.gpm.11=0",
                "0.gpm.12=10",  # FP32
                "0.gpm.13=0",
                f"0.procs={a}:{20 * 1024 * MiB},{b}:{10 * 1024 * MiB}",
                f"0.proc_util={a}:30,{b}:10",
                "1.name=NVIDIA A100-SXM4-80GB",
                "1.uuid=GPU-a100-0000-4000-8000-000000000002",
                "1.util=50",
                f"1.mem_used={5 * 1024 * MiB}",
                f"1.mem_total={80 * 1024 * MiB}",
                "1.arch=8",
                "1.accounting=1",
                f"1.procs={c}:{5 * 1024 * MiB}",
                f"1.acct={c}:50:{acct_ms}:1",
            ]
        )
        + "\n"
    )
    os.replace(tmp, path)


def sleeper(**env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={"PATH": os.environ["PATH"], **env},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prom_query(port: int, query: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as r:
        data = json.load(r)
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_gpu_telemetry_busy_seconds_and_prometheus(agents, tmp_path, short_tmp, nvml_lib):
    need(shutil.which("prometheus") is not None, "Debian's prometheus package is not installed")
    server = StandIn()
    server.start()
    procs = [
        sleeper(AIFLAME_TEAM="search", SLURM_JOB_ID="101"),
        sleeper(AIFLAME_TEAM="ads", SLURM_JOB_ID="102"),
        sleeper(AIFLAME_TEAM="infra", SLURM_JOB_ID="103"),
    ]
    a, b, c = (p.pid for p in procs)
    conf = tmp_path / "nvml.conf"
    nvml_conf(conf, a, b, c, acct_ms=10_000)
    prom = None
    try:
        agent = agents(
            [
                "--server", server.url, "--period", "2", "--metrics-listen", "127.0.0.1:0",
                "--no-cuda", "--no-kineto-abstract", "--api-socket", str(short_tmp / "a.sock"),
                "--trace-dir", str(tmp_path / "t"),
            ],
            tmp_path / "spool",
            env={"LD_LIBRARY_PATH": str(nvml_lib), "AIFLAME_FAKE_NVML": str(conf)},
        )  # fmt: skip
        assert (
            "GPU telemetry through NVML (driver 999.99-aiflame-stand-in): 2 GPUs" in agent.output()
        )
        prom_port = free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: aiflame\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{agent.metrics_port}']\n"
        )
        prom = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # the accounting baseline is read; then process c's busy time grows by 20 s x 50%
        time.sleep(3)
        nvml_conf(conf, a, b, c, acct_ms=30_000)
        deadline = time.monotonic() + 90
        util: list[dict] = []
        while time.monotonic() < deadline:
            try:
                util = prom_query(prom_port, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}')
                busy = prom_query(prom_port, 'aiflame_gpu_busy_seconds_total{team="search"}')
                if util and busy and len(server.got.telemetry) >= 4:
                    break
            except OSError:
                pass  # Prometheus is still starting
            time.sleep(0.5)
        assert util, agent.output()
        series = {
            q: prom_query(prom_port, q)
            for q in (
                'DCGM_FI_DEV_GPU_UTIL{gpu="0"}',
                'DCGM_FI_DEV_FB_USED{gpu="0"}',
                'DCGM_FI_DEV_POWER_USAGE{gpu="0"}',
                'DCGM_FI_PROF_SM_ACTIVE{gpu="0"}',
                'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0"}',
                'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"}',
                'aiflame_gpu_busy_seconds_total{team="search"}',
                "aiflame_sampling_rate_hz",
                "aiflame_agent_cpu_seconds_total",
                "aiflame_spool_bytes",
            )
        }
        with urllib.request.urlopen(
            f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10
        ) as r:
            exposed = set()
            for line in r.read().decode().splitlines():
                if line.startswith("# TYPE "):  # families without samples yet too
                    _, _, name, kind = line.split()
                    counter = kind == "counter" and not name.endswith("_total")
                    exposed.add(name + "_total" if counter else name)
                elif line and not line.startswith("#"):
                    exposed.add(line.split("{")[0].split(" ")[0])
        status = agent.stop()
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(20)
        for p in procs:
            p.kill()
            p.wait()
        server.stop()
    assert status == 0, agent.output()

    def value(q: str) -> float:
        return float(series[q][0]["value"][1])

    gpu0 = series['DCGM_FI_DEV_GPU_UTIL{gpu="0"}'][0]["metric"]
    assert gpu0["UUID"] == "GPU-8e0c4a1b-0000-4000-8000-000000000001"
    assert gpu0["modelName"] == "NVIDIA H100 80GB HBM3" and gpu0["device"] == "nvidia0"
    assert gpu0["Hostname"] and gpu0["pci_bus_id"] == "00000000:19:00.0"
    assert value('DCGM_FI_DEV_GPU_UTIL{gpu="0"}') == 80
    assert value('DCGM_FI_DEV_FB_USED{gpu="0"}') == 30 * 1024
    assert value('DCGM_FI_DEV_POWER_USAGE{gpu="0"}') == pytest.approx(540.2)
    assert value('DCGM_FI_PROF_SM_ACTIVE{gpu="0"}') == pytest.approx(0.6)
    assert value('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0"}') == pytest.approx(0.4)
    assert value('DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"}') == pytest.approx(0.38)
    assert value('aiflame_gpu_busy_seconds_total{team="search"}') > 0
    assert series['aiflame_gpu_busy_seconds_total{team="search"}'][0]["metric"]["job_id"] == "101"
    assert value("aiflame_sampling_rate_hz") >= 1
    assert {s["metric"]["part"] for s in series["aiflame_agent_cpu_seconds_total"]} == {
        "agent",
        "bpf",
    }

    # every series the Grafana dashboard queries is one the agent exposes
    dashboard = json.loads((DEPLOY / "grafana" / "aiflame-agent-dashboard.json").read_text())
    wanted = {
        name
        for p in dashboard["panels"]
        for t in p.get("targets", ())
        for name in re.findall(r"\b(?:DCGM_FI_[A-Z0-9_]+|aiflame_[a-z0-9_]+)\b", t["expr"])
    }
    assert wanted and wanted <= exposed, sorted(wanted - exposed)

    docs = sorted(server.got.telemetry.values(), key=lambda d: d["start"])
    assert len(docs) >= 4
    for prev, doc in itertools.pairwise(docs):
        assert doc["start"] == pytest.approx(prev["end"])  # periods tile the time
    acct_busy = 0.0
    for i, doc in enumerate(docs):
        T = doc["end"] - doc["start"]
        g0 = next(g for g in doc["gpus"] if g["index"] == 0)
        assert g0["util"] == pytest.approx(0.8)
        assert g0["memory_used_bytes"] == 30 * 1024 * MiB and g0["power_watts"] == pytest.approx(
            540.2
        )
        w = {x["labels"]["team"]: x for x in doc["workloads"]}
        assert w["search"]["pids"] == [a] and w["search"]["gpu_uuids"] == [g0["uuid"]]
        # busy: T x util, shared 30:10 by SM samples; allocated: T shared by the 2 workloads
        assert w["search"]["busy_gpu_seconds"] == pytest.approx(T * 0.8 * 0.75, rel=1e-9)
        assert w["ads"]["busy_gpu_seconds"] == pytest.approx(T * 0.8 * 0.25, rel=1e-9)
        assert w["search"]["allocated_gpu_seconds"] == pytest.approx(T / 2, rel=1e-9)
        assert w["infra"]["allocated_gpu_seconds"] == pytest.approx(T, rel=1e-9)
        assert w["search"]["gpu_memory_bytes"] == 20 * 1024 * MiB
        acct_busy += w["infra"]["busy_gpu_seconds"]
        if i == 0:
            continue  # GPM needs two samples: the first poll of the agent has none
        flops = 0.4 * H100_PEAKS.tensor_fp16 + 0.1 * H100_PEAKS.fp32
        assert g0["sm_active"] == pytest.approx(0.6) and g0["est_flops"] == pytest.approx(flops)
        assert "estimate" in g0["est_flops_basis"] and "989.4 TFLOP/s" in g0["est_flops_basis"]
        assert w["search"]["useful_gpu_seconds"] == pytest.approx(T * 0.6 * 0.75, rel=1e-9)
        assert w["search"]["est_flop"] == pytest.approx(T * flops * 0.75, rel=1e-9)
        g1 = next(g for g in doc["gpus"] if g["index"] == 1)
        assert "sm_active" not in g1 and "est_flops" not in g1  # no GPM before Hopper
    # process c's accounted busy time: (30 s - 10 s) x 50%, whatever the periods
    assert acct_busy == pytest.approx(10.0, rel=1e-9)


def test_a_host_without_nvidia_gpus(agents, tmp_path, short_tmp):
    agent = agents(
        ["--period", "2", "--metrics-listen", "", "--no-kineto-abstract", "--no-cuda",
         "--api-socket", str(short_tmp / "a.sock"), "--trace-dir", str(tmp_path / "t")],
        tmp_path / "spool",
        env={"LD_LIBRARY_PATH": str(tmp_path)},  # no libnvidia-ml.so.1 there
    )  # fmt: skip
    assert agent.stop() == 0
    line = next(x for x in agent.lines if "no GPU telemetry" in x)
    assert "CPU-only" in line


def test_gpus_held_by_pods_from_the_kubelet(agents, tmp_path, short_tmp, nvml_lib):
    """GPU 1 runs nothing but the kubelet's pod-resources API assigns it to a container:
    its time is allocated to that pod, and /metrics labels both GPUs with the pod holding
    them, as dcgm-exporter does (GPU 0's pod is the kubelet's, not its process's)."""
    pytest.importorskip("grpc", reason="grpcio is not installed: pip install -e '.[fleet]'")
    from kubelet_standin import KubeletStandIn, list_response

    server = StandIn()
    server.start()
    proc = sleeper(AIFLAME_TEAM="search")
    conf = tmp_path / "nvml.conf"
    nvml_conf(conf, proc.pid, proc.pid, proc.pid, acct_ms=0)
    lines = conf.read_text().splitlines()
    gpu1 = "GPU-a100-0000-4000-8000-000000000002"
    conf.write_text(  # GPU 1: no compute process, idle
        "\n".join(x for x in lines if not x.startswith(("1.procs", "1.acct", "1.util")))
        + "\n1.util=0\n"
    )
    sock = str(short_tmp / "kubelet.sock")
    gpu0 = "GPU-8e0c4a1b-0000-4000-8000-000000000001"
    held = [
        ("llm", "train-7b-0", [("trainer", [("nvidia.com/gpu", [gpu1])])]),
        ("llm", "eval-0", [("eval", [("nvidia.com/gpu", [gpu0])])]),
    ]
    kubelet = KubeletStandIn(sock, list_response(held)).start()
    config = tmp_path / "agent.toml"
    config.write_text(f'[labels]\npod_resources_socket = "{sock}"\n')
    try:
        agent = agents(
            [
                "--config", str(config), "--server", server.url, "--period", "2",
                "--metrics-listen", "127.0.0.1:0", "--no-cuda", "--no-kineto-abstract",
                "--api-socket", str(short_tmp / "a.sock"), "--trace-dir", str(tmp_path / "t"),
            ],
            tmp_path / "spool",
            env={"LD_LIBRARY_PATH": str(nvml_lib), "AIFLAME_FAKE_NVML": str(conf)},
        )  # fmt: skip
        assert "2 GPUs held by pods" in agent.output(), agent.output()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(server.got.telemetry) < 3:
            time.sleep(0.5)
        with urllib.request.urlopen(
            f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10
        ) as r:
            text = r.read().decode()
        status = agent.stop()
    finally:
        proc.kill()
        proc.wait()
        kubelet.stop()
        server.stop()
    assert status == 0, agent.output()
    util = {
        m.group(1): m.group(0)
        for m in re.finditer(r'^DCGM_FI_DEV_GPU_UTIL\{.*?gpu="(\d)".*$', text, re.M)
    }
    assert 'pod="eval-0"' in util["0"] and 'container="eval"' in util["0"], util
    assert 'pod="train-7b-0"' in util["1"] and 'namespace="llm"' in util["1"], util
    assert kubelet.calls >= 1
    docs = sorted(server.got.telemetry.values(), key=lambda d: d["start"])
    assert len(docs) >= 3
    for doc in docs:
        T = doc["end"] - doc["start"]
        held = [w for w in doc["workloads"] if w["labels"].get("pod") == "train-7b-0"]
        assert len(held) == 1, doc["workloads"]
        w = held[0]
        assert w["labels"] == {"host": w["labels"]["host"], "namespace": "llm",
                               "pod": "train-7b-0", "container": "trainer",
                               "service_name": "llm/train-7b-0"}  # fmt: skip
        assert w["pids"] == [] and w["gpu_uuids"] == [gpu1]
        assert w["allocated_gpu_seconds"] == pytest.approx(T, rel=1e-9)
        assert w["busy_gpu_seconds"] == 0
        # GPU 0 is still accounted by its process (the pod-resources answer names no pid)
        search = next(x for x in doc["workloads"] if x["labels"].get("team") == "search")
        assert search["allocated_gpu_seconds"] == pytest.approx(T, rel=1e-9)


HEALTH = [
    "0.ecc.sbe_vol=12",
    "0.ecc.dbe_vol=1",
    "0.ecc.sbe_agg=340",
    "0.ecc.dbe_agg=2",
    "0.retired_sbe=3",
    "0.retired_dbe=1",
    "0.retired_pending=1",
    "0.remap=5:1:0:0",
    "0.throttle=0x24",  # sw_power_cap + sw_thermal_slowdown
    "0.energy_mj=987654321",
    "0.pcie_tx=2048",  # KB/s
    "0.pcie_rx=1024",
    "0.pcie_replay=7",
    "0.field.138=1000",  # NVLink TX, KiB
    "0.field.139=3000",
    "0.field.38=4",  # NVLink CRC flit errors
    # GPU 1 in MIG mode: two instances, one held by a pod
    "1.mig=1",
    "1.mig.0.name=NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    "1.mig.0.uuid=MIG-11111111-2222-3333-4444-555555555555",
    "1.mig.0.gi=1",
    f"1.mig.0.mem_used={8 * 1024 * MiB}",
    f"1.mig.0.mem_total={40 * 1024 * MiB}",
    "1.mig.1.name=NVIDIA A100-SXM4-80GB MIG 1g.10gb",
    "1.mig.1.uuid=MIG-66666666-7777-8888-9999-000000000000",
    "1.mig.1.gi=13",
    f"1.mig.1.mem_used={1024 * MiB}",
    f"1.mig.1.mem_total={10 * 1024 * MiB}",
]


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The agent's /metrics: name -> [(labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_what_operators_alert_on_and_beside_dcgm_exporter(agents, tmp_path, short_tmp, nvml_lib):
    """XID errors (NVML events), ECC, retired pages, row remapping, clock event reasons,
    energy, PCIe, NVLink and MIG instances under dcgm-exporter's names, prefixed here
    (``dcgm_metrics = "prefix"``); then, beside a dcgm-exporter (``"drop"``), none of its
    series at all while the agent's own stay."""
    proc = sleeper(AIFLAME_TEAM="search")
    conf = tmp_path / "nvml.conf"
    nvml_conf(conf, proc.pid, proc.pid, proc.pid, acct_ms=0)
    conf.write_text(conf.read_text() + "\n".join(HEALTH) + "\n")
    args = ["--period", "1", "--metrics-listen", "127.0.0.1:0", "--no-cuda",
            "--no-kineto-abstract", "--no-kineto-netns", "--api-socket",
            str(short_tmp / "a.sock"), "--trace-dir", str(tmp_path / "t")]  # fmt: skip
    env = {"LD_LIBRARY_PATH": str(nvml_lib), "AIFLAME_FAKE_NVML": str(conf)}
    try:
        agent = agents([*args, "--dcgm-metrics", "prefix"], tmp_path / "spool", env=env)
        # two XID errors happen on GPU 0 (the stand-in queues them when its file changes)
        conf.write_text(conf.read_text() + "0.xids=79,48\n")
        deadline = time.monotonic() + 60
        got: dict = {}
        while time.monotonic() < deadline:
            got = scrape(agent.metrics_port)
            if got.get("aiflame_gpu_xid_errors_total") and got.get(
                "aiflame_DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
            ):
                break
            time.sleep(0.5)
        assert agent.stop() == 0
        dropped = agents([*args, "--dcgm-metrics", "drop"], tmp_path / "spool2", env=env)
        deadline = time.monotonic() + 30
        beside: dict = {}
        while time.monotonic() < deadline:
            beside = scrape(dropped.metrics_port)
            if beside.get("aiflame_gpu_clock_event_reason"):
                break
            time.sleep(0.5)
        assert dropped.stop() == 0
    finally:
        proc.kill()
        proc.wait()

    def one(name: str, gpu: str = "0", **labels: str) -> float:
        found = [v for lab, v in got[name] if lab["gpu"] == gpu
                 and all(lab.get(k) == x for k, x in labels.items())]  # fmt: skip
        assert len(found) == 1, (name, got.get(name))
        return found[0]

    assert not any(n.startswith("DCGM_FI_") for n in got)  # all prefixed
    p = "aiflame_DCGM_FI_"
    assert one(f"{p}DEV_ECC_SBE_VOL_TOTAL") == 12 and one(f"{p}DEV_ECC_DBE_VOL_TOTAL") == 1
    assert one(f"{p}DEV_ECC_SBE_AGG_TOTAL") == 340 and one(f"{p}DEV_ECC_DBE_AGG_TOTAL") == 2
    assert one(f"{p}DEV_RETIRED_SBE") == 3 and one(f"{p}DEV_RETIRED_DBE") == 1
    assert one(f"{p}DEV_RETIRED_PENDING") == 1
    assert one(f"{p}DEV_CORRECTABLE_REMAPPED_ROWS") == 5
    assert one(f"{p}DEV_UNCORRECTABLE_REMAPPED_ROWS") == 1
    assert one(f"{p}DEV_ROW_REMAP_FAILURE") == 0
    assert one(f"{p}DEV_CLOCK_THROTTLE_REASONS") == 0x24
    assert one("aiflame_gpu_clock_event_reason", reason="sw_power_cap") == 1
    assert one("aiflame_gpu_clock_event_reason", reason="sw_thermal_slowdown") == 1
    assert one("aiflame_gpu_clock_event_reason", reason="hw_slowdown") == 0
    assert one(f"{p}DEV_TOTAL_ENERGY_CONSUMPTION") == 987654321
    assert one(f"{p}PROF_PCIE_TX_BYTES") == 2048 * 1024
    assert one(f"{p}PROF_PCIE_RX_BYTES") == 1024 * 1024
    assert one(f"{p}DEV_PCIE_REPLAY_COUNTER") == 7
    assert one(f"{p}DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL") == 4
    assert one("aiflame_gpu_nvlink_bytes_total", direction="tx") == 1000 * 1024
    assert one("aiflame_gpu_nvlink_bytes_total", direction="rx") == 3000 * 1024
    assert one("aiflame_gpu_xid_errors_total", xid="79") == 1
    assert one("aiflame_gpu_xid_errors_total", xid="48") == 1
    assert one(f"{p}DEV_XID_ERRORS") == 48  # the last one, as dcgm-exporter's gauge
    # what GPU 1 does not report is absent, not 0
    assert not [lab for lab, _ in got[f"{p}DEV_ECC_SBE_VOL_TOTAL"] if lab["gpu"] == "1"]
    # MIG instances: their own memory series, with dcgm-exporter's instance labels
    mig = {lab["GPU_I_ID"]: (lab, v) for lab, v in got[f"{p}DEV_FB_USED"] if lab["GPU_I_ID"]}
    assert set(mig) == {"1", "13"}
    assert mig["1"][0]["GPU_I_PROFILE"] == "3g.40gb" and mig["1"][1] == 8 * 1024
    assert mig["13"][0]["GPU_I_PROFILE"] == "1g.10gb" and mig["13"][1] == 1024
    assert mig["1"][0]["UUID"] == "GPU-a100-0000-4000-8000-000000000002"
    free = {lab["GPU_I_ID"]: v for lab, v in got[f"{p}DEV_FB_FREE"] if lab["GPU_I_ID"]}
    assert free == {"1": 32 * 1024, "13": 9 * 1024}
    # the whole GPUs' series carry empty instance labels
    assert {lab["GPU_I_ID"] for lab, _ in got[f"{p}DEV_GPU_UTIL"]} == {""}

    # beside dcgm-exporter: not one of its series, the agent's own all there
    assert not any("DCGM_FI_" in n for n in beside), sorted(n for n in beside if "DCGM" in n)
    assert beside["aiflame_gpu_clock_event_reason"] and beside["aiflame_sampling_rate_hz"]
    # a short run on a quiet host: under its budget (no rate seen too dear to fit)
    assert {v for _, v in beside["aiflame_cpu_budget_over_at_any_rate"]} == {0}
    assert beside["aiflame_gpu_nvlink_bytes_total"]
    # the loss counter counts losses only: samples with a Python stack are none
    for lab, _ in beside.get("aiflame_dropped_events_total", []):
        assert "python" not in lab["what"], lab
