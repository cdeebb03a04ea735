"""The OTLP profiles decoder (server/ingest/otlp.py) and the conventions it shares with the
agent's exporter, on messages built with the opentelemetry-proto package: values and
timestamps, the derived cpu/nanoseconds, identities, labels, frame kinds, rejections."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.proto", reason="OTLP needs the fleet extra")
pytest.importorskip("blake3", reason="the server's ingest needs the fleet extra")

from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as svc,
)
from opentelemetry.proto.common.v1 import common_pb2

from aiflame.model import FrameKind
from aiflame.proto import otlp_conventions as oc
from aiflame.proto.otlp_export import Item, export_request
from aiflame.server.errors import BadRequest
from aiflame.server.ingest import otlp
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.push import Limits

T0 = 1_765_000_000_000_000_000


def request(values: list[list[int]], stamps: list[int], *, types=(("samples", "count"),),
            attrs: dict[str, str] | None = None, frame_type: str = "cpython"):  # fmt: skip
    """One resource, one scope, a profile per type; two frames (main -> work)."""
    req = svc.ExportProfilesServiceRequest()
    d = req.dictionary
    strings = ["", "main", "work", "app.py", "cpu", "nanoseconds", "profile.frame.type", frame_type]
    for t, u in types:
        strings += [t, u]
    d.string_table.extend(strings)
    d.mapping_table.add()
    d.attribute_table.add()
    d.attribute_table.add(key_strindex=6, value=common_pb2.AnyValue(string_value=frame_type))
    d.function_table.add()
    d.function_table.add(name_strindex=1, filename_strindex=3)
    d.function_table.add(name_strindex=2, filename_strindex=3)
    d.location_table.add()
    d.location_table.add(lines=[{"function_index": 1, "line": 3}], attribute_indices=[1])
    d.location_table.add(lines=[{"function_index": 2, "line": 7}], attribute_indices=[1])
    d.stack_table.add()
    d.stack_table.add(location_indices=[2, 1])  # leaf first: work, then main
    rp = req.resource_profiles.add()
    for k, v in (attrs or {"service.name": "svc"}).items():
        rp.resource.attributes.add(key=k, value=common_pb2.AnyValue(string_value=v))
    sp = rp.scope_profiles.add()
    for n, _ in enumerate(types):
        p = sp.profiles.add(time_unix_nano=T0, duration_nano=10**10, period=50_000_000)
        p.sample_type.type_strindex = 8 + 2 * n
        p.sample_type.unit_strindex = 9 + 2 * n
        p.period_type.type_strindex, p.period_type.unit_strindex = 4, 5
        for v in values:
            p.samples.add(stack_index=1, values=v)
        if stamps:
            p.samples.add(stack_index=1, timestamps_unix_nano=stamps)
    return req


def decode(req, **limits):  # type: ignore[no-untyped-def]
    return otlp.decode(
        req,
        tenant="t",
        received_ms=T0 // 10**6,
        limits=Limits(**limits),
        hashes=StringHashes(),
        min_time_ms=0,
    )


def test_values_are_summed_timestamps_counted_and_cpu_derived():
    d = decode(request([[2, 3], [4]], [T0, T0 + 1, T0 + 2]))
    (item,) = d.items
    assert item.name == "process_cpu" and item.samples == 3
    assert item.type_ids == [
        "process_cpu:samples:count:cpu:nanoseconds",
        "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
    ]
    assert item.totals == [12, 12 * 50_000_000]
    assert item.series_labels[0] == {"service_name": "svc", "__name__": "process_cpu"}
    kinds = {r[1]: FrameKind(r[2]) for r in item.frame_rows(item.frame_ids)}
    assert kinds == {"main": FrameKind.PYTHON, "work": FrameKind.PYTHON}


def test_a_scope_with_its_own_cpu_profile_gets_no_second_one():
    req = request([[5]], [], types=(("samples", "count"), ("cpu", "nanoseconds")))
    items = decode(req).items
    assert [i.type_ids for i in items] == [
        ["process_cpu:samples:count:cpu:nanoseconds"],
        ["process_cpu:cpu:nanoseconds:cpu:nanoseconds"],
    ]


def test_identity_profile_id_or_sender_and_content():
    req = request([[1]], [])
    a = decode(req).items[0].profile_id
    assert a.startswith("otlp-content-") and decode(req).items[0].profile_id == a
    other = request([[1]], [], attrs={"service.name": "svc", "host.name": "b"})
    assert decode(other).items[0].profile_id != a  # another sender, the same content
    more = request([[2]], [])
    assert decode(more).items[0].profile_id != a
    req.resource_profiles[0].scope_profiles[0].profiles[0].profile_id = bytes(range(16))
    assert decode(req).items[0].profile_id == "otlp-" + bytes(range(16)).hex()
    req.resource_profiles[0].scope_profiles[0].profiles[0].profile_id = b"short"
    d = decode(req)
    assert d.rejected == 1 and "16" in d.problems[0]


def test_labels_by_the_conventions():
    attrs = {
        "k8s.namespace.name": "llm",
        "k8s.deployment.name": "train",
        "process.pid": "12",
        "process.command_line": "python train.py --token=secret",
        "process.environment_variable.HF_TOKEN": "hf_x",
        "__name__": "evil",
        "cloud.region": "eu",
    }
    (item,) = decode(request([[1]], [], attrs=attrs)).items
    assert item.series_labels[0] == {
        "namespace": "llm",
        "k8s.deployment.name": "train",
        "cloud.region": "eu",
        "service_name": "llm/train",  # no service.name: the pod's namespace/owner
        "__name__": "process_cpu",
    }


def test_frame_types_as_kinds():
    assert oc.frame_type_kind("kernel") == FrameKind.KERNEL
    assert oc.frame_type_kind("cuda") == FrameKind.GPU_KERNEL
    assert oc.frame_type_kind("native") is None  # told from the name
    (item,) = decode(request([[1]], [], frame_type="kernel")).items
    assert {FrameKind(r[2]) for r in item.frame_rows(item.frame_ids)} == {FrameKind.KERNEL}
    assert oc.profile_name("alloc_space", "bytes") == "memory"
    assert oc.profile_name("9lives", "count") == "otel_9lives"


def test_bad_profiles_are_rejected_alone_and_bad_dictionaries_whole():
    req = request([[1]], [])
    bad = req.resource_profiles[0].scope_profiles[0].profiles.add()
    bad.CopyFrom(req.resource_profiles[0].scope_profiles[0].profiles[0])
    bad.samples[0].stack_index = 99
    d = decode(req)
    assert len(d.items) == 1 and d.rejected == 1 and "stack 99" in d.problems[0]
    assert otlp.response(d).partial_success.rejected_profiles == 1
    too_many = decode(request([[1]] * 5, []), max_samples_per_profile=4)
    assert too_many.rejected == 1 and "5 samples" in too_many.problems[0]
    req.dictionary.location_table[1].lines[0].function_index = 50
    with pytest.raises(BadRequest, match="function 50"):
        decode(req)
    with pytest.raises(BadRequest, match="OTLP/JSON"):
        otlp.parse(b"[1, 2", "json")


def test_the_agents_export_reads_back_with_its_exact_kinds():
    from aiflame.model import ProfileBuilder, SampleType
    from aiflame.render.pprof import render_pprof

    b = ProfileBuilder([SampleType("samples", "count")])
    ids = [
        b.frame("main (app.py:1)", FrameKind.PYTHON, "app.py", 1),
        b.frame("at::mm(at::Tensor const&)", FrameKind.CPP, module="libtorch.so"),
        b.frame("cudaLaunchKernel", FrameKind.RUNTIME, module="libcudart.so"),
    ]
    b.add(b.stack(ids), [7.0])
    p = b.build()
    p.meta.update(time_nanos=T0, duration_nanos=10**10, period_type=["cpu", "nanoseconds"])
    req = export_request([Item(render_pprof(p), {"service_name": "a", "pid": "3"}, "e1")], "t")
    (item,) = decode(req).items
    kinds = {r[1]: FrameKind(r[2]) for r in item.frame_rows(item.frame_ids)}
    assert kinds == {
        "main (app.py:1)": FrameKind.PYTHON,
        "at::mm(at::Tensor const&)": FrameKind.CPP,
        "cudaLaunchKernel": FrameKind.RUNTIME,
    }
    assert item.totals == [7] and item.series_labels[0]["service_name"] == "a"
    assert "pid" not in item.series_labels[0]  # per process: not a series label
