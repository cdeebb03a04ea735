#!/usr/bin/env python3
"""Fuzz a running ``aiflame server``: structure-aware mutants of every write endpoint's body
and every read endpoint's parameters, against a server on loopback, bounded in count and time.

    python tools/fuzz_server.py --minutes 10 [--cases 5000] [--out fuzz-server-out] [--seed 1]
    python tools/fuzz_server.py --replay fuzz-server-out/failures.jsonl

The server is started here (embedded store in a temporary directory, a token file; every
request carries the admin token unless the mutant changes it). Each case starts from a valid
request of one endpoint (real pprof and trace files of tests/data, the agents' telemetry and
heartbeats as docs/fleet-protocol.md defines them, Grafana's querier calls with Profiles
Drilldown's, the settings and recording-rules services, OTLP profiles exports as the agent
makes them, as protobuf and OTLP/JSON) and changes its
structure: protobuf fields set to the edges of their types (int64 extremes, 5,000-element
repeated fields, 70,000-character and hostile strings, unknown enum values), JSON values
swapped for numbers at the edges (1e400, 2**64, NaN tokens), other types or nesting 100,000
deep, query parameters set to odd times, steps, selectors (thousands of matchers, regexes
RE2 refuses) and names, headers (content types, encodings, gzip bombs, tenants, tokens,
idempotency keys), and the bytes themselves (tools/fuzz_mutants.py: bit flips, truncation,
corrupt gzip; pprof values at the edges).

Outcomes: ``2xx``, ``4xx`` (a client's mistake, said), and the failures: ``5xx`` (any status
of 500 or more), ``hang`` (no answer within 60 s, twice a query's time limit), ``reset`` (the
connection dropped without an answer), ``crash`` (the server process exited), ``broken``
(after the case the server no longer stores and serves a good push: checked every 25 cases
and at the end; the cases since the previous check are recorded), ``traceback`` (the
server logged one). Failing cases are written to OUT/failures.jsonl (replayable with
``--replay``), counts per endpoint and outcome to OUT/summary.json.
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import gzip
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_mutants  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor as FD  # noqa: E402
from google.protobuf.message import Message  # noqa: E402

from aiflame.proto.pyroscope.push.v1 import push_pb2  # noqa: E402
from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as qpb  # noqa: E402
from aiflame.proto.pyroscope.settings.v1 import recording_rules_pb2 as rpb  # noqa: E402
from aiflame.proto.pyroscope.settings.v1 import setting_pb2 as spb  # noqa: E402
from aiflame.proto.pyroscope.types.v1 import types_pb2 as tpb  # noqa: E402

DATA = ROOT / "tests" / "data"
TOKEN = "fuzz-admin-token-0123456789"
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
FAILURES = ("5xx", "hang", "reset", "crash", "broken", "traceback")
CHECK_EVERY = 25


@dataclass
class Case:
    endpoint: str
    mutation: str
    method: str
    path: str
    params: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def to_json(self) -> dict:
        d = asdict(self)
        d["body"] = base64.b64encode(self.body).decode()
        return d

    @classmethod
    def from_json(cls, d: dict) -> Case:
        d = dict(d)
        d["body"] = base64.b64decode(d["body"])
        d["params"] = [tuple(p) for p in d.get("params", [])]
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


# -- values at the edges -------------------------------------------------------------------


def matchers(n: int) -> str:
    return "{" + ", ".join(f'l{i}=~"v{i}.*"' for i in range(n)) + "}"


INT64 = (0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), -(2**62))
UINT64 = (0, 1, 2**32, 2**53 + 1, 2**63, 2**64 - 1)
INT32 = (0, -1, 2**31 - 1, -(2**31))
FLOATS = (float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, -0.0, 1e19)
ODD_STRINGS = (
    "",
    "{}",
    matchers(70),
    matchers(2000),
    matchers(5000),
    '{a=~"a{1000000}"}',
    '{a=~"(?=x)"}',
    '{a=~"(((((((((("}',
    '{a=~"' + "(a|b)*" * 2000 + '"}',
    '{a="' + "x" * 70_000 + '"}',
    "{" + '"' * 9 + "}",
    '{service_name="x"} trailing',
    "x" * 100_000,
    CPU,
    ":::::",
    "a:b:c:d:e",
    "memory:inuse_space:bytes:space:bytes",
    "now-6h",
    "now-99999999999w",
    *fuzz_mutants.EDGE_NUMBERS,
    *fuzz_mutants.HOSTILE_NAMES,
)
PARAM_VALUES = (
    *ODD_STRINGS[:12],
    "inf",
    "-inf",
    "nan",
    "1e400",
    "-1",
    "0",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999",
    "1e15",
    "1.5",
    "now",
    "now-1h",
    "now-1000000000000d",
    "csv",
    "pprof",
    "html",
    "1",
    "%00",
    "\x00",
    "a" * 5000,
)


def odd_int(rng: random.Random, kind: int) -> int:
    if kind in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return rng.choice(UINT64)
    if kind in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return rng.choice((0, 1, 2**32 - 1))
    if kind in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return rng.choice(INT32)
    return rng.choice(INT64)


def mutate_message(rng: random.Random, msg: Message, depth: int = 0) -> list[str]:
    """Set a few fields of ``msg`` (recursively) to the edges of their types."""
    fields = list(msg.DESCRIPTOR.fields)
    done: list[str] = []
    for f in rng.sample(fields, k=min(len(fields), rng.choice([1, 1, 2, 3]))):
        repeated = f.is_repeated
        if f.type == FD.TYPE_MESSAGE:
            if repeated:
                box = getattr(msg, f.name)
                if f.message_type.GetOptions().map_entry:
                    continue
                if rng.random() < 0.3:
                    for _ in range(rng.choice([0, 1, 300, 2000])):
                        box.add()
                    done.append(f"{f.name}[many]")
                elif len(box):
                    done += mutate_message(rng, box[rng.randrange(len(box))], depth + 1)
                else:
                    done += mutate_message(rng, box.add(), depth + 1)
            elif depth < 4:
                done += mutate_message(rng, getattr(msg, f.name), depth + 1)
            continue
        value: object
        if f.type == FD.TYPE_STRING:
            value = rng.choice(ODD_STRINGS)
        elif f.type == FD.TYPE_BYTES:
            value = rng.choice([b"", b"\x1f\x8b\x08\x00garbage", os.urandom(64)])
        elif f.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
            value = rng.choice(FLOATS)
        elif f.type == FD.TYPE_BOOL:
            value = rng.random() < 0.5
        elif f.type == FD.TYPE_ENUM:
            value = rng.choice([0, 1, 2, 99, -1, 2**31 - 1])
        else:
            value = odd_int(rng, f.type)
        try:
            if repeated:
                box = getattr(msg, f.name)
                del box[:]
                box.extend([value] * rng.choice([1, 2, 17, 5000]))
            else:
                setattr(msg, f.name, value)
            done.append(f.name)
        except (ValueError, TypeError):
            continue
    return done


def encode(rng: random.Random, msg: Message) -> tuple[bytes, str, str]:
    """The message as protobuf or Connect's JSON, sometimes damaged further."""
    if rng.random() < 0.6:
        body, ctype = msg.SerializeToString(), "application/proto"
    else:
        text = json_format.MessageToJson(msg, indent=None)
        body, ctype = text.encode(), "application/json"
    how = ""
    r = rng.random()
    if r < 0.15:
        name, body = fuzz_mutants.mutate(rng, "folded", body)
        how = "+" + name
    elif r < 0.25 and ctype == "application/json":
        m = rng.choice(
            [
                fuzz_mutants.json_numbers_at_edges,
                fuzz_mutants.json_type_swap,
                fuzz_mutants.json_deep_nesting,
                fuzz_mutants.json_delete_keys,
            ]
        )
        body = m(rng, body) or body
        how = "+" + m.__name__
    return body, ctype, how


