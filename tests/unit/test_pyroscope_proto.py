"""The generated Pyroscope messages keep Pyroscope's package, service and field names."""

from __future__ import annotations

from google.protobuf import json_format

from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.proto.pyroscope.querier.v1 import querier_pb2


def test_rpc_paths_are_pyroscopes():
    pusher = push_pb2.DESCRIPTOR.services_by_name["PusherService"]
    querier = querier_pb2.DESCRIPTOR.services_by_name["QuerierService"]
    assert pusher.full_name == "push.v1.PusherService"
    assert querier.full_name == "querier.v1.QuerierService"
    for method in (
        "ProfileTypes",
        "LabelNames",
        "LabelValues",
        "SelectSeries",
        "SelectMergeStacktraces",
        "Diff",
    ):
        assert method in querier.methods_by_name


def test_push_request_json_uses_pyroscope_field_names():
    request = push_pb2.PushRequest()
    series = request.series.add()
    series.labels.add(name="__name__", value="process_cpu")
    series.samples.add(ID="734FD599-6865-419E-9475-932762D8F469", raw_profile=b"\x1f\x8b")
    as_json = json_format.MessageToDict(request)
    assert as_json["series"][0]["samples"][0] == {
        "rawProfile": "H4s=",
        "ID": "734FD599-6865-419E-9475-932762D8F469",
    }
    back = json_format.ParseDict(as_json, push_pb2.PushRequest())
    assert back == request
