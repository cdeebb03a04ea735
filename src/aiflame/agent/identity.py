"""Whose work a process is: the labels every profile, trace and metric of it carries.

Read from the process itself, once per process (cached by PID, start time and name, since
PIDs are reused and an ``exec`` makes another program of the same process; a process caught
between fork and exec, with no command line yet, is read again next time):

============  ==============================================================================
label         source
============  ==============================================================================
host          the agent's host name (``--host`` / config ``host`` overrides it)
pid           the process id, as the host sees it (not a series label unless
              ``[labels] pid = true``: a series per process would not be bounded)
comm          ``/proc/PID/comm`` (the thread-group leader's name)
command       only with ``[labels] command = true``: ``/proc/PID/cmdline``, arguments
              joined by spaces, credentials redacted (:mod:`.redact`), cut at 1,024 bytes
user          the real uid of ``/proc/PID/status``, named by the host's ``/etc/passwd``
              (the container's ``/etc/passwd``, through ``/proc/PID/root``, where the host
              has no such uid), else the number
container_id  the cgroup path (:mod:`.cgroup_ids`): docker, containerd, CRI-O, podman
namespace,    Kubernetes, from the kubelet's ``/var/log/containers/<pod>_<namespace>_
pod,          <container>-<container id>.log`` links (every kubelet writes them); else
container     ``pod`` from the process's ``HOSTNAME`` and ``namespace`` from its service
              account (``/proc/PID/root/var/run/secrets/kubernetes.io/serviceaccount/
              namespace``)
pod_uid       the cgroup path
job_id,       Slurm: ``SLURM_JOB_ID``, ``SLURM_JOB_USER``, ``SLURM_JOB_NAME`` of the
job_user,     process's environment; the job id also from the cgroup path
job_name      (``slurmstepd.scope/job_N``), which needs no environment
rank,         ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` (torchrun), else ``SLURM_PROCID``,
local_rank,   ``SLURM_LOCALID``, ``SLURM_NTASKS``, else Open MPI's
world_size    ``OMPI_COMM_WORLD_RANK``/``_LOCAL_RANK``/``_SIZE``
team, model,  configurable (``[labels.env]``): by default ``team`` from ``AIFLAME_TEAM``
...           and ``model`` from ``AIFLAME_MODEL``; any other label from any variable;
              ``[labels.static]`` for labels of the whole host
service_name  the workload's name: the process's ``OTEL_SERVICE_NAME`` (OpenTelemetry's
              variable), else ``namespace/pod``'s owner where the pod name has a
              ReplicaSet/Job suffix stripped, else the pod, else the Slurm job name, else
              the command's name (``comm``)
============  ==============================================================================

The environment is read from ``/proc/PID/environ``: the variables the process started
with (a program that changes its own environment later is not seen). Every value is one
line (control characters become spaces).

Then the configuration decides what leaves the host (:mod:`.relabel`): the process filters
(``[processes]``), then the relabel rules, which also see ``__meta_process_commandline``
(the redacted command line) and ``__meta_process_exe`` (the executable's path) and drop
every ``__`` label after them. A process's *series* labels, what keys its continuous
profiles, are those labels without ``pid`` (unless ``[labels] pid = true``).
"""

from __future__ import annotations

import os
import pwd
import re
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiflame.agent.cgroup_ids import CgroupIdentity, cgroup_path, parse_cgroup_path
from aiflame.agent.redact import redact_command, single_line
from aiflame.agent.relabel import ProcessMatcher, RelabelRule, relabel, selected
from aiflame.collectors.procs import arguments, read_small