def odd_headers(rng: random.Random, case: Case) -> None:
    """Sometimes a header at its edges: types, encodings, tenants, tokens, keys."""
    r = rng.random()
    if r > 0.3:
        return
    choice = rng.randrange(9)
    h = case.headers
    if choice == 0:
        h["Content-Type"] = rng.choice(
            [
                "",
                "text/html",
                "application/grpc",
                "multipart/form-data",
                "application/json; charset=utf-16",
                "x" * 300,
            ]
        )
    elif choice == 1:
        h["Content-Encoding"] = rng.choice(["gzip", "br", "deflate", "gzip, gzip", "identity"])
    elif choice == 2:
        case.body = gzip.compress(case.body, mtime=0)
        h["Content-Encoding"] = "gzip"
    elif choice == 3:
        h["X-Scope-OrgID"] = rng.choice(["", "..", "a" * 151, "t/../x", "t\x7f", "ok-tenant"])
    elif choice == 4:
        h["Authorization"] = rng.choice(
            [
                "",
                "Bearer",
                "Basic !!!",
                "Bearer wrong-token-0123456789",
                "Basic " + base64.b64encode(b":" + TOKEN.encode()).decode(),
                "Negotiate x",
            ]
        )
    elif choice == 5:
        h["Idempotency-Key"] = rng.choice(["", "k" * 300, "key\tx", "retry-1"])
    elif choice == 6:
        h["X-Aiflame-Labels"] = rng.choice(
            [
                "{",
                "[]",
                '{"a": {"b": 1}}',
                "[" * 3000,
                '{"bad name": "x"}',
                '{"k": "' + "v" * 2000 + '"}',
            ]
        )
    elif choice == 7:
        h["X-Aiflame-Trace-Id"] = rng.choice(["", "../../etc/passwd", "x" * 200, "id with space"])
    else:
        h["Expect"] = "100-continue"
    case.mutation += f"+header{choice}"


