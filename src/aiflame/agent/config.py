"""The agent's configuration: a TOML file (``--config``), then flags over it.

::

    host = "gpu-node-17"              # default: the host name
    period = 15                       # seconds per profile / telemetry document
    spool = "/var/lib/aiflame/spool"
    spool_max_mb = 512
    metrics_listen = "127.0.0.1:9464" # "" turns /metrics off (and the health probes)
    dcgm_metrics = "keep"             # DCGM_FI_* GPU series: "keep", "prefix" (aiflame_DCGM_FI_*)
                                      # or "drop" (beside dcgm-exporter)

    [server]                          # aiflame server (profiles, telemetry, traces)
    url = "https://aiflame.example.com"
    token_file = "/etc/aiflame/token"

    [pyroscope]                       # the same profiles to Grafana Pyroscope / Grafana Cloud
    url = "https://profiles-prod-001.grafana.net"
    api = "push"                      # or "ingest" (Pyroscope's older API)
    user = "123456"                   # basic auth user (Grafana Cloud: the stack's user id)
    password_file = "/etc/aiflame/pyroscope-token"   # or token_file: Bearer
    tenant = ""                       # X-Scope-OrgID

    [otlp]                            # the same profiles to an OpenTelemetry collector
    url = "http://otel-collector:4318"   # OTLP/HTTP (no path: /v1development/profiles)
    headers = { Authorization = "Bearer ..." }   # sent as they are; or token_file: Bearer
    tenant = ""                       # X-Scope-OrgID

    [profiling]
    cpu_hz = 19                       # a prime, jittered: never in step with periodic work
    cpu_budget_percent = 1.0          # of one core, for all of the agent
    min_cpu_hz = 2                    # the budget never lowers it further
    cuda = true                       # CUDA/HIP API and GPU memory probes

    [telemetry]
    interval = 1.0                    # seconds between NVML polls
    nvml = true

    [labels]
    static = { cluster = "a" }        # on everything of this host
    env = { team = "AIFLAME_TEAM", model = "AIFLAME_MODEL" }   # label = process env var
    pod_labels = { team = "team" }    # label = Kubernetes pod label (needs kubelet_url)
    kubelet_url = ""                  # e.g. https://127.0.0.1:10250 (pod labels)
    kubelet_token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    kube_log_dir = "/var/log/containers"
    # which GPU (UUID) each container holds; "" turns it off
    pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock"
    pid = false                       # pid a series label (a series per process)
    command = false                   # the command line a label (credentials redacted)

    [[relabel]]                       # Prometheus-style rules, in order (agent/relabel.py)
    action = "drop"                   # keep, drop, replace, labelkeep, labeldrop, labelmap
    source_labels = ["comm"]
    regex = "sh|bash"

    [processes]                       # which processes are profiled at all
    include = []                      # tables of label = regex (all must match)
    exclude = [{ comm = "sshd" }]

    [api]
    socket = "/run/aiflame/agent.sock"
    listen = ""                       # TCP, only with token_file
    token_file = ""

    [tracing]
    kineto_abstract = true            # the abstract socket @dynolog
    kineto_netns = true               # @dynolog in every pod's network namespace too
    kineto_socket_dirs = []           # directories for KINETO_IPC_SOCKET_DIR
    output_dir = "/var/lib/aiflame/traces"
    max_duration_ms = 60000
    timeout = 180                     # seconds for a trace to be written

Anything wrong (an unknown key, a value of the wrong type, a TCP API without a token, an
unreadable token file) is one line and exit status 2.
"""

from __future__ import annotations

import re
import socket
import tomllib
from dataclasses import dataclass, field
from typing import Any

from aiflame.agent.identity import DEFAULT_ENV_LABELS, LabelRules, valid_label_name
from aiflame.agent.relabel import ProcessMatcher, RelabelRule, RuleError
from aiflame.errors import AiflameError

DCGM_MODES = ("keep", "prefix", "drop")


class ConfigError(AiflameError):
    """The configuration cannot be used (exit status 2)."""


@dataclass
class Remote:
    url: str = ""
    token: str = ""
    user: str = ""
    password: str = ""
    tenant: str = ""
    api: str = "push"
    ca_file: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # sent as they are (OTLP)


