"""The agent's OTLP output: profiles from the spool to an OpenTelemetry collector over
OTLP/HTTP, decoded here by the ``opentelemetry-proto`` package's own classes; the headers
given for auth, the labels as resource attributes by the semantic conventions, frame kinds
as ``profile.frame.type`` (GPU frames as ``cuda``), totals equal to the pprof's, and the same
profile ids on every retry (so a receiver stores an export once)."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip(
    "opentelemetry.proto", reason="OTLP needs the fleet extra: pip install -e '.[fleet]'"
)

from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as svc,
)

from aiflame.agent.config import AgentConfig, load_file, validate
from aiflame.agent.push import Destination, Sender, otlp_endpoint
from aiflame.agent.spool import Spool
from aiflame.model import FrameKind, ProfileBuilder, SampleType
from aiflame.render.pprof import render_pprof


class Collector:
    """A stand-in OpenTelemetry collector's OTLP/HTTP receiver on loopback."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], svc.ExportProfilesServiceRequest]] = []
        self.answers: list[int] = []  # statuses to answer with first (then 200)
        self.reject_profiles = 0

    def __enter__(self) -> Collector:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                if headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                req = svc.ExportProfilesServiceRequest.FromString(body)
                owner.requests.append((self.path, headers, req))
                status = owner.answers.pop(0) if owner.answers else 200
                answer = svc.ExportProfilesServiceResponse()
                if owner.reject_profiles:
                    answer.partial_success.rejected_profiles = owner.reject_profiles
                    answer.partial_success.error_message = "too old"
                data = answer.SerializeToString() if status == 200 else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


FRAMES = [
    ("<module> (train.py:1)", FrameKind.PYTHON, "train.py", 1, ""),
    ("Linear > forward (torch/nn/modules/linear.py:125)", FrameKind.PYTHON, "linear.py", 125, ""),
    ("at::native::addmm_out_cpu(at::Tensor const&)", FrameKind.CPP, "", 0, "libtorch_cpu.so"),
    ("cudaLaunchKernel", FrameKind.RUNTIME, "", 0, "libcudart.so.12"),
    ("-", FrameKind.DELIMITER, "", 0, ""),
    ("ampere_sgemm_128x64_nn", FrameKind.GPU_KERNEL, "", 0, ""),
    ("do_syscall_64", FrameKind.KERNEL, "", 0, "[kernel.kallsyms]"),
    ("memcpy", FrameKind.NATIVE, "", 0, "libc.so.6"),
]


def pprof(scale: int) -> tuple[bytes, list[int]]:
    """A profile of two sample types with frames of every kind; and its totals."""
    b = ProfileBuilder([SampleType("samples", "count"), SampleType("cpu", "nanoseconds")])
    ids = [b.frame(name, kind, file, line, module) for name, kind, file, line, module in FRAMES]
    stacks = [ids[:6], [*ids[:3], ids[7]], [ids[0], ids[6]]]
    totals = [0, 0]
    for i, frames in enumerate(stacks):
        n = (i + 1) * scale
        b.add(b.stack(frames), [float(n), n * 5e7])
        totals[0] += n
        totals[1] += n * 50_000_000
    p = b.build()
    p.meta.update(
        time_nanos=1_765_000_000_000_000_000,
        duration_nanos=10_000_000_000,
        period=50_000_000,
        period_type=["cpu", "nanoseconds"],
    )
    return render_pprof(p), totals


LABELS = {
    "host": "gpu-node-17",
    "pid": "4121",
    "service_name": "llm/train-7b",
    "namespace": "llm",
    "pod": "train-7b-0",
    "container": "trainer",
    "job_id": "8812",
    "rank": "0",
}


def meta(samples: int) -> dict[str, object]:
    return {
        "kind": "profile",
        "profile_type": "process_cpu",
        "labels": LABELS,
        "samples": samples,
        "start": 1765000000.0,
        "duration": 10.0,
        "rate_hz": 20,
    }


def test_the_endpoint_of_a_base_url():
    assert otlp_endpoint("http://c:4318") == "http://c:4318/v1development/profiles"
    assert otlp_endpoint("http://c:4318/") == "http://c:4318/v1development/profiles"
    assert otlp_endpoint("https://otlp.example/otlp/v1development/profiles").endswith(
        "/otlp/v1development/profiles"
    )