# -- seeds and generators, one per endpoint ------------------------------------------------


class Seeds:
    def __init__(self) -> None:
        self.pprofs = [
            (DATA / p).read_bytes()
            for p in (
                "server/torch_train_cpu.pb.gz",
                "pprof/go_runtime/cpu.pb.gz",
                "pprof/google_pprof/gobench.cpu.pb.gz",
            )
        ]
        self.trace = (
            DATA
            / "kineto/hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
        ).read_bytes()
        self.folded = (DATA / "speedscope/stackcollapse/simple.txt").read_bytes()


def _now() -> float:
    return time.time()


def gen_push(rng: random.Random, seeds: Seeds) -> Case:
    req = push_pb2.PushRequest()
    s = req.series.add()
    for k, v in (("__name__", "process_cpu"), ("service_name", "fuzz"), ("pod", "p-1")):
        s.labels.add(name=k, value=v)
    raw = rng.choice(seeds.pprofs)
    what = "push"
    if rng.random() < 0.4:
        name, raw = fuzz_mutants.mutate(rng, "pprof", raw)
        what += "+pprof:" + name
    s.samples.add(raw_profile=raw, ID=f"fz-{rng.getrandbits(40):x}")
    if rng.random() < 0.7:
        what += "+" + ",".join(mutate_message(rng, req))
    body, ctype, how = encode(rng, req)
    return Case(
        "push",
        what + how,
        "POST",
        "/push.v1.PusherService/Push",
        headers={"Content-Type": ctype},
        body=body,
    )


def gen_ingest(rng: random.Random, seeds: Seeds) -> Case:
    now = _now()
    fmt = rng.choice(["folded", "lines", "pprof", "pprof-multipart"])
    params = {
        "name": "fuzz.cpu{env=prod}",
        "from": str(int(now - 10)),
        "until": str(int(now)),
        "sampleRate": "100",
        "spyName": "fuzz",
        "format": fmt.split("-")[0],
    }
    headers = {"Content-Type": "text/plain"}
    if fmt.startswith("pprof"):
        body = rng.choice(seeds.pprofs)
        if rng.random() < 0.4:
            _, body = fuzz_mutants.mutate(rng, "pprof", body)
        if fmt == "pprof-multipart":
            b = "fuzzboundary"
            body = (
                (
                    f'--{b}\r\nContent-Disposition: form-data; name="profile"; filename="p"\r\n'
                    f"Content-Type: application/octet-stream\r\n\r\n"
                ).encode()
                + body
                + f"\r\n--{b}--\r\n".encode()
            )
            headers["Content-Type"] = f"multipart/form-data; boundary={b}"
    else:
        body = seeds.folded
        if rng.random() < 0.5:
            _, body = fuzz_mutants.mutate(rng, "folded", body)
    what = f"ingest-{fmt}"
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        k = rng.choice([*params, "name", "name", "format", "aggregationType", "units"])
        if k == "name" and rng.random() < 0.5:
            params[k] = rng.choice(
                [
                    "x",
                    ".cpu",
                    "a.cpu{",
                    "a.cpu{k=v",
                    "a.cpu{bad-key=1}",
                    "a.cpu{" + ",".join(f"k{i}=v" for i in range(100)) + "}",
                    "a." + "x" * 3000,
                    'a.alloc_space{x="y"}',
                ]
            )
        else:
            params[k] = rng.choice(PARAM_VALUES)
        what += f"+{k}"
    if rng.random() < 0.1:
        del params[rng.choice(list(params))]
    return Case("ingest", what, "POST", "/ingest", list(params.items()), headers, body)


def _telemetry_doc(rng: random.Random) -> dict:
    now = _now()
    return {
        "batch_id": f"fz-{rng.getrandbits(40):x}",
        "host": "fuzz-host",
        "agent_version": "0.1.0",
        "start": now - 10,
        "end": now,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "name": "NVIDIA H100",
                "util": 0.5,
                "memory_used_bytes": 10 << 30,
                "memory_total_bytes": 80 << 30,
                "power_watts": 300.0,
                "sm_clock_mhz": 1980,
                "temperature_c": 60,
                "sm_active": 0.4,
                "tensor_active": 0.2,
                "est_flops": 1e14,
            }
            for i in range(2)
        ],
        "workloads": [
            {
                "labels": {"job_id": "42", "team": "fuzz"},
                "allocated_gpu_seconds": 20.0,
                "pids": [100, 101],
                "gpu_uuids": ["GPU-0", "GPU-1"],
                "busy_gpu_seconds": 10.0,
                "useful_gpu_seconds": 8.0,
                "est_flop": 1e15,
                "gpu_memory_bytes": 1 << 30,
                "input_bytes": 1 << 20,
            }
        ],
    }


