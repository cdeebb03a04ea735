"""OpenTelemetry profiles into ``aiflame server``: exports built with the
``opentelemetry-proto`` package's own generated messages, in the OpenTelemetry eBPF
profiler's shape (otlp_payloads.py), sent over OTLP/HTTP (protobuf and JSON) and OTLP/gRPC
(the package's own ``ProfilesServiceStub`` on grpcio), read back through the querier API
with the totals sent; stored exactly once however often an export is retried; frame types
as aiflame's kinds; labels by the semantic conventions; errors as OTLP says."""

from __future__ import annotations

import gzip
import shutil
import ssl
import subprocess
import time

import pytest

pytest.importorskip(
    "opentelemetry.proto", reason="OTLP needs the fleet extra: pip install -e '.[fleet]'"
)
pytest.importorskip(
    "google.rpc", reason="OTLP's errors need the fleet extra (googleapis-common-protos)"
)
grpc = pytest.importorskip("grpc", reason="OTLP/gRPC needs the fleet extra (grpcio)")

import otlp_payloads as op  # noqa: E402
from google.rpc import status_pb2  # noqa: E402
from opentelemetry.proto.collector.profiles.v1development import (  # noqa: E402
    profiles_service_pb2 as svc,
)
from opentelemetry.proto.collector.profiles.v1development import (  # noqa: E402
    profiles_service_pb2_grpc as svc_grpc,
)
from serverproc import ServerProcess, free_port  # noqa: E402
from srvclient import Client  # noqa: E402

from aiflame.model import FrameKind  # noqa: E402
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q  # noqa: E402
from aiflame.proto.pyroscope.types.v1 import types_pb2 as t  # noqa: E402
from aiflame.sources.inputs import Input  # noqa: E402
from aiflame.sources.pprof import importer as pprof_source  # noqa: E402

SAMPLES = "process_cpu:samples:count:cpu:nanoseconds"
CPU_NS = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
PATH = "/v1development/profiles"
TOKEN = "otlp-ingest-token-0123456789"
ADMIN = "otlp-admin-token-0123456789ab"


@pytest.fixture(scope="module")
def otlp_server(tmp_path_factory):
    """A server with OTLP/gRPC on and tokens (so the tests see auth as collectors do)."""
    root = tmp_path_factory.mktemp("otlp")
    tokens = root / "tokens"
    tokens.write_text(f"{TOKEN} ingest\n{ADMIN} admin\n")
    grpc_port = free_port()
    s = ServerProcess(
        root / "data",
        args=["--token-file", str(tokens), "--otlp-grpc-listen", f"127.0.0.1:{grpc_port}"],
    ).start()
    s.grpc_port = grpc_port
    yield s
    s.stop()


def client(server, tenant: str, token: str = TOKEN) -> Client:
    return Client(server.url, token=token, tenant=tenant, admin_token=ADMIN)


def totals(c: Client, selector: str, now_ms: int, token: str | None = ADMIN) -> dict[str, int]:
    """The querier's totals of both CPU types (read with a token of the read scope)."""
    reader = Client(f"http://{c.host}:{c.port}", token=token, tenant=c.tenant)
    out = {}
    for type_id in (SAMPLES, CPU_NS):
        req = q.SelectMergeStacktracesRequest(
            profile_typeID=type_id,
            label_selector=selector,
            start=now_ms - 600_000,
            end=now_ms + 60_000,
        )
        answer = reader.connect("SelectMergeStacktraces", req, q.SelectMergeStacktracesResponse)
        out[type_id] = int(answer.flamegraph.total)
    return out


def post(c: Client, body: bytes, ctype: str = "application/x-protobuf", **headers):
    return c.post(PATH, body, ctype, headers=headers)


def now_ns() -> int:
    return time.time_ns() - 5_000_000_000