@dataclass
class AgentConfig:
    host: str = field(default_factory=socket.gethostname)
    period: float = 15.0  # (Grafana Alloy's eBPF profiler's): a third of the cost is per period
    spool: str = "/var/lib/aiflame/spool"
    spool_max_bytes: int = 512 << 20
    metrics_listen: str = "127.0.0.1:9464"
    dcgm_metrics: str = "keep"  # DCGM_MODES
    server: Remote = field(default_factory=Remote)
    pyroscope: Remote = field(default_factory=Remote)
    otlp: Remote = field(default_factory=lambda: Remote(api="otlp"))
    cpu_hz: int = 19
    cpu_budget: float = 0.01  # of one core
    min_cpu_hz: int = 2
    cuda: bool = True
    telemetry_interval: float = 1.0
    nvml: bool = True
    static_labels: dict[str, str] = field(default_factory=dict)
    env_labels: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV_LABELS))
    pod_labels: dict[str, str] = field(default_factory=dict)
    kubelet_url: str = ""
    kubelet_token: str = ""
    kubelet_ca_file: str = ""
    kube_log_dir: str = "/var/log/containers"
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    pid_label: bool = False
    command_label: bool = False
    relabel: list[RelabelRule] = field(default_factory=list)
    include: list[ProcessMatcher] = field(default_factory=list)
    exclude: list[ProcessMatcher] = field(default_factory=list)
    api_socket: str = "/run/aiflame/agent.sock"
    api_listen: str = ""
    api_token: str = ""
    kineto_abstract: bool = True
    kineto_netns: bool = True
    kineto_socket_dirs: list[str] = field(default_factory=list)
    trace_dir: str = "/var/lib/aiflame/traces"
    trace_max_duration_ms: int = 60_000
    trace_timeout: float = 180.0

    def label_rules(self) -> LabelRules:
        return LabelRules(
            env=dict(self.env_labels), pod_labels=dict(self.pod_labels),
            static=dict(self.static_labels), pid=self.pid_label, command=self.command_label,
            relabel=list(self.relabel), include=list(self.include), exclude=list(self.exclude),
        )  # fmt: skip


# TOML section.key -> (attribute, type)
_TOP = {
    "host": ("host", str),
    "period": ("period", float),
    "spool": ("spool", str),
    "spool_max_mb": ("spool_max_bytes", "mb"),
    "metrics_listen": ("metrics_listen", str),
    "dcgm_metrics": ("dcgm_metrics", str),
}
_SECTIONS: dict[str, dict[str, tuple[str, Any]]] = {
    "profiling": {
        "cpu_hz": ("cpu_hz", int),
        "cpu_budget_percent": ("cpu_budget", "percent"),
        "min_cpu_hz": ("min_cpu_hz", int),
        "cuda": ("cuda", bool),
    },
    "telemetry": {"interval": ("telemetry_interval", float), "nvml": ("nvml", bool)},
    "labels": {
        "static": ("static_labels", dict),
        "env": ("env_labels", dict),
        "pod_labels": ("pod_labels", dict),
        "kubelet_url": ("kubelet_url", str),
        "kubelet_token_file": ("kubelet_token", "file"),
        "kubelet_ca_file": ("kubelet_ca_file", str),
        "kube_log_dir": ("kube_log_dir", str),
        "pod_resources_socket": ("pod_resources_socket", str),
        "pid": ("pid_label", bool),
        "command": ("command_label", bool),
    },
    "processes": {"include": ("include", "matchers"), "exclude": ("exclude", "matchers")},
    "api": {
        "socket": ("api_socket", str),
        "listen": ("api_listen", str),
        "token_file": ("api_token", "file"),
    },
    "tracing": {
        "kineto_abstract": ("kineto_abstract", bool),
        "kineto_netns": ("kineto_netns", bool),
        "kineto_socket_dirs": ("kineto_socket_dirs", list),
        "output_dir": ("trace_dir", str),
        "max_duration_ms": ("trace_max_duration_ms", int),
        "timeout": ("trace_timeout", float),
    },
}
_REMOTE = {
    "url": ("url", str),
    "token_file": ("token", "file"),
    "user": ("user", str),
    "password_file": ("password", "file"),
    "tenant": ("tenant", str),
    "api": ("api", str),
    "ca_file": ("ca_file", str),
    "headers": ("headers", dict),
}


def read_secret(path: str, what: str) -> str:
    """The first line of a token/password file (stripped)."""
    try:
        with open(path, encoding="utf-8") as f:
            value = f.readline().strip()
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror or e}") from None
    if not value:
        raise ConfigError(f"{what} {path} is empty")
    return value