def _json_case(rng: random.Random, endpoint: str, path: str, doc: dict) -> Case:
    body = json.dumps(doc).encode()
    what = endpoint
    r = rng.random()
    if r < 0.7:
        m = rng.choice(
            [
                fuzz_mutants.json_numbers_at_edges,
                fuzz_mutants.json_type_swap,
                fuzz_mutants.json_deep_nesting,
                fuzz_mutants.json_delete_keys,
                fuzz_mutants.json_numbers_at_edges,
                fuzz_mutants.json_type_swap,
            ]
        )
        body = m(rng, body) or body
        what += "+" + m.__name__
    elif r < 0.85:
        name, body = fuzz_mutants.mutate(rng, "folded", body)
        what += "+" + name
    return Case(
        endpoint, what, "POST", path, headers={"Content-Type": "application/json"}, body=body
    )


def gen_telemetry(rng: random.Random, seeds: Seeds) -> Case:
    return _json_case(rng, "telemetry", "/api/v1/telemetry", _telemetry_doc(rng))


def gen_heartbeat(rng: random.Random, seeds: Seeds) -> Case:
    doc = {
        "host": "fuzz-host",
        "agent_version": "0.1.0",
        "started": _now() - 100,
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100"}],
        "spool_bytes": 1234,
        "sampling_rate_hz": 19,
    }
    return _json_case(rng, "heartbeat", "/api/v1/agents/heartbeat", doc)


def gen_trace_request(rng: random.Random, seeds: Seeds) -> Case:
    doc: dict = {"selector": {"job_id": "42"}, "duration_ms": 1000, "expires_s": 60}
    if rng.random() < 0.3:
        doc = {"selector": {"job_id": "42"}, "kind": "memory-snapshot"}
    if rng.random() < 0.3:
        doc["start_time"] = _now() + 5
    return _json_case(rng, "trace-request", "/api/v1/trace-requests", doc)


def gen_trace(rng: random.Random, seeds: Seeds) -> Case:
    body = seeds.trace
    what = "trace"
    if rng.random() < 0.6:
        name, body = fuzz_mutants.mutate(rng, "kineto", body)
        what += "+" + name
    headers = {
        "Content-Type": "application/octet-stream",
        "X-Aiflame-Trace-Id": f"fz-{rng.getrandbits(40):x}",
        "X-Aiflame-Labels": json.dumps({"job_id": "42"}),
    }
    return Case("trace", what, "POST", "/api/v1/traces", headers=headers, body=body)


QUERIER: dict[str, Callable[[int], Message]] = {
    "ProfileTypes": lambda now: qpb.ProfileTypesRequest(start=now - 3600_000, end=now),
    "LabelNames": lambda now: tpb.LabelNamesRequest(matchers=["{}"], start=now - 3600_000, end=now),
    "LabelValues": lambda now: tpb.LabelValuesRequest(
        name="service_name", matchers=['{service_name="fuzz"}'], start=now - 3600_000, end=now
    ),
    "Series": lambda now: qpb.SeriesRequest(
        matchers=["{}"], label_names=["service_name"], start=now - 3600_000, end=now
    ),
    "SelectMergeStacktraces": lambda now: qpb.SelectMergeStacktracesRequest(
        profile_typeID=CPU,
        label_selector='{service_name="fuzz"}',
        start=now - 3600_000,
        end=now,
        max_nodes=1024,
    ),
    "SelectMergeProfile": lambda now: qpb.SelectMergeProfileRequest(
        profile_typeID=CPU, label_selector="{}", start=now - 3600_000, end=now
    ),
    "SelectSeries": lambda now: qpb.SelectSeriesRequest(
        profile_typeID=CPU,
        label_selector="{}",
        start=now - 3600_000,
        end=now,
        step=15,
        group_by=["service_name"],
        limit=10,
    ),
    "Diff": lambda now: qpb.DiffRequest(
        left=qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector="{}", start=now - 7200_000, end=now - 3600_000
        ),
        right=qpb.SelectMergeStacktracesRequest(
            profile_typeID=CPU, label_selector="{}", start=now - 3600_000, end=now
        ),
    ),
    "GetProfileStats": lambda now: tpb.GetProfileStatsRequest(),
    "SelectHeatmap": lambda now: qpb.SelectHeatmapRequest(
        profile_typeID=CPU,
        label_selector='{service_name="fuzz"}',
        start=now - 3600_000,
        end=now,
        step=60,
        limit=10,
    ),
    "SelectMergeSpanProfile": lambda now: qpb.SelectMergeSpanProfileRequest(
        profile_typeID=CPU,
        label_selector="{}",
        span_selector=["0123456789abcdef"],
        start=now - 3600_000,
        end=now,
        max_nodes=64,
    ),
    "AnalyzeQuery": lambda now: qpb.AnalyzeQueryRequest(
        start=now - 3600_000,
        end=now,
        query="process_cpu:cpu:nanoseconds:cpu:nanoseconds{}",
    ),
}