def test_http_protobuf_and_gzip_read_back_with_equal_totals(otlp_server):
    c = client(otlp_server, "otlp-http")
    t0 = now_ns()
    req = op.export([op.Process(4121), op.Process(4122)], t0)
    events = op.total_events(req)
    assert events == 892
    status, body = post(c, req.SerializeToString())
    assert status == 200, body
    answer = svc.ExportProfilesServiceResponse.FromString(body)
    assert not answer.HasField("partial_success") or answer.partial_success.rejected_profiles == 0
    # the same profiles of a later period, gzipped as the collector sends them
    req2 = op.export([op.Process(4121), op.Process(4122)], t0 + 10**10, seed=1)
    status, body = post(c, gzip.compress(req2.SerializeToString()), **{"Content-Encoding": "gzip"})
    assert status == 200, body
    c.settle()
    got = totals(c, '{service_name="python3.11"}', t0 // 10**6)
    assert got[SAMPLES] == 2 * events
    assert got[CPU_NS] == 2 * events * op.PERIOD


def test_http_json(otlp_server):
    c = client(otlp_server, "otlp-json")
    t0 = now_ns()
    req = op.export([op.Process(77, service="trainer")], t0)
    status, body = post(c, op.otlp_json(req), "application/json")
    assert status == 200, body
    c.settle()
    got = totals(c, '{service_name="trainer"}', t0 // 10**6)
    assert got[SAMPLES] == op.total_events(req)
    # the JSON's hex profile id is the protobuf's: the same profile sent as protobuf is a retry
    assert post(c, req.SerializeToString())[0] == 200
    c.settle()
    assert totals(c, '{service_name="trainer"}', t0 // 10**6) == got


def test_grpc_export_with_the_packages_stub(otlp_server):
    tenant = "otlp-grpc"
    t0 = now_ns()
    req = op.export([op.Process(900), op.Process(901), op.Process(902)], t0)
    with grpc.insecure_channel(f"127.0.0.1:{otlp_server.grpc_port}") as channel:
        stub = svc_grpc.ProfilesServiceStub(channel)
        md = (("authorization", f"Bearer {TOKEN}"), ("x-scope-orgid", tenant))
        answer = stub.Export(req, metadata=md, timeout=30, compression=grpc.Compression.Gzip)
        assert answer.partial_success.rejected_profiles == 0
        # retried (the collector's exporter retries on a lost answer): stored once
        stub.Export(req, metadata=md, timeout=30)
        with pytest.raises(grpc.RpcError) as e:
            stub.Export(req, metadata=(("x-scope-orgid", tenant),), timeout=30)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        broken = svc.ExportProfilesServiceRequest()
        broken.CopyFrom(req)
        broken.dictionary.location_table[1].mapping_index = 10**6
        with pytest.raises(grpc.RpcError) as e:
            stub.Export(broken, metadata=md, timeout=30)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "mapping" in e.value.details()
    c = client(otlp_server, tenant)
    c.settle()
    got = totals(c, '{service_name="python3.11"}', t0 // 10**6)
    assert got[SAMPLES] == op.total_events(req)


@pytest.mark.parametrize("with_ids", [True, False], ids=["profile_id", "no_profile_id"])
def test_exactly_once_on_retries(otlp_server, with_ids):
    """Every retry of an export (before and after its commit, re-batched by a collector
    with the dictionary renumbered) is stored once; other senders' equal content is not
    taken for a retry."""
    c = client(otlp_server, f"otlp-once-{with_ids}")
    t0 = now_ns()
    procs = [op.Process(10), op.Process(11)]
    req = op.export(procs, t0, profile_ids=with_ids)
    body = req.SerializeToString()
    events = op.total_events(req)
    for _ in range(3):  # retried at once, before any commit
        assert post(c, body)[0] == 200
    c.settle()
    assert post(c, body)[0] == 200  # retried after the commit
    # a collector re-batching: each process alone, dictionary built anew
    for i in range(len(procs)):
        assert post(c, _one_resource(req, i).SerializeToString())[0] == 200
    c.settle()
    got = totals(c, '{service_name="python3.11"}', t0 // 10**6)
    assert got[SAMPLES] == events
    # two other hosts with exactly the same samples: different senders, stored as theirs
    others = op.export(
        [op.Process(10, extra=(("host.name", "b"),)), op.Process(11, extra=(("host.name", "b"),))],
        t0,
        profile_ids=False,
    )
    assert post(c, others.SerializeToString())[0] == 200
    c.settle()
    assert totals(c, '{service_name="python3.11"}', t0 // 10**6)[SAMPLES] == 2 * events


def _one_resource(
    req: svc.ExportProfilesServiceRequest, i: int
) -> svc.ExportProfilesServiceRequest:
    """One resource of ``req`` as a request of its own, its dictionary compacted and
    renumbered (what a collector that splits a batch sends)."""
    d = req.dictionary
    b = op.Builder()
    rp = req.resource_profiles[i]
    out_rp = b.req.resource_profiles.add()
    out_rp.CopyFrom(rp)

    def fn(index: int) -> int:
        f = d.function_table[index]
        return b.function(d.string_table[f.name_strindex], d.string_table[f.filename_strindex])

    def loc(index: int) -> int:
        lo = d.location_table[index]
        ftype = next(
            d.attribute_table[a].value.string_value
            for a in lo.attribute_indices
            if d.string_table[d.attribute_table[a].key_strindex] == "profile.frame.type"
        )
        module = d.string_table[d.mapping_table[lo.mapping_index].filename_strindex]
        line = lo.lines[0] if lo.lines else None
        return b.location(
            ftype,
            "" if module == "[unknown]" else module,
            lo.address,
            fn(line.function_index) if line else None,
            line.line if line else 0,
        )

    def attr(index: int) -> int:
        a = d.attribute_table[index]
        v = a.value
        value = v.int_value if v.WhichOneof("value") == "int_value" else v.string_value
        return b.attribute(d.string_table[a.key_strindex], value)

    for sp_in, sp_out in zip(rp.scope_profiles, out_rp.scope_profiles, strict=True):
        for p_in, p_out in zip(sp_in.profiles, sp_out.profiles, strict=True):
            for name in ("sample_type", "period_type"):
                vt_in, vt_out = getattr(p_in, name), getattr(p_out, name)
                vt_out.type_strindex = b.string(d.string_table[vt_in.type_strindex])
                vt_out.unit_strindex = b.string(d.string_table[vt_in.unit_strindex])
            for s_in, s_out in zip(p_in.samples, p_out.samples, strict=True):
                locs = [loc(x) for x in d.stack_table[s_in.stack_index].location_indices]
                s_out.stack_index = b.stack(locs)
                del s_out.attribute_indices[:]
                s_out.attribute_indices.extend(attr(a) for a in s_in.attribute_indices)
    return b.req


def test_frame_types_labels_and_partial_success(otlp_server):
    c = client(otlp_server, "otlp-kinds")
    t0 = now_ns()
    req = op.export(
        [op.Process(5, extra=(("k8s.namespace.name", "llm"), ("k8s.pod.name", "train-0")))],
        t0,
    )
    events = op.total_events(req)
    # a second profile whose sample names a stack that is not there: rejected alone
    bad = req.resource_profiles[0].scope_profiles[0].profiles.add()
    bad.CopyFrom(req.resource_profiles[0].scope_profiles[0].profiles[0])
    bad.profile_id = b"\x01" * 16
    bad.samples[0].stack_index = 10**6
    status, body = post(c, req.SerializeToString())
    assert status == 200, body
    answer = svc.ExportProfilesServiceResponse.FromString(body)
    assert answer.partial_success.rejected_profiles == 1
    assert "stack" in answer.partial_success.error_message
    c.settle()
    admin = Client(otlp_server.url, token=ADMIN, tenant="otlp-kinds")
    now_ms = t0 // 10**6
    names = admin.connect(
        "LabelNames",
        t.LabelNamesRequest(start=now_ms - 600_000, end=now_ms + 60_000),
        t.LabelNamesResponse,
    ).names
    assert {"namespace", "pod", "container_id", "comm", "service_name"} <= set(names)
    assert not {"pid", "process.pid", "thread.name", "thread.id"} & set(names)
    # no service.name: the pod's namespace and the program name the workload
    status, data, _ = admin.request(
        "GET",
        "/api/v1/flamegraph",
        params={
            "profile_type": SAMPLES,
            "selector": '{pod="train-0"}',
            "from": now_ms - 600_000,
            "to": now_ms + 60_000,
            "format": "pprof",
        },
    )
    assert status == 200, data[:300]
    path = otlp_server.store.parent / "kinds.pb.gz"
    path.write_bytes(data)
    prof = pprof_source.load(Input(str(path)))
    assert int(prof.totals()[0]) == events
    fr = prof.frames
    kinds = {FrameKind(k) for k in fr.kind}
    assert {FrameKind.PYTHON, FrameKind.KERNEL, FrameKind.NATIVE, FrameKind.CPP} <= kinds
    by_name = {fr.strings[fr.name[i]]: FrameKind(fr.kind[i]) for i in range(len(fr))}
    assert by_name["__tlb_batch_free_encoded_pages"] == FrameKind.KERNEL
    assert any(n.startswith("0x") for n in by_name)  # unsymbolized native frames: addresses


def test_errors_as_otlp_says(otlp_server):
    c = client(otlp_server, "otlp-errors")
    status, body = post(c, b"\xff\xff\xff")
    assert status == 400
    assert "ExportProfilesServiceRequest" in status_pb2.Status.FromString(body).message
    status, body = post(c, b"{not json", "application/json")
    assert status == 400 and b"OTLP/JSON" in body
    assert post(c, b"", "text/plain")[0] == 415
    nobody = Client(otlp_server.url, tenant="otlp-errors")
    status, body = post(nobody, svc.ExportProfilesServiceRequest().SerializeToString())
    assert status == 401
    assert status_pb2.Status.FromString(body).code == 16  # UNAUTHENTICATED
    # an empty export is a success that stores nothing
    status, body = post(c, svc.ExportProfilesServiceRequest().SerializeToString())
    assert status == 200 and body == b""
    # every profile too old for the retention: nothing stored, a 400 that says why
    old = op.export([op.Process(1)], 1_000_000_000_000_000_000)
    status, body = post(c, old.SerializeToString())
    assert status == 400
    assert "retention" in status_pb2.Status.FromString(body).message


def test_an_acknowledged_export_survives_sigkill(tmp_path):
    """Answered once in the write-ahead log: a server killed before its batch is committed
    stores the export at its next start (the log is decoded again), and once only."""
    store = tmp_path / "data"
    srv = ServerProcess(store, args=["--batch-seconds", "60"]).start()
    t0 = now_ns()
    req = op.export([op.Process(31), op.Process(32)], t0, profile_ids=False)
    c = Client(srv.url, tenant="otlp-kill")
    try:
        assert post(c, req.SerializeToString())[0] == 200
        assert post(c, op.otlp_json(req), "application/json")[0] == 200  # a retry, as JSON
    finally:
        srv.kill()  # before the 60 s batch was committed
    srv = ServerProcess(store, port=srv.port).start()
    try:
        c.settle()
        got = totals(Client(srv.url, tenant="otlp-kill"), "{}", t0 // 10**6, token=None)
        assert got[SAMPLES] == op.total_events(req)
    finally:
        srv.stop()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_grpc_over_tls_with_the_servers_certificate(tmp_path):
    """--tls-cert/--tls-key serve the OTLP/gRPC port too."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    srv = ServerProcess(
        tmp_path / "data",
        ["--tls-cert", str(cert), "--tls-key", str(key), "--otlp-grpc-listen", f"127.0.0.1:{port}"],
    )
    srv.url = srv.url.replace("http://", "https://")
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        srv.start(ssl_context=ctx)
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        req = op.export([op.Process(7)], now_ns())
        with grpc.secure_channel(f"127.0.0.1:{port}", creds) as channel:
            answer = svc_grpc.ProfilesServiceStub(channel).Export(req, timeout=60)
        assert answer.partial_success.rejected_profiles == 0
        plain = grpc.insecure_channel(f"127.0.0.1:{port}")  # no TLS: refused
        with plain, pytest.raises(grpc.RpcError):
            svc_grpc.ProfilesServiceStub(plain).Export(req, timeout=10)
    finally:
        srv.stop()
