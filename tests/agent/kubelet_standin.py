"""A stand-in kubelet pod-resources endpoint: a real gRPC server (grpcio) on a Unix socket
serving ``/v1.PodResourcesLister/List``. Its answer is encoded here by hand, field by field
from the kubelet's ``api.proto``, so that the agent's decoding is checked against bytes it
did not produce itself. Unknown fields a newer kubelet sends (cpu_ids = 3, memory = 4 of
ContainerResources; topology = 3 of ContainerDevices) are in the answer too."""

from __future__ import annotations

from concurrent import futures


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited (wire type 2)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:  # varint (wire type 0)
    return _varint(number << 3) + _varint(value)


def list_response(pods: list[tuple[str, str, list[tuple[str, list[tuple[str, list[str]]]]]]]):
    """[(namespace, pod, [(container, [(resource, [device id...])])])] as the kubelet's
    ListPodResourcesResponse bytes."""
    out = b""
    for namespace, pod, containers in pods:
        body = _field(1, pod.encode()) + _field(2, namespace.encode())
        for cname, devices in containers:
            c = _field(1, cname.encode())
            for resource, ids in devices:
                d = _field(1, resource.encode())
                for i in ids:
                    d += _field(2, i.encode())
                d += _field(3, _field(1, _int_field(1, 0)))  # topology: NUMA node 0
                c += _field(2, d)
            c += _int_field(3, 4) + _int_field(3, 5)  # cpu_ids (unpacked), unknown to us
            body += _field(3, c)
        out += _field(1, body)
    return out


class KubeletStandIn:
    def __init__(self, socket_path: str, answer: bytes) -> None:
        import grpc

        self.answer = answer
        self.calls = 0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))

        def list_(request: bytes, context) -> bytes:
            self.calls += 1
            assert request == b""  # ListPodResourcesRequest has no fields
            return self.answer

        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    list_, request_deserializer=None, response_serializer=None
                )
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix://{socket_path}")

    def start(self) -> KubeletStandIn:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop(grace=None).wait(10)