def gen_querier(rng: random.Random, seeds: Seeds) -> Case:
    method = rng.choice(list(QUERIER))
    msg = QUERIER[method](int(_now() * 1000))
    what = f"querier-{method}+" + ",".join(mutate_message(rng, msg))
    body, ctype, how = encode(rng, msg)
    return Case(
        "querier",
        what + how,
        "POST",
        f"/querier.v1.QuerierService/{method}",
        headers={"Content-Type": ctype},
        body=body,
    )


SETTINGS: dict[str, Callable[[int], Message]] = {
    "settings.v1.SettingsService/Get": lambda now: spb.GetSettingsRequest(),
    "settings.v1.SettingsService/Set": lambda now: spb.SetSettingsRequest(
        setting=spb.Setting(name="pluginSettings", value='{"fuzz": 1}', modifiedAt=now)
    ),
    "settings.v1.SettingsService/Delete": lambda now: spb.DeleteSettingsRequest(
        name="pluginSettings"
    ),
    "settings.v1.RecordingRulesService/ListRecordingRules": (
        lambda now: rpb.ListRecordingRulesRequest()
    ),
    "settings.v1.RecordingRulesService/UpsertRecordingRule": (
        lambda now: rpb.UpsertRecordingRuleRequest(id="r1", metric_name="fuzz")
    ),
}


def gen_settings(rng: random.Random, seeds: Seeds) -> Case:
    method = rng.choice(list(SETTINGS))
    msg = SETTINGS[method](int(_now() * 1000))
    what = f"settings-{method.rpartition('/')[2]}+" + ",".join(mutate_message(rng, msg))
    body, ctype, how = encode(rng, msg)
    return Case(
        "settings", what + how, "POST", f"/{method}", headers={"Content-Type": ctype}, body=body
    )


def _otlp_request(seeds: Seeds, rng: random.Random) -> Message:
    """An OTLP profiles export of a real pprof, as the agent sends it."""
    from aiflame.proto.otlp_export import Item, export_request

    labels = {"service_name": "fuzz-otlp", "host": "fuzz-host", "pod": "p-1"}
    item = Item(rng.choice(seeds.pprofs), labels, f"fz-{rng.getrandbits(40):x}")
    return export_request([item], "fuzz")


def gen_otlp(rng: random.Random, seeds: Seeds) -> Case:
    msg = _otlp_request(seeds, rng)
    what = "otlp"
    if rng.random() < 0.8:
        what += "+" + ",".join(mutate_message(rng, msg))
    body, ctype, how = encode(rng, msg)
    headers = {"Content-Type": "application/x-protobuf" if ctype == "application/proto" else ctype}
    if rng.random() < 0.2:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        how += "+gzip"
    return Case("otlp", what + how, "POST", "/v1development/profiles", headers=headers, body=body)


READS: dict[str, dict[str, str]] = {
    "/api/v1/attribution": {
        "from": "now-7d",
        "to": "now",
        "step": "3600",
        "group_by": "team",
        "selector": '{team="fuzz"}',
        "top": "10",
    },
    "/api/v1/attribution.csv": {"from": "now-1d", "group_by": "job_id"},
    "/api/v1/findings": {"from": "now-7d", "workload_label": "job_id", "selector": "{}"},
    "/api/v1/workload": {"label": "job_id", "value": "42", "from": "now-1d"},
    "/api/v1/traces": {"selector": "{}", "limit": "10", "from": "now-7d"},
    "/api/v1/traces/fz-1": {},
    "/api/v1/traces/fz-1/flamegraph": {},
    "/api/v1/traces/fz-1/report": {"format": "html"},
    "/pyroscope/render": {
        "query": 'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="fuzz"}',
        "from": "now-1h",
        "until": "now",
        "format": "json",
        "max-nodes": "1024",
    },
    "/pyroscope/render-diff": {
        "leftQuery": 'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="fuzz"}',
        "leftFrom": "now-2h",
        "leftUntil": "now-1h",
        "rightQuery": 'process_cpu:cpu:nanoseconds:cpu:nanoseconds{service_name="fuzz"}',
        "rightFrom": "now-1h",
        "rightUntil": "now",
    },
    "/pyroscope/label-values": {"label": "service_name", "from": "now-1h", "until": "now"},
    "/api/v1/flamegraph": {
        "profile_type": CPU,
        "selector": '{service_name="fuzz"}',
        "from": "now-1h",
        "to": "now",
        "diff_selector": "{}",
        "diff_from": "now-2h",
        "diff_to": "now-1h",
        "format": "html",
    },
    "/api/v1/labels": {"from": "now-1d", "selector": "{}", "name": "service_name"},
    "/api/v1/telemetry/labels": {"from": "now-7d"},
    "/api/v1/agents": {},
    "/api/v1/trace-requests": {},
    "/api/v1/admin/store": {},
    "/metrics": {},
    "/ui/fleet": {"tenant": "anonymous"},
    "/ui/explore": {"selector": "{}"},
}


