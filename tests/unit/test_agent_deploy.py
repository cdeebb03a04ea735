"""deploy/: the files an SRE installs are valid as Kubernetes and the agent read them: every
manifest validates against Kubernetes' own schemas (kubernetes-validate, strict: no unknown
field), the DaemonSet schedules where system-node-critical needs a quota and runs with
named capabilities rather than privileged, the agent finds the server, its token and its
probes where the manifests put them, the sample configuration and the ConfigMap load and
validate, the images' Dockerfile builds from what .dockerignore lets through, the systemd
unit starts it with flags it accepts. (The probes themselves answer in
tests/agent/test_agent_spool_disk.py; the Grafana dashboard's metric names are checked
against a live agent's /metrics in tests/agent/test_agent_gpu.py.)"""

from __future__ import annotations

import configparser
import copy
import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from aiflame.agent.config import load_file, validate
from aiflame.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
MANIFESTS = sorted(KUBE.glob("*.yaml"))
# the oldest Kubernetes whose API these manifests use (securityContext.appArmorProfile)
KUBERNETES = ["1.30", "1.37"]
CAPABILITIES = {"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "SYS_RESOURCE", "DAC_READ_SEARCH"}


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def of_kind(path: Path, kind: str, name: str | None = None) -> dict:
    found = [d for d in documents(path) if d["kind"] == kind]
    if name is not None:
        found = [d for d in found if d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_every_manifest_validates_against_kubernetes_schemas(path, version):
    import kubernetes_validate

    docs = documents(path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any error


def test_the_validator_refuses_what_kubernetes_refuses():
    """Not a check that cannot fail: a misspelt field and a wrong type are errors."""
    import kubernetes_validate

    ds = of_kind(KUBE / "aiflame-agent.yaml", "DaemonSet")
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.30", strict=True)
    bad = copy.deepcopy(ds)
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9464"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.30", strict=True)


def test_the_daemonset_schedules_and_runs_with_named_capabilities():
    agent = KUBE / "aiflame-agent.yaml"
    ns = of_kind(agent, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    ds = of_kind(agent, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and not spec.get("hostNetwork")
    # system-node-critical outside kube-system needs a quota scoped to it (GKE refuses else)
    quota = of_kind(agent, "ResourceQuota")
    assert quota["metadata"]["namespace"] == ds["metadata"]["namespace"] != "kube-system"
    (scope,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert scope["scopeName"] == "PriorityClass" and scope["operator"] == "In"
    assert spec["priorityClassName"] in scope["values"]
    # no ServiceAccount token unless used
    assert of_kind(agent, "ServiceAccount")["automountServiceAccountToken"] is False
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc.get("privileged") is False and "allowPrivilegeEscalation" not in sc
    assert sc["capabilities"]["drop"] == ["ALL"] and set(sc["capabilities"]["add"]) == CAPABILITIES
    assert sc["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {"/var/lib/aiflame", "/run/aiflame", "/sys/fs/cgroup", "/sys/kernel/btf",
            "/var/log/containers", "/tmp"} <= mounts.keys()  # fmt: skip
    assert not any(p.startswith("/sys/kernel/debug") for p in mounts)  # no debugfs
    for path in ("/sys/fs/cgroup", "/sys/kernel/btf", "/var/log/containers", "/etc/aiflame"):
        assert mounts[path]["readOnly"] is True, path
    hostpaths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert "/run/aiflame" in hostpaths and "/var/lib/aiflame" in hostpaths
    # the probes are the agent's (served beside /metrics on the port the config names)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    conf = tomllib.loads(of_kind(agent, "ConfigMap")["data"]["agent.toml"])
    assert conf["metrics_listen"] == f"0.0.0.0:{ports['metrics']}"
    assert "runtimeClassName" in agent.read_text()  # documented, for the NVIDIA runtime
    args = build_parser("agent").parse_args(["agent", *container["args"]])
    assert args.config == "/etc/aiflame/agent.toml"


def test_the_agent_finds_the_server_and_its_token(tmp_path):
    agent, server = KUBE / "aiflame-agent.yaml", KUBE / "aiflame-server.yaml"
    conf_text = of_kind(agent, "ConfigMap")["data"]["agent.toml"]
    conf = tomllib.loads(conf_text)
    # the URL is the server's Service, in its namespace, on its port
    svc = of_kind(server, "Service", "aiflame-server")
    port = svc["spec"]["ports"][0]["port"]
    ns = svc["metadata"]["namespace"]
    assert conf["server"]["url"] == f"http://{svc['metadata']['name']}.{ns}.svc:{port}"
    # the token file is where the Secret is mounted, under its key
    pod = of_kind(agent, "DaemonSet")["spec"]["template"]["spec"]
    secret_volume = next(v for v in pod["volumes"] if "secret" in v)
    mount = next(m for m in pod["containers"][0]["volumeMounts"]
                 if m["name"] == secret_volume["name"])  # fmt: skip
    secret = of_kind(server, "Secret", secret_volume["secret"]["secretName"])
    (key,) = secret["stringData"]
    assert conf["server"]["token_file"] == f"{mount['mountPath']}/{key}"
    # ... and the token is one the server's token file grants "ingest"
    tokens = of_kind(server, "Secret", "aiflame-server-tokens")["stringData"]["tokens"]
    scopes = dict(line.split()[:2] for line in tokens.splitlines() if line and line[0] != "#")
    assert scopes[secret["stringData"][key]] == "ingest"
    # the ConfigMap is a configuration the agent takes, once the token file is there
    (tmp_path / key).write_text(secret["stringData"][key] + "\n")
    (tmp_path / "agent.toml").write_text(
        conf_text.replace(conf["server"]["token_file"], str(tmp_path / key))
    )
    c = validate(load_file(str(tmp_path / "agent.toml")))
    assert c.server.token == secret["stringData"][key] and c.dcgm_metrics == "drop"
    assert c.kineto_netns and not c.pid_label and not c.command_label


def test_the_server_runs_restricted_with_its_volume_and_probes():
    server = KUBE / "aiflame-server.yaml"
    sts = of_kind(server, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = build_parser("server").parse_args(["server", *container["args"]])
    host, _, port = args.listen.rpartition(":")
    assert host == "0.0.0.0" and args.token_file  # off loopback: with tokens only
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == int(port)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in ("/ready", "/healthz")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert args.store.startswith(f"chdb://{mounts[claim['metadata']['name']]}/")
    assert args.token_file.startswith(mounts["tokens"] + "/")
    # Pod Security "restricted"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert spec["automountServiceAccountToken"] is False
    assert of_kind(server, "Service")["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]


def test_the_images_build_from_what_dockerignore_lets_through():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    targets = re.findall(r"^FROM \S+ AS (\w+)$", dockerfile, re.M)
    assert {"agent", "server"} <= set(targets)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra in re.findall(r"\[(\w+)\]\" && rm", dockerfile):
        assert extra in extras, extra
    assert set(extras["agent"]) <= set(extras["fleet"])
    assert not any(d.startswith(("chdb", "pyarrow", "starlette")) for d in extras["agent"])
    patterns = [
        line for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]  # fmt: skip

    def ignored(path: str) -> bool:
        out = False
        for p in patterns:
            negate, pat = p.startswith("!"), p.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path, pat + "/*"):
                out = not negate
        return out

    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M):
        for source in sources.split():
            assert (ROOT / source).exists() and not ignored(source), source
    assert ignored("tests/agent/test_agent_gpu.py") and ignored(".git/HEAD")
    assert ignored("benchmarks/bench_agent.py") and not ignored("src/aiflame/__init__.py")


def test_the_sample_configuration_validates():
    c = validate(load_file(str(DEPLOY / "agent.toml")))
    assert c.period == 15 and c.cpu_hz == 19 and c.kineto_socket_dirs == ["/run/aiflame/kineto"]


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