MAX_NAMES_REMEMBERED = 1024  # program names whose last series is kept for gone processes
MAX_LABEL_BYTES = 1024  # docs/fleet-protocol.md: label values are at most 1,024 bytes
DEFAULT_ENV_LABELS = {"team": "AIFLAME_TEAM", "model": "AIFLAME_MODEL"}
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Rank variables, in order of preference per label.
RANK_VARIABLES = {
    "rank": ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"),
    "local_rank": ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"),
    "world_size": ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
}
SLURM_VARIABLES = {
    "job_id": "SLURM_JOB_ID",
    "job_user": "SLURM_JOB_USER",
    "job_name": "SLURM_JOB_NAME",
}
# A Deployment's pod is <deployment>-<replicaset hash>-<5 chars>; a Job's <job>-<5 chars>;
# a StatefulSet's <name>-<ordinal> keeps its name (the ordinal is the rank, often).
_POD_SUFFIX = re.compile(r"-(?:[0-9a-f]{6,10}-)?[bcdfghjklmnpqrstvwxz2456789]{5}$")
ENVIRON_LIMIT = 1 << 20
KUBE_LOG_RESCAN_S = 5.0


def valid_label_name(name: str) -> bool:
    return bool(_LABEL_NAME.match(name))


def clip(value: str, limit: int = MAX_LABEL_BYTES) -> str:
    """``value`` cut to at most ``limit`` bytes of UTF-8 (on a character boundary)."""
    data = value.encode("utf-8", "replace")
    if len(data) <= limit:
        return value
    return data[:limit].decode("utf-8", "ignore")


@dataclass
class LabelRules:
    """What the configuration adds (labels from environment variables, pod labels and fixed
    labels of the host) and decides (what leaves the host: :mod:`.relabel`)."""

    env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ENV_LABELS))
    pod_labels: dict[str, str] = field(default_factory=dict)  # label -> pod label key
    static: dict[str, str] = field(default_factory=dict)
    pid: bool = False  # ``pid`` a series label: one series per process
    command: bool = False  # the (redacted) command line a label
    relabel: list[RelabelRule] = field(default_factory=list)
    include: list[ProcessMatcher] = field(default_factory=list)
    exclude: list[ProcessMatcher] = field(default_factory=list)