def gen_read(rng: random.Random, seeds: Seeds) -> Case:
    path = rng.choice(list(READS))
    params = dict(READS[path])
    what = "get"
    names = [*params, "from", "to", "step", "selector", "limit", "top", "format", "tenant"]
    for _ in range(rng.choice([1, 1, 2, 3])):
        k = rng.choice(names)
        params[k] = rng.choice(PARAM_VALUES)
        what += f"+{k}"
    if rng.random() < 0.1 and params:
        del params[rng.choice(list(params))]
    return Case("read " + path, what, "GET", path, list(params.items()))


GENERATORS: list[tuple[Callable[[random.Random, Seeds], Case], int]] = [
    (gen_push, 6),
    (gen_ingest, 5),
    (gen_telemetry, 4),
    (gen_heartbeat, 3),
    (gen_trace_request, 2),
    (gen_trace, 1),
    (gen_querier, 7),
    (gen_read, 6),
    (gen_settings, 2),
    (gen_otlp, 5),
]


def generate(rng: random.Random, seeds: Seeds) -> Case:
    gens = [g for g, w in GENERATORS for _ in range(w)]
    case = rng.choice(gens)(rng, seeds)
    odd_headers(rng, case)
    return case


# -- the sweep: every field of every endpoint at every edge, once --------------------------

SWEEP_JSON = (
    None,
    True,
    "",
    "x" * 5000,
    [],
    {},
    -1,
    2**64,
    2**63,
    -(2**63) - 1,
    1e308,
    -1e308,
    1.5,
    "NaN",
    "1e400",
    "\u202e",
    [[[[[[[[["deep"]]]]]]]]],
)
SWEEP_JSON_RAW = ("1e400", "-1e400", "NaN", "Infinity", "1" + "0" * 400, "[" * 100_000)
SWEEP_PARAMS = (
    "inf",
    "nan",
    "1e400",
    "-1",
    "0",
    "9223372036854775808",
    "1e15",
    "now-99999999w",
    "",
    "x" * 5000,
    matchers(2000),
    '{a=~"a{1000000}"}',
    '{a=~"(?=x)"}',
    "\x00",
    "1.5",
)


def _same_place(original: object, copy: object, container: object) -> object | None:
    """The container of ``copy`` at the place of ``container`` in ``original``."""
    if original is container:
        return copy
    if isinstance(original, dict):
        items = list(original.items())
    elif isinstance(original, list):
        items = list(enumerate(original))
    else:
        items = []
    for k, v in items:
        if isinstance(v, dict | list):
            found = _same_place(v, copy[k], container)  # type: ignore[index]
            if found is not None:
                return found
    return None


def _json_sweep(endpoint: str, path: str, doc: dict) -> list[Case]:
    out = []
    text = json.dumps(doc)
    headers = {"Content-Type": "application/json"}
    for container, key in fuzz_mutants._json_paths(doc, 200):
        for value in SWEEP_JSON:
            d = json.loads(text)
            target = _same_place(doc, d, container)
            if target is None:
                continue
            target[key] = value  # type: ignore[index]
            body = json.dumps(d).encode()
            out.append(
                Case(
                    endpoint,
                    f"sweep {key}={str(value)[:20]}",
                    "POST",
                    path,
                    [],
                    dict(headers),
                    body,
                )
            )
        if isinstance(container, dict) and not isinstance(container[key], dict | list):
            for raw in SWEEP_JSON_RAW:
                d = json.loads(text)
                target = _same_place(doc, d, container)
                if target is None:
                    continue
                target[key] = "__SWEEP__"  # type: ignore[index]
                body = json.dumps(d).replace('"__SWEEP__"', raw + "]" * raw.count("[")).encode()
                out.append(
                    Case(endpoint, f"sweep {key}={raw[:20]}", "POST", path, [], dict(headers), body)
                )
    return out


def _scalar_edges(f: FD) -> tuple:
    if f.type == FD.TYPE_STRING:
        return (*ODD_STRINGS[:10], "x" * 70_000)
    if f.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return FLOATS
    if f.type in (FD.TYPE_BOOL, FD.TYPE_BYTES, FD.TYPE_MESSAGE):
        return ()
    if f.type == FD.TYPE_ENUM:
        return (99, -1)
    return UINT64 if f.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64) else INT64


def _message_sweep(
    method: str,
    build: Callable[[int], Message],
    path: str = "",
    endpoint: str = "querier",
    ctype: str = "application/proto",
) -> list[Case]:
    """Each scalar field (and those of its direct sub-messages) at each edge of its type;
    repeated fields with one and with 5,000 of it."""
    out = []
    now = int(time.time() * 1000)
    spots: list[tuple[str | None, FD]] = []
    for f in build(now).DESCRIPTOR.fields:
        if f.type == FD.TYPE_MESSAGE and not f.is_repeated:
            spots += [(f.name, g) for g in f.message_type.fields]
        else:
            spots.append((None, f))
    for parent, f in spots:
        for value in _scalar_edges(f):
            short = not isinstance(value, str) or len(value) < 200
            for count in (1, 5000) if f.is_repeated and short else (1,):
                msg = type(base := build(now))()
                msg.CopyFrom(base)  # a copy: a build may hand out the same message
                target = getattr(msg, parent) if parent else msg
                try:
                    if f.is_repeated:
                        box = getattr(target, f.name)
                        del box[:]
                        box.extend([value] * count)
                    else:
                        setattr(target, f.name, value)
                except (ValueError, TypeError):
                    continue
                name = f"{parent}.{f.name}" if parent else f.name
                out.append(
                    Case(
                        endpoint,
                        f"sweep {method}.{name}={str(value)[:20]} x{count}",
                        "POST",
                        path or f"/querier.v1.QuerierService/{method}",
                        [],
                        {"Content-Type": ctype},
                        msg.SerializeToString(),
                    )
                )
    return out


