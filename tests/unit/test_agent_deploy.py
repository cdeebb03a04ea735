"""deploy/: the files an SRE installs are valid as the agent reads them: the sample
configuration and the DaemonSet's ConfigMap load and validate, the manifest gives the
agent what it needs on a node, the systemd unit starts it with flags it accepts. (The
Grafana dashboard's metric names are checked against a live agent's /metrics in
tests/agent/test_agent_gpu.py.)"""

from __future__ import annotations

import configparser
import json
import shlex
from pathlib import Path

import yaml

from aiflame.agent.config import load_file, validate
from aiflame.cli.main import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_sample_configuration_validates():
    c = validate(load_file(str(DEPLOY / "agent.toml")))
    assert c.period == 10 and c.cpu_hz == 19 and c.kineto_socket_dirs == ["/run/aiflame/kineto"]


def test_the_daemonset_gives_the_agent_what_it_needs(tmp_path):
    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "aiflame-agent.yaml").read_text())
    }
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    container = spec["containers"][0]
    assert container["securityContext"]["privileged"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {
        "/var/lib/aiflame",
        "/run/aiflame",
        "/sys/fs/cgroup",
        "/sys/kernel/btf",
        "/var/log/containers",
    } <= mounts
    hostpaths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert "/run/aiflame" in hostpaths and "/var/lib/aiflame" in hostpaths
    conf = tmp_path / "agent.toml"
    conf.write_text(docs["ConfigMap"]["data"]["agent.toml"])
    c = validate(load_file(str(conf)))
    assert c.metrics_listen == "0.0.0.0:9464" and c.kineto_socket_dirs == ["/run/aiflame/kineto"]
    args = build_parser("agent").parse_args(["agent", *container["args"]])
    assert args.config == "/etc/aiflame/agent.toml"


def test_the_systemd_unit_starts_the_agent():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((DEPLOY / "systemd" / "aiflame-agent.service").read_text())
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[1:3] == ["agent", "--config"]
    build_parser("agent").parse_args(argv[1:])
    assert unit["Service"]["KillSignal"] == "SIGTERM" and unit["Service"]["User"] == "root"


def test_the_dashboard_is_grafana_json():
    dash = json.loads((DEPLOY / "grafana" / "aiflame-agent-dashboard.json").read_text())
    assert dash["uid"] == "aiflame-agent" and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