def read_text(path: str, limit: int = 1 << 16) -> str | None:
    data = read_small(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def parse_environ(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def read_environ(pid: int, proc: str = "/proc") -> dict[str, str]:
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            return parse_environ(f.read(ENVIRON_LIMIT))
    except OSError:
        return {}


def start_time(pid: int, proc: str = "/proc") -> int | None:
    found = stat_identity(pid, proc)
    return found[0] if found else None


class SeenNow(Protocol):
    """A process's start time, name (``comm``) and arguments, just read from ``/proc``."""

    @property
    def started(self) -> int: ...
    @property
    def comm(self) -> str: ...
    @property
    def argv(self) -> list[str]: ...


def stat_identity(pid: int, proc: str = "/proc") -> tuple[int, str] | None:
    """The process's start time (clock ticks after boot) and its name, from one read of
    ``/proc/PID/stat``: a PID reused has another start time, an ``exec`` another name."""
    text = read_text(f"{proc}/{pid}/stat", 4096)
    if not text:
        return None
    close = text.rfind(")")
    try:
        return int(text[close + 2 :].split()[19]), text[text.find("(") + 1 : close]
    except (IndexError, ValueError):
        return None


def command_line(pid: int, proc: str = "/proc") -> str:
    """The command line as it is, for this host only (it may carry credentials)."""
    return clip(" ".join(arguments(pid, proc)))


def real_uid(pid: int, proc: str = "/proc") -> int | None:
    text = read_text(f"{proc}/{pid}/status", 8192) or ""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


_HOST_USERS: dict[int, str | None] = {}  # uid -> the host's name of it (None: unknown)


def user_name(uid: int, root: str) -> str:
    """The host's name for ``uid``, else the one in ``root``'s ``/etc/passwd``, else the
    number."""
    if uid not in _HOST_USERS:  # once per uid: a lookup reads the host's passwd file
        try:
            _HOST_USERS[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _HOST_USERS[uid] = None
    name = _HOST_USERS[uid]
    if name is not None:
        return name
    text = read_text(os.path.join(root, "etc/passwd"), 1 << 20) or ""
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[2] == str(uid):
            return parts[0]
    return str(uid)


def service_name(labels: Mapping[str, str], env: Mapping[str, str] | None = None) -> str:
    """The workload's name (see the module docstring)."""
    if env and env.get("OTEL_SERVICE_NAME"):
        return env["OTEL_SERVICE_NAME"]
    pod = labels.get("pod", "")
    if pod:
        owner = _POD_SUFFIX.sub("", pod) or pod
        ns = labels.get("namespace", "")
        return f"{ns}/{owner}" if ns else owner
    if labels.get("job_name"):
        return labels["job_name"]
    return labels.get("comm", "") or "unknown"


@dataclass(frozen=True)
class KubeContainer:
    namespace: str
    pod: str
    container: str


class KubeLogIndex:
    """Container id -> (namespace, pod, container) from the kubelet's log links
    ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log`` (pod names cannot
    contain ``_``; container names cannot either)."""

    def __init__(self, directory: str = "/var/log/containers") -> None:
        self.directory = directory
        self._by_id: dict[str, KubeContainer] = {}
        self._scanned = 0.0

    def lookup(self, container_id: str) -> KubeContainer | None:
        found = self._by_id.get(container_id)
        if found is None and time.monotonic() - self._scanned > KUBE_LOG_RESCAN_S:
            self._scan()
            found = self._by_id.get(container_id)
        return found

    def _scan(self) -> None:
        self._scanned = time.monotonic()
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        index = {}
        for name in names:
            parsed = parse_kube_log_name(name)
            if parsed is not None:
                cid, ref = parsed
                index[cid] = ref
        self._by_id = index


def parse_kube_log_name(name: str) -> tuple[str, KubeContainer] | None:
    """(container id, its pod) of a ``/var/log/containers`` file name."""
    if not name.endswith(".log"):
        return None
    stem = name[: -len(".log")]
    head, dash, cid = stem.rpartition("-")
    if not dash or not re.fullmatch(r"[0-9a-f]{64}", cid):
        return None
    parts = head.split("_")
    if len(parts) != 3 or not all(parts):
        return None
    return cid, KubeContainer(namespace=parts[1], pod=parts[0], container=parts[2])


@dataclass
class ProcessInfo:
    """One process as the agent knows it."""

    pid: int
    started: int
    labels: dict[str, str]  # after the relabel rules: what may leave the host
    cgroup: CgroupIdentity
    environ: dict[str, str]
    name: str = ""  # comm when read: an exec since changes it
    # read while the process was between fork and exec (or exiting): no command line or
    # environment yet, so it is read again next time
    provisional: bool = False
    command: str = ""  # as it is: for this host only, never a label
    # what keys its continuous profiles: ``labels`` without ``pid`` (unless configured);
    # None when the filters or a keep/drop rule leave the process out
    series: dict[str, str] | None = None

    @property
    def service(self) -> str:
        return self.labels.get("service_name", "")


PodLabels = Callable[[str], Mapping[str, str]]  # pod UID -> its Kubernetes labels


class Identities:
    """Labels of processes, cached per process (see the module docstring)."""

    def __init__(
        self,
        host: str | None = None,
        rules: LabelRules | None = None,
        proc: str = "/proc",
        kube_logs: KubeLogIndex | None = None,
        pod_labels: PodLabels | None = None,
        max_cached: int = 65536,
    ) -> None:
        self.host = host or socket.gethostname()
        self.rules = rules or LabelRules()
        self.proc = proc
        self.kube_logs = kube_logs or KubeLogIndex()
        self.pod_labels = pod_labels
        self.max_cached = max_cached
        self._cache: dict[int, ProcessInfo] = {}
        # comm -> the series of the last process of that name read whole, when that series
        # says no more than the host and the user: a process of that name that exits before
        # it can be read is counted there, not in a series of its name alone (which would
        # double the series of every program run as short-lived processes). Processes in a
        # container, pod or job are not guessed at: their series need what only they say.
        self._series_by_name: OrderedDict[str, dict[str, str]] = OrderedDict()

    def of(self, pid: int, seen: SeenNow | None = None) -> ProcessInfo | None:
        """The process's identity (None when it is gone and was never seen); ``seen``: its
        start time, name and arguments as just read from ``/proc`` by another reader (the
        CPU sampler, at its first sample), not read again."""
        seen = seen if seen is not None and self.proc == "/proc" else None
        found = (seen.started, seen.comm) if seen is not None else stat_identity(pid, self.proc)
        cached = self._cache.get(pid)
        if cached is not None and (
            found is None or (not cached.provisional and (cached.started, cached.name) == found)
        ):
            return cached
        if found is None:
            return None
        info = self._read(pid, found[0], seen)
        info.name = found[1]
        if info.series is not None and not info.provisional and info.name:
            self._remember_series(info.name, info.series)
        if len(self._cache) >= self.max_cached:
            self.forget_exited()
        self._cache[pid] = info
        return info

    def labels(self, pid: int) -> dict[str, str]:
        """What this process's traces and GPU time carry (after the relabel rules)."""
        info = self.of(pid)
        if info is None:
            return {"host": self.host, "pid": str(pid), "service_name": "unknown"}
        return info.labels

    def workload_labels(self, pid: int) -> dict[str, str]:
        """:meth:`labels` of a process whose data may leave the host, {} for one the
        filters or a keep/drop rule leave out."""
        info = self.of(pid)
        if info is None:
            return self.labels(pid)
        return info.labels if info.series is not None else {}

    def gone_series(self, comm: str, kernel: bool = False) -> dict[str, str] | None:
        """The series of a process that exited before it could be read: its name (from
        its samples) is all there is. The series of the last process of that name that was
        read, when that one ran outside any container, pod or job; else its name's,
        relabeled like the others. ``kernel``: the series of the kernel's threads
        (``service_name=kernel``)."""
        if comm and not kernel and comm in self._series_by_name:
            self._series_by_name.move_to_end(comm)
            return dict(self._series_by_name[comm])
        labels = {"host": self.host, **self.rules.static, "service_name": comm or "unknown"}
        if comm and not kernel:
            labels["comm"] = single_line(comm)
        values = {**labels, "__meta_process_commandline": "", "__meta_process_exe": ""}
        if not selected(values, self.rules.include, self.rules.exclude):
            return None
        labels, kept = relabel(values, self.rules.relabel)
        return labels if kept else None

    def _remember_series(self, comm: str, series: dict[str, str]) -> None:
        host_level = {"host", "comm", "user", "service_name", *self.rules.static}
        if not set(series) <= host_level or series.get("service_name") != comm:
            self._series_by_name.pop(comm, None)  # a workload of its own: not a guess
            return
        self._series_by_name[comm] = series
        self._series_by_name.move_to_end(comm)
        while len(self._series_by_name) > MAX_NAMES_REMEMBERED:
            self._series_by_name.popitem(last=False)

    def forget_exited(self) -> None:
        for pid in [p for p in self._cache if start_time(p, self.proc) is None]:
            del self._cache[pid]

    def forget(self, pid: int) -> None:
        self._cache.pop(pid, None)

    def _read(self, pid: int, started: int, seen: SeenNow | None = None) -> ProcessInfo:
        base = f"{self.proc}/{pid}"
        labels: dict[str, str] = {"host": self.host, "pid": str(pid)}
        labels.update({k: v for k, v in self.rules.static.items()})
        comm = seen.comm if seen is not None else (read_text(f"{base}/comm", 256) or "").strip()
        if comm:
            labels["comm"] = comm
        argv = seen.argv if seen is not None else arguments(pid, self.proc)
        command = clip(" ".join(argv))
        rules = self.rules
        needs_command = rules.command or rules.include or rules.exclude or rules.relabel
        redacted = clip(redact_command(argv)) if needs_command else ""  # (~0.2 ms a process)
        if rules.command and redacted:
            labels["command"] = redacted
        uid = real_uid(pid, self.proc)
        if uid is not None:
            labels["user"] = user_name(uid, f"{base}/root")
        cg = parse_cgroup_path(cgroup_path(read_text(f"{base}/cgroup") or ""))
        env = read_environ(pid, self.proc)
        if cg.container_id:
            labels["container_id"] = cg.container_id
        if cg.pod_uid:
            labels["pod_uid"] = cg.pod_uid
            labels.update(self._kubernetes(pid, cg, env))
        for label, var in SLURM_VARIABLES.items():
            if env.get(var):
                labels[label] = env[var]
        if cg.slurm_job_id and "job_id" not in labels:
            labels["job_id"] = cg.slurm_job_id
        for label, names in RANK_VARIABLES.items():
            value = next((env[n] for n in names if env.get(n)), None)
            if value is not None:
                labels[label] = value
        for label, var in self.rules.env.items():
            if env.get(var):
                labels[label] = env[var]
        labels["service_name"] = service_name(labels, env)
        clean = {k: clip(single_line(v)) for k, v in labels.items() if valid_label_name(k)}
        clean = {k: v for k, v in clean.items() if v}
        info = ProcessInfo(pid, started, clean, cg, env, provisional=not command, command=command)
        self._decide(info, redacted, base)
        return info

    def _decide(self, info: ProcessInfo, redacted: str, base: str) -> None:
        """Apply the process filters and the relabel rules (:mod:`.relabel`)."""
        rules = self.rules
        if not (rules.include or rules.exclude or rules.relabel):
            info.series = _series(info.labels, rules.pid)
            return
        try:
            exe = os.readlink(f"{base}/exe")
        except OSError:
            exe = ""
        values = {**info.labels, "__meta_process_commandline": redacted,
                  "__meta_process_exe": exe}  # fmt: skip
        chosen = selected(values, rules.include, rules.exclude)
        labels, kept = relabel(values, rules.relabel)
        info.labels = {k: clip(single_line(v)) for k, v in labels.items() if valid_label_name(k)}
        info.series = _series(info.labels, rules.pid) if chosen and kept else None

    def _kubernetes(self, pid: int, cg: CgroupIdentity, env: dict[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        ref = self.kube_logs.lookup(cg.container_id) if cg.container_id else None
        if ref is not None:
            out.update(namespace=ref.namespace, pod=ref.pod, container=ref.container)
        else:
            sa = f"{self.proc}/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount/namespace"
            ns = (read_text(sa, 256) or "").strip()
            if ns:
                out["namespace"] = ns
            if env.get("HOSTNAME"):
                out["pod"] = env["HOSTNAME"]
        if self.pod_labels is not None and self.rules.pod_labels:
            kube = self.pod_labels(cg.pod_uid)
            for label, key in self.rules.pod_labels.items():
                if kube.get(key):
                    out[label] = kube[key]
        return out


def _series(labels: Mapping[str, str], with_pid: bool) -> dict[str, str]:
    return {k: v for k, v in labels.items() if with_pid or k != "pid"}


class KubeletPods:
    """Pod labels by pod UID, from the kubelet's ``/pods`` (``https://127.0.0.1:10250/pods``
    with the agent's service account token; RBAC: ``nodes/proxy`` get), re-read at most
    every ``refresh_s`` when a pod is not known. The kubelet's serving certificate is
    usually self-signed: without ``ca_file`` it is not verified (the connection stays on
    the node's loopback)."""

    def __init__(
        self, url: str, token: str = "", ca_file: str = "", refresh_s: float = 30.0
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.ca_file = ca_file
        self.refresh_s = refresh_s
        self._labels: dict[str, dict[str, str]] = {}
        self._read = -1e9
        self.error = ""

    def __call__(self, pod_uid: str) -> Mapping[str, str]:
        found = self._labels.get(pod_uid)
        if found is None and time.monotonic() - self._read >= self.refresh_s:
            self._fetch()
            found = self._labels.get(pod_uid)
        return found or {}

    def _fetch(self) -> None:
        import json
        import ssl
        import urllib.request

        self._read = time.monotonic()
        req = urllib.request.Request(self.url + "/pods")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        context = None
        if self.url.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_file or None)
            if not self.ca_file:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(req, timeout=5, context=context) as r:
                pods = json.load(r)
        except (OSError, ValueError) as e:
            self.error = f"kubelet {self.url}/pods: {e}"
            return
        out = {}
        for item in pods.get("items") or []:
            meta = item.get("metadata") or {}
            if meta.get("uid"):
                out[meta["uid"]] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        self._labels = out
        self.error = ""