def sweep(seeds: Seeds) -> list[Case]:
    """Every field of every endpoint set to each of its edges, one at a time."""
    rng = random.Random(0)
    cases: list[Case] = []
    cases += _json_sweep("telemetry", "/api/v1/telemetry", _telemetry_doc(rng))
    hb = {
        "host": "fuzz-host",
        "agent_version": "0.1.0",
        "started": time.time() - 100,
        "gpus": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100"}],
        "spool_bytes": 1234,
        "sampling_rate_hz": 19,
    }
    cases += _json_sweep("heartbeat", "/api/v1/agents/heartbeat", hb)
    tr = {"selector": {"job_id": "42"}, "duration_ms": 1000, "expires_s": 60, "start_time": 1.0}
    cases += _json_sweep("trace-request", "/api/v1/trace-requests", tr)
    for method, build in QUERIER.items():
        cases += _message_sweep(method, build)
    for method, build in SETTINGS.items():
        cases += _message_sweep(method, build, f"/{method}", "settings")
    otlp = _otlp_request(seeds, random.Random(2))
    cases += _message_sweep(
        "Export", lambda now: otlp, "/v1development/profiles", "otlp", "application/x-protobuf"
    )
    base = gen_ingest(random.Random(1), seeds)
    for k, _ in base.params:
        for v in SWEEP_PARAMS:
            params = [(a, v if a == k else b) for a, b in base.params]
            cases.append(
                Case(
                    "ingest",
                    f"sweep {k}={v[:20]}",
                    "POST",
                    "/ingest",
                    params,
                    dict(base.headers),
                    base.body,
                )
            )
    for path, defaults in READS.items():
        for k in sorted({*defaults, "from", "to", "step", "selector", "limit"}):
            for v in SWEEP_PARAMS:
                params = [*((a, b) for a, b in defaults.items() if a != k), (k, v)]
                cases.append(Case("read " + path, f"sweep {k}={v[:20]}", "GET", path, params))
    return cases


# -- the server and the requests -----------------------------------------------------------


