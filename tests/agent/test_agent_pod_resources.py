"""The kubelet's pod-resources API: which GPU each container holds, asked over gRPC on a
Unix socket of a stand-in kubelet (tests/agent/kubelet_standin.py) whose answer is encoded
by hand from the kubelet's api.proto."""

from __future__ import annotations

import shutil
import tempfile

import pytest

pytest.importorskip("grpc", reason="grpcio is not installed: pip install -e '.[fleet]'")

from kubelet_standin import KubeletStandIn, list_response

from aiflame.agent.pod_resources import GpuHolder, PodResources, parse_list_response

GPU_A = "GPU-8e0c4a1b-0000-4000-8000-000000000001"
GPU_B = "GPU-a100-0000-4000-8000-000000000002"
MIG = "MIG-5c9b2f0e-1a2b-5c3d-9e8f-0123456789ab"
PODS = [
    ("llm", "train-7b-0", [("trainer", [("nvidia.com/gpu", [GPU_A, GPU_B])]),
                           ("sidecar", [])]),
    ("ads", "ranker-5d8c9", [("server", [("nvidia.com/mig-1g.10gb", [MIG]),
                                         ("example.com/nic", ["0000:3b:00.1"])])]),
    ("kube-system", "coredns-1", [("coredns", [])]),
    ("dev", "notebook-x", [("lab", [("nvidia.com/gpu", ["GPU-shared-0::3"])])]),  # time-sliced
]  # fmt: skip


@pytest.fixture
def sock():
    d = tempfile.mkdtemp(prefix="kub", dir="/tmp")
    yield f"{d}/kubelet.sock"
    shutil.rmtree(d, ignore_errors=True)


def expected() -> dict[str, GpuHolder]:
    return {
        GPU_A: GpuHolder("llm", "train-7b-0", "trainer", "nvidia.com/gpu"),
        GPU_B: GpuHolder("llm", "train-7b-0", "trainer", "nvidia.com/gpu"),
        MIG: GpuHolder("ads", "ranker-5d8c9", "server", "nvidia.com/mig-1g.10gb"),
        "GPU-shared-0": GpuHolder("dev", "notebook-x", "lab", "nvidia.com/gpu"),
    }


def test_the_kubelets_answer_decoded():
    assert parse_list_response(list_response(PODS)) == expected()
    assert parse_list_response(b"") == {}


def test_gpu_holders_over_grpc(sock):
    kubelet = KubeletStandIn(sock, list_response(PODS)).start()
    pr = PodResources(sock, refresh_s=3600)
    try:
        assert pr.available()
        assert pr.holders() == expected()
        assert pr.holders() == expected() and kubelet.calls == 1  # cached until refresh_s
        pr._next = 0.0  # due: the kubelet is asked again
        kubelet.answer = list_response(PODS[1:3])
        assert set(pr.holders()) == {MIG} and kubelet.calls == 2
        assert pr.error == ""
    finally:
        pr.close()
        kubelet.stop()


def test_no_kubelet(sock):
    pr = PodResources(sock)
    assert not pr.available() and pr.holders() == {} and pr.error == ""
    # a socket nobody answers on: one line saying so, no assignment
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(sock)
    try:
        pr._next = 0.0
        assert pr.holders() == {}
        assert pr.error.startswith(f"kubelet pod-resources {sock}: ")
    finally:
        s.close()
        pr.close()