def test_profiles_go_to_a_collector_decoded_by_the_otlp_package(tmp_path):
    spool = Spool(str(tmp_path), ["otlp"])
    sent = []
    for scale in (1, 3):
        raw, totals = pprof(scale)
        sent.append((spool.put("pb.gz", raw, meta(totals[0])).id, totals))
    with Collector() as collector:
        dest = Destination(
            "otlp",
            otlp_endpoint(collector.url),
            kinds=frozenset({"profile"}),
            api="otlp",
            tenant="team-a",
            extra_headers={"Authorization": "Bearer otlp-secret", "X-Extra": "1"},
        )
        sender = Sender(spool, dest, threading.Event())
        collector.answers = [503]  # the first try fails: the same request is sent again
        assert sender.send_some() is False
        assert sender.send_some() is True
    assert not spool.pending("otlp")
    assert sender.stats.pushed == {"profile": 2}
    (path1, _, first), (path, headers, req) = collector.requests
    assert path == path1 == "/v1development/profiles"
    assert headers["authorization"] == "Bearer otlp-secret" and headers["x-extra"] == "1"
    assert headers["x-scope-orgid"] == "team-a"
    assert headers["content-type"] == "application/x-protobuf"
    assert first == req  # a retry is the same export: the same profile ids
    d = req.dictionary
    S = d.string_table
    assert S[0] == "" and len(d.location_table[0].lines) == 0  # zero values first
    assert len(req.resource_profiles) == 2
    ids = set()
    for rp, (_, totals) in zip(req.resource_profiles, sent, strict=True):
        attrs = {kv.key: kv.value for kv in rp.resource.attributes}
        assert attrs["service.name"].string_value == "llm/train-7b"
        assert attrs["host.name"].string_value == "gpu-node-17"
        assert attrs["process.pid"].int_value == 4121
        assert attrs["k8s.namespace.name"].string_value == "llm"
        assert attrs["k8s.pod.name"].string_value == "train-7b-0"
        assert attrs["k8s.container.name"].string_value == "trainer"
        assert attrs["job_id"].string_value == "8812"
        (sp,) = rp.scope_profiles
        assert sp.scope.name == "aiflame-agent"
        types = [
            (S[p.sample_type.type_strindex], S[p.sample_type.unit_strindex]) for p in sp.profiles
        ]
        assert types == [("samples", "count"), ("cpu", "nanoseconds")]
        for p, total in zip(sp.profiles, totals, strict=True):
            assert sum(sum(s.values) for s in p.samples) == total
            assert (S[p.period_type.type_strindex], p.period) == ("cpu", 50_000_000)
            assert p.time_unix_nano == 1_765_000_000_000_000_000
            assert len(p.profile_id) == 16
            ids.add(p.profile_id)
    assert len(ids) == 4  # one per entry and sample type
    # every frame's type by the semantic conventions, and its exact kind in system_name
    types = {}
    for loc in d.location_table[1:]:
        fn = d.function_table[loc.lines[0].function_index]
        (a,) = [d.attribute_table[i] for i in loc.attribute_indices] or [None]
        types[S[fn.name_strindex]] = (
            a and (S[a.key_strindex], a.value.string_value),
            S[fn.system_name_strindex],
        )
    ft = "profile.frame.type"
    assert types["<module> (train.py:1)"][0] == (ft, "cpython")
    assert types["ampere_sgemm_128x64_nn"] == (
        (ft, "cuda"),
        "ampere_sgemm_128x64_nn [aiflame:gpu-kernel]",
    )
    assert types["cudaLaunchKernel"][0] == (ft, "native")
    assert types["do_syscall_64"][0] == (ft, "kernel")
    assert types["-"][0] is None  # the delimiter has no frame type of the conventions

    # stacks are leaf first
    def leaf(stack_index: int) -> str:
        loc = d.location_table[d.stack_table[stack_index].location_indices[0]]
        return S[d.function_table[loc.lines[0].function_index].name_strindex]

    samples = [s for rp in req.resource_profiles for s in rp.scope_profiles[0].profiles[0].samples]
    leafs = {leaf(s.stack_index) for s in samples}
    assert leafs == {"ampere_sgemm_128x64_nn", "memcpy", "do_syscall_64"}


def test_a_partial_success_is_counted_and_the_entries_are_done(tmp_path):
    spool = Spool(str(tmp_path), ["otlp"])
    raw, totals = pprof(2)
    spool.put("pb.gz", raw, meta(totals[0]))
    with Collector() as collector:
        collector.reject_profiles = 1
        dest = Destination("otlp", otlp_endpoint(collector.url), api="otlp")
        sender = Sender(spool, dest, threading.Event())
        assert sender.send_some() is True
    assert not spool.pending("otlp")
    assert sender.stats.failures == {"partial": 1}
    assert "too old" in sender.stats.last_error


def test_a_corrupt_spooled_profile_is_dropped_not_retried(tmp_path):
    spool = Spool(str(tmp_path), ["otlp"])
    spool.put("pb.gz", b"\x1f\x8b not gzip", meta(1))
    with Collector() as collector:
        sender = Sender(spool, Destination("otlp", collector.url, api="otlp"), threading.Event())
        assert sender.send_some() is True
        assert collector.requests == []
    assert not spool.pending("otlp") and spool.stats.dropped_entries == 1


def test_the_otlp_configuration(tmp_path):
    f = tmp_path / "agent.toml"
    f.write_text(
        '[otlp]\nurl = "http://collector:4318"\n'
        'headers = { Authorization = "Bearer x", "X-Tenant" = "a" }\n'
    )
    c = validate(load_file(str(f)))
    assert c.otlp.url == "http://collector:4318" and c.otlp.headers["X-Tenant"] == "a"
    bad = AgentConfig()
    bad.otlp.url = "http://c:4318"
    bad.otlp.headers = {"Bad Header": "x"}
    with pytest.raises(Exception, match="not a valid HTTP header"):
        validate(bad)
    bad.otlp.headers = {"X": "a\nb"}
    with pytest.raises(Exception, match="not a valid HTTP header"):
        validate(bad)
