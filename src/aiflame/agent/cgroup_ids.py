"""Who runs a process, read from its cgroup path: container runtime and id, Kubernetes pod
UID and QoS class, Slurm job.

Runtimes name their cgroups differently, and the same runtime differently under the
cgroupfs and systemd cgroup drivers::

    docker      /docker/<id>                          (cgroupfs)
                /system.slice/docker-<id>.scope       (systemd)
    kubernetes  /kubepods/<qos>/pod<uid>/<id>         (cgroupfs; containerd, docker)
                /kubepods/<qos>/pod<uid>/crio-<id>    (cgroupfs; CRI-O)
                /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
                    cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope
                /kubepods-<qos>-pod<uid_>.slice:cri-containerd:<id>   (older containerd)
    podman      /machine.slice/libpod-<id>.scope
    ECS         /ecs/<task>/<id>
    slurm       /system.slice/slurmstepd.scope/job_<n>/step_<s>/user/task_<t>   (v2)
                /slurm/uid_<u>/job_<n>/step_<s>/task_<t>                        (v1)

Guaranteed pods have no QoS level in the path (``kubepods-pod<uid>.slice``). CRI-O's
``crio-conmon-<id>`` is the container's monitor process, not the container: it is not
named as one. ``/proc/PID/cgroup`` has one line per hierarchy on cgroup v1 (``4:memory:
/docker/...``) and one ``0::/path`` line on v2; :func:`cgroup_path` picks the line that
names the most.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_HEX_ID = r"[0-9a-f]{64}"
# Each pattern names one runtime's container in a path segment.
_CONTAINER_SEGMENTS = (
    ("containerd", re.compile(rf"^cri-containerd-({_HEX_ID})\.scope$")),
    ("cri-o", re.compile(rf"^crio-({_HEX_ID})(?:\.scope)?$")),
    ("docker", re.compile(rf"^docker-({_HEX_ID})\.scope$")),
    ("podman", re.compile(rf"^libpod-({_HEX_ID})\.scope$")),
    ("containerd", re.compile(rf"^containerd-({_HEX_ID})\.scope$")),
)
_BARE_ID = re.compile(rf"^({_HEX_ID})$")
# kubepods-burstable-pod<uid>.slice (systemd: dashes of the UID become underscores)
_POD_SLICE = re.compile(r"^kubepods(?:-(besteffort|burstable))?-pod([0-9a-f_-]{32,36})\.slice")
_POD_DIR = re.compile(r"^pod([0-9a-f-]{36})$")
_QOS_DIR = re.compile(r"^(besteffort|burstable)$")
# kubepods-burstable-pod<uid>.slice:cri-containerd:<id> (a systemd cgroup parent as written)
_SYSTEMD_TRIPLE = re.compile(
    rf"kubepods(?:-(besteffort|burstable))?-pod([0-9a-f_-]{{32,36}})\.slice:"
    rf"(cri-containerd|crio|docker):({_HEX_ID})"
)
_SLURM_JOB = re.compile(r"/job_(\d+)(?:/|$)")
_SLURM_UID = re.compile(r"/slurm/uid_(\d+)/")
_RUNTIME_OF_TRIPLE = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a cgroup path tells of its processes (empty strings: not known)."""

    path: str
    runtime: str = ""  # containerd, cri-o, docker, podman
    container_id: str = ""  # the runtime's 64-hex-digit id
    pod_uid: str = ""  # Kubernetes pod UID, with dashes
    qos: str = ""  # guaranteed, burstable, besteffort (Kubernetes pods only)
    slurm_job_id: str = ""
    slurm_uid: str = ""

    @property
    def in_kubernetes(self) -> bool:
        return bool(self.pod_uid)


def _uid(raw: str) -> str:
    """A pod UID as Kubernetes writes it (the systemd driver turns its dashes into _)."""
    return raw.replace("_", "-")


@functools.lru_cache(maxsize=4096)  # most processes share their cgroup with others
def parse_cgroup_path(path: str) -> CgroupIdentity:
    """The identity a cgroup path names (see the module docstring)."""
    runtime = container = pod = qos = ""
    triple = _SYSTEMD_TRIPLE.search(path)
    if triple:
        qos = triple.group(1) or "guaranteed"
        pod = _uid(triple.group(2))
        runtime = _RUNTIME_OF_TRIPLE[triple.group(3)]
        container = triple.group(4)
    segments = [s for s in path.split("/") if s]
    kube = any(s == "kubepods" or s.startswith("kubepods") for s in segments)
    for i, seg in enumerate(segments):
        m = _POD_SLICE.match(seg)
        if m:
            qos, pod = m.group(1) or "guaranteed", _uid(m.group(2))
            continue
        m = _POD_DIR.match(seg)
        if m and kube:
            pod = m.group(1)
            prev = segments[i - 1] if i else ""
            qos = prev if _QOS_DIR.match(prev) else "guaranteed"
            continue
        if container:
            continue
        for name, pattern in _CONTAINER_SEGMENTS:
            m = pattern.match(seg)
            if m:
                runtime, container = name, m.group(1)
                break
        else:
            m = _BARE_ID.match(seg)
            if m:  # cgroupfs driver: docker's /docker/<id>, kubelet's pod<uid>/<id>
                parent = segments[i - 1] if i else ""
                if parent == "docker":
                    runtime, container = "docker", m.group(1)
                elif segments[0] == "ecs":
                    runtime, container = "ecs", m.group(1)
                elif pod:
                    container = m.group(1)  # containerd or docker: the path does not say
    job = _SLURM_JOB.search(path) if "slurm" in path else None
    uid = _SLURM_UID.search(path)
    return CgroupIdentity(
        path=path,
        runtime=runtime,
        container_id=container,
        pod_uid=pod,
        qos=qos if pod else "",
        slurm_job_id=job.group(1) if job else "",
        slurm_uid=uid.group(1) if uid else "",
    )


@functools.lru_cache(maxsize=1024)
def cgroup_path(text: str) -> str:
    """The path to read identity from, out of a ``/proc/PID/cgroup`` file's text: the v2
    line (``0::``) where it names a container, pod or job, else the v1 line that names
    the most (the ``name=systemd`` or ``memory`` hierarchy usually)."""
    best, best_score = "", -1
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].strip()
        ident = parse_cgroup_path(path)
        score = 4 * bool(ident.container_id) + 2 * bool(ident.pod_uid)
        score += 2 * bool(ident.slurm_job_id) + (parts[0] == "0")
        if score > best_score:
            best, best_score = path, score
    return best
