"""Which GPUs each pod holds: the kubelet's pod-resources API (``v1.PodResourcesLister``).

The kubelet serves it over gRPC on a Unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``; Kubernetes 1.15+, GA in 1.28). ``List``
answers, for every running pod, the devices each container was given by a device plugin:
for NVIDIA's plugin the resource ``nvidia.com/gpu`` (or a MIG profile such as
``nvidia.com/mig-1g.10gb``) and the GPU's UUID as device id, the UUID NVML reports
(``<UUID>::<n>`` for the replicas of a time-sliced GPU: the pod named last holds it here). This is
how dcgm-exporter labels a GPU with the pod that holds it, whether or not the pod runs
anything on it at the moment.

The messages are declared here from the kubelet's ``api.proto`` (package ``v1``; only the
fields read: ``ListPodResourcesResponse.pod_resources = 1``, ``PodResources.name = 1``,
``namespace = 2``, ``containers = 3``, ``ContainerResources.name = 1``, ``devices = 2``,
``ContainerDevices.resource_name = 1``, ``device_ids = 2``) and built at import with
protobuf's descriptor pool, so no generated module is shipped for five messages. Unknown
fields of newer kubelets (CPU ids, memory, dynamic resources) are skipped by protobuf.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
# resources whose device ids are NVIDIA GPU (or MIG instance) UUIDs
GPU_RESOURCE_PREFIX = "nvidia.com/"
REFRESH_S = 10.0  # pods come and go; the kubelet answers from memory
TIMEOUT_S = 2.0


def _messages() -> tuple[Any, Any]:
    f = descriptor_pb2.FileDescriptorProto(
        name="aiflame/agent/kubelet_podresources_v1.proto", package="v1", syntax="proto3"
    )
    T = descriptor_pb2.FieldDescriptorProto

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = f.message_type.add(name=name)
        for fname, number, type_, label, type_name in fields:
            field = m.field.add(name=fname, number=number, type=type_, label=label)
            if type_name:
                field.type_name = type_name

    opt, rep = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    message("ListPodResourcesRequest")
    message("ContainerDevices", ("resource_name", 1, T.TYPE_STRING, opt, ""),
            ("device_ids", 2, T.TYPE_STRING, rep, ""))  # fmt: skip
    message("ContainerResources", ("name", 1, T.TYPE_STRING, opt, ""),
            ("devices", 2, T.TYPE_MESSAGE, rep, ".v1.ContainerDevices"))  # fmt: skip
    message("PodResources", ("name", 1, T.TYPE_STRING, opt, ""),
            ("namespace", 2, T.TYPE_STRING, opt, ""),
            ("containers", 3, T.TYPE_MESSAGE, rep, ".v1.ContainerResources"))  # fmt: skip
    message("ListPodResourcesResponse",
            ("pod_resources", 1, T.TYPE_MESSAGE, rep, ".v1.PodResources"))  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = message_factory.GetMessageClass
    return (
        get(pool.FindMessageTypeByName("v1.ListPodResourcesRequest")),
        get(pool.FindMessageTypeByName("v1.ListPodResourcesResponse")),
    )


ListPodResourcesRequest, ListPodResourcesResponse = _messages()


@dataclass(frozen=True)
class GpuHolder:
    """The container a GPU (by UUID) is assigned to."""

    namespace: str
    pod: str
    container: str
    resource: str  # nvidia.com/gpu, nvidia.com/mig-...


def parse_list_response(data: bytes) -> dict[str, GpuHolder]:
    """GPU UUID -> its holder, from a serialized ``ListPodResourcesResponse``."""
    resp = ListPodResourcesResponse.FromString(data)
    out: dict[str, GpuHolder] = {}
    for pod in resp.pod_resources:
        for c in pod.containers:
            for dev in c.devices:
                if not dev.resource_name.startswith(GPU_RESOURCE_PREFIX):
                    continue
                for device_id in dev.device_ids:
                    # time-slicing replicas of one GPU are "<UUID>::<n>"
                    uuid = device_id.split("::", 1)[0]
                    out[uuid] = GpuHolder(pod.namespace, pod.name, c.name, dev.resource_name)
    return out


class PodResources:
    """The kubelet's GPU assignments, asked at most every ``refresh_s`` (from the telemetry
    thread); nothing when its socket does not exist (not a Kubernetes node, or the
    directory not mounted). ``error`` says why the last call failed, once."""

    def __init__(self, socket_path: str = SOCKET, refresh_s: float = REFRESH_S) -> None:
        self.socket_path = socket_path
        self.refresh_s = refresh_s
        self.error = ""
        self._holders: dict[str, GpuHolder] = {}
        self._next = 0.0
        self._channel: Any = None
        self._call: Callable[..., bytes] | None = None
        self._lock = threading.Lock()

    def available(self) -> bool:
        return os.path.exists(self.socket_path)

    def holders(self) -> dict[str, GpuHolder]:
        now = time.monotonic()
        with self._lock:
            if now >= self._next:
                self._next = now + self.refresh_s
                self._holders = self._list()
            return self._holders

    def _list(self) -> dict[str, GpuHolder]:
        if not self.available():
            return {}
        try:
            import grpc  # the [fleet] extra
        except ImportError:
            self.error = "grpcio is not installed (pip install 'aiflame[fleet]')"
            return {}
        try:
            if self._call is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
                self._call = self._channel.unary_unary(
                    LIST_METHOD,
                    request_serializer=ListPodResourcesRequest.SerializeToString,
                    response_deserializer=lambda b: b,
                )
            data = self._call(ListPodResourcesRequest(), timeout=TIMEOUT_S)
            found = parse_list_response(data)
        except Exception as e:  # grpc.RpcError, a malformed answer: no assignment known
            self.error = f"kubelet pod-resources {self.socket_path}: {_short(e)}"
            return self._holders
        self.error = ""
        return found

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._call = None


def _short(e: Exception) -> str:
    details = getattr(e, "details", None)
    if callable(details):
        text = details()
        if text:
            return str(text)
    return str(e).splitlines()[0] if str(e) else type(e).__name__