class Server:
    def __init__(self, work: Path) -> None:
        self.work = work
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.tokens = work / "tokens"
        self.tokens.write_text(f"{TOKEN} admin\n")
        self.log = work / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        cmd = [
            sys.executable,
            "-m",
            "aiflame",
            "server",
            "--store",
            f"chdb://{self.work / 'data'}",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--token-file",
            str(self.tokens),
            "--log-level",
            "warning",
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {self.log.read_text()[-2000:]}")
            try:
                if send(self.port, Case("ready", "", "GET", "/ready"), 5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise SystemExit("the server did not start")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def send(port: int, case: Case, timeout: float = 60.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {TOKEN}", **case.headers}
        path = case.path
        if case.params:
            path += "?" + urllib.parse.urlencode(case.params)
        conn.request(case.method, path, body=case.body or None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def raw_answer(port: int, case: Case) -> int | None:
    """The status the server answers ``case`` with, however early it answers."""
    path = case.path + ("?" + urllib.parse.urlencode(case.params) if case.params else "")
    head = [f"{case.method} {path} HTTP/1.1", "Host: fuzz", f"Authorization: Bearer {TOKEN}"]
    head += [f"{k}: {v}" for k, v in case.headers.items()]
    head.append(f"Content-Length: {len(case.body)}")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1", "replace") + case.body
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        with contextlib.suppress(OSError):
            s.sendall(data)
        try:
            line = s.recv(4096).split(b"\r\n", 1)[0].split()
            return int(line[1]) if len(line) > 1 else None
        except (OSError, ValueError):
            return None


def outcome_of(server: Server, case: Case) -> tuple[str, int, bytes]:
    try:
        status, data = send(server.port, case)
    except TimeoutError:
        return "hang", 0, b""
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        if not server.alive():
            return "crash", 0, str(e).encode()
        # The server may have answered (and closed) before the body was sent, as it does
        # for a malformed header: read what it said over a plain socket.
        said = raw_answer(server.port, case)
        if said is not None and said < 500:
            return ("2xx" if said < 300 else "4xx"), said, b""
        return "reset", said or 0, str(e).encode()
    if status >= 500:
        return "5xx", status, data
    return ("2xx" if status < 300 else "4xx" if status >= 400 else "3xx"), status, data


def healthy(server: Server, n: int) -> str | None:
    """Whether the server still stores and serves: a good push, flushed, then found."""
    from aiflame.proto.pyroscope.querier.v1 import querier_pb2 as q

    raw = (DATA / "server/torch_train_cpu.pb.gz").read_bytes()
    req = push_pb2.PushRequest()
    s = req.series.add()
    svc = f"health-{n}"
    for k, v in (("__name__", "process_cpu"), ("service_name", svc)):
        s.labels.add(name=k, value=v)
    s.samples.add(raw_profile=raw, ID=f"health-{n}")
    try:
        for case in (
            Case(
                "check",
                "",
                "POST",
                "/push.v1.PusherService/Push",
                headers={"Content-Type": "application/proto"},
                body=req.SerializeToString(),
            ),
            Case("check", "", "POST", "/api/v1/admin/flush"),
        ):
            status, data = send(server.port, case, 120)
            if status != 200:
                return f"{case.path}: {status} {data[:200]!r}"
        now = int(time.time() * 1000)
        m = q.SeriesRequest(
            matchers=[f'{{service_name="{svc}"}}'], start=now - 3_600_000, end=now + 3_600_000
        )
        status, data = send(
            server.port,
            Case(
                "check",
                "",
                "POST",
                "/querier.v1.QuerierService/Series",
                headers={"Content-Type": "application/proto"},
                body=m.SerializeToString(),
            ),
            60,
        )
        if status != 200 or not q.SeriesResponse.FromString(data).labels_set:
            return f"the good push is not found: {status} {data[:200]!r}"
    except OSError as e:
        return f"no answer: {e}"
    return None


# -- the run -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fuzz-server-"))
    server = Server(work)
    server.start()
    rng = random.Random(args.seed)
    seeds = Seeds()
    swept = sweep(seeds) if args.sweep and not args.replay else []
    replay = (
        [
            Case.from_json(json.loads(line))
            for line in Path(args.replay).read_text().splitlines()
            if line.strip()
        ]
        if args.replay
        else None
    )
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = open(out / "failures.jsonl", "w")  # noqa: SIM115
    since_check: list[Case] = []
    deadline = time.monotonic() + args.minutes * 60
    n = 0
    total = len(replay) if replay is not None else args.cases + len(swept)

    def fail(outcome: str, case: Case, status: int, data: bytes) -> None:
        counts[case.endpoint][outcome] += 1
        rec = {
            "outcome": outcome,
            "status": status,
            "answer": data[:500].decode(errors="replace"),
            **case.to_json(),
        }
        failures.write(json.dumps(rec) + "\n")
        failures.flush()
        print(f"[{n}] {outcome} {status} {case.endpoint} {case.mutation[:80]}", flush=True)

    try:
        while n < total and time.monotonic() < deadline:
            if replay is not None:
                case = replay[n]
            else:
                case = swept[n] if n < len(swept) else generate(rng, seeds)
            n += 1
            outcome, status, data = outcome_of(server, case)
            since_check.append(case)
            if outcome in FAILURES:
                fail(outcome, case, status, data)
                if outcome == "crash":
                    server.start()
                    since_check = []
                continue
            counts[case.endpoint][outcome] += 1
            if n % CHECK_EVERY == 0 or n == total:
                why = healthy(server, n)
                if why is not None:
                    for c in since_check:
                        fail("broken", c, 0, why.encode())
                    server.stop()
                    server = Server(Path(tempfile.mkdtemp(prefix="fuzz-server-")))
                    server.start()
                since_check = []
    finally:
        server.stop()
        failures.close()
    log = server.log.read_text(errors="replace")
    tracebacks = log.count("Traceback")
    if tracebacks:
        counts["server log"]["traceback"] += tracebacks
        (out / "server.log").write_text(log)
    summary = {
        "cases": n,
        "seed": args.seed,
        "minutes": round(args.minutes, 1),
        "outcomes": {k: dict(v) for k, v in sorted(counts.items())},
        "failures": sum(v[f] for v in counts.values() for f in FAILURES),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    width = max(len(k) for k in counts) if counts else 10
    cols = ("2xx", "3xx", "4xx", *FAILURES)
    print(f"{'endpoint':<{width}}  " + "  ".join(f"{c:>9}" for c in cols))
    for k, v in sorted(counts.items()):
        print(f"{k:<{width}}  " + "  ".join(f"{v.get(c, 0):>9}" for c in cols))
    print(f"{n} cases, {summary['failures']} failures; see {out}/")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if summary["failures"] else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--cases", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="fuzz-server-out")
    p.add_argument("--replay", metavar="JSONL", help="send these cases (failures.jsonl) again")
    p.add_argument(
        "--no-sweep",
        dest="sweep",
        action="store_false",
        help="skip the sweep of every field at every edge (done first, some 3,000 cases)",
    )
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