def _convert(value: Any, kind: Any, where: str) -> Any:
    if kind == "matchers":
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise ConfigError(f"{where}: expected a list of tables (label = regex)")
        try:
            return [ProcessMatcher.from_config(v) for v in value]
        except RuleError as e:
            raise ConfigError(f"{where}: {e}") from None
    if kind == "file":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a file name")
        return read_secret(value, where)
    if kind in ("mb", "percent"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return int(value * (1 << 20)) if kind == "mb" else float(value) / 100.0
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
    if kind is dict and not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: expected a table of strings")
    if kind is list and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return value


def load_file(path: str, config: AgentConfig | None = None) -> AgentConfig:
    config = config or AgentConfig()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e})") from None
    for key, value in data.items():
        if key in _TOP:
            attr, kind = _TOP[key]
            setattr(config, attr, _convert(value, kind, key))
        elif key == "relabel":
            config.relabel = _relabel_rules(value, path)
        elif key in ("server", "pyroscope", "otlp"):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [{key}] must be a table")
            remote = getattr(config, key)
            for k, v in value.items():
                if k not in _REMOTE:
                    raise ConfigError(f"{path}: unknown key {key}.{k}")
                attr, kind = _REMOTE[k]
                setattr(remote, attr, _convert(v, kind, f"{key}.{k}"))
        elif key in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [{key}] must be a table")
            for k, v in value.items():
                if k not in _SECTIONS[key]:
                    raise ConfigError(f"{path}: unknown key {key}.{k}")
                attr, kind = _SECTIONS[key][k]
                setattr(config, attr, _convert(v, kind, f"{key}.{k}"))
        else:
            raise ConfigError(f"{path}: unknown key {key}")
    return config


def _relabel_rules(value: Any, path: str) -> list[RelabelRule]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{path}: relabel must be an array of tables ([[relabel]])")
    rules = []
    for i, table in enumerate(value):
        try:
            rules.append(RelabelRule.from_config(table))
        except RuleError as e:
            raise ConfigError(f"{path}: relabel rule {i + 1}: {e}") from None
    return rules


def validate(c: AgentConfig) -> AgentConfig:
    """Check what no single value shows; raises ConfigError."""
    if not 1 <= c.period <= 3600:
        raise ConfigError(f"period {c.period:g} s: expected 1 to 3600 seconds")
    if not 1 <= c.cpu_hz <= 1000:
        raise ConfigError(f"cpu_hz {c.cpu_hz}: expected 1 to 1000")
    if not 0 <= c.cpu_budget <= 1:
        raise ConfigError("cpu_budget_percent: expected 0 to 100")
    if not 0.1 <= c.telemetry_interval <= c.period:
        raise ConfigError(
            f"telemetry interval {c.telemetry_interval:g} s: expected 0.1 s to the period"
        )
    for remote, what in ((c.server, "server"), (c.pyroscope, "pyroscope"), (c.otlp, "otlp")):
        if remote.url and not remote.url.startswith(("http://", "https://")):
            raise ConfigError(f"{what} URL {remote.url!r}: expected http:// or https://")
        apis = ("otlp",) if what == "otlp" else ("push", "ingest")
        if remote.api not in apis:
            raise ConfigError(f"{what} api {remote.api!r}: expected {' or '.join(apis)}")
        bad = [k for k, v in remote.headers.items() if not _HEADER.match(k) or _CTL.search(v)]
        if bad:
            raise ConfigError(f"{what} header {bad[0]!r}: not a valid HTTP header")
    if c.api_listen and not c.api_token:
        raise ConfigError("the API listens on TCP only with a token: give --token-file")
    for addr, what in ((c.metrics_listen, "metrics listen"), (c.api_listen, "API listen")):
        if addr and not _host_port(addr):
            raise ConfigError(f"{what} address {addr!r}: expected HOST:PORT")
    for table, what in (
        (c.static_labels, "labels.static"),
        (c.env_labels, "labels.env"),
        (c.pod_labels, "labels.pod_labels"),
    ):
        bad = [k for k in table if not valid_label_name(k)]
        if bad:
            raise ConfigError(
                f"{what}: {bad[0]!r} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)"
            )
    if c.dcgm_metrics not in DCGM_MODES:
        raise ConfigError(f"dcgm_metrics {c.dcgm_metrics!r}: expected {', '.join(DCGM_MODES)}")
    for rule in c.relabel:
        target = rule.target_label
        if target and "$" not in target and not valid_label_name(target):
            raise ConfigError(f"relabel target_label {target!r} is not a valid label name")
    if c.spool_max_bytes < 1 << 20:
        raise ConfigError("spool_max_mb: at least 1")
    return c


_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # an HTTP field name (RFC 9110 token)
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # not in a field value


def _host_port(addr: str) -> bool:
    _, sep, port = addr.rpartition(":")
    return bool(sep) and port.isdigit() and 0 <= int(port) < 65536


def spool_queues(c: AgentConfig) -> list[str]:
    remotes = (("server", c.server), ("pyroscope", c.pyroscope), ("otlp", c.otlp))
    queues = [name for name, r in remotes if r.url]
    return queues or ["local"]
