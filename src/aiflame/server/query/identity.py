"""Which workload a trace (or a profile) is of: the most specific identity its labels give.

In order (docs/fleet-protocol.md, "Workload labels"):

1. ``job_id``: a batch job (Slurm), every rank on every host;
2. ``namespace``/``pod``: a Kubernetes pod (which has no job id);
3. ``service_name``, where it names a service rather than the command (labels mapped by the
   agent's configuration, a Pyroscope SDK's application name);
4. the process's own workload on its host: every label the agent gives a workload (all
   but the per-process ones: pid, command, rank...), so an idle notebook is not mixed up
   with another user's Python on another host.

A telemetry workload (the agents' GPU-hour accounting) belongs to an identity when it
carries every label of the identity's ``match``.
"""

from __future__ import annotations

from dataclasses import dataclass

# Labels of one process that do not make a workload (docs/fleet-protocol.md): a telemetry
# workload is the processes that share all their other labels.
PROCESS_ONLY = frozenset(
    {"pid", "comm", "command", "rank", "local_rank", "world_size", "container_id", "pod_uid"}
)
SERVER_ADDED = frozenset({"gpu_model"})  # added by the server to telemetry workloads
UNNAMED_SERVICES = frozenset({"", "unknown", "unknown_service", "kernel"})


@dataclass(frozen=True)
class Identity:
    basis: str  # "job_id", "pod", "service_name" or "process"
    key: str  # what the workload is called on the pages
    match: tuple[tuple[str, str], ...]  # the labels a telemetry workload of it carries

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a telemetry workload with these labels is of this identity (a pod's
        namespace is compared where the workload has one)."""
        return all(
            labels.get(k) == v
            for k, v in self.match
            if not (self.basis == "pod" and k == "namespace" and k not in labels)
        )

    @property
    def link(self) -> tuple[str, str] | None:
        """(label, value) that names it on the Workload page, where one label does."""
        if self.basis == "job_id":
            return "job_id", self.key
        if self.basis == "pod":
            return "pod", dict(self.match)["pod"]
        if self.basis == "service_name":
            return "service_name", self.key
        return None


def identity(labels: dict[str, str]) -> Identity:
    get = lambda k: (labels.get(k) or "").strip()  # noqa: E731 (absent and empty alike)
    if get("job_id"):
        return Identity("job_id", get("job_id"), (("job_id", get("job_id")),))
    if get("pod"):
        ns, pod = get("namespace"), get("pod")
        match = (("namespace", ns), ("pod", pod)) if ns else (("pod", pod),)
        return Identity("pod", f"{ns}/{pod}" if ns else pod, match)
    service = get("service_name")
    if service not in UNNAMED_SERVICES and service != get("comm"):
        return Identity("service_name", service, (("service_name", service),))
    own = tuple(
        sorted(
            (k, v)
            for k, v in labels.items()
            if k not in PROCESS_ONLY and k not in SERVER_ADDED and v
        )
    )
    name = service if service not in UNNAMED_SERVICES else get("comm") or get("user") or "?"
    host = get("host")
    return Identity("process", f"{host}/{name}" if host else name, own)


BASIS_TEXT = {
    "job_id": "the job's",
    "pod": "the pod's",
    "service_name": "the service's",
    "process": "the process's workload's (its host and labels)",
}
