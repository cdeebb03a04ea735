"""OTLP profiles exports for the tests, built with the ``opentelemetry-proto`` package's own
generated classes, in the shape the OpenTelemetry eBPF profiler sends them.

The shape follows the profiler's reporter (open-telemetry/opentelemetry-ebpf-profiler,
``reporter/internal/pdata/generate.go``): one dictionary per request whose tables start with
their zero value; one ``ResourceProfiles`` per process (``process.pid`` as an int,
``process.executable.path`` and ``.name``, ``container.id``), its scope the profiler's name
and version; one profile of sample type ``samples/count`` with period type
``cpu/nanoseconds`` and period 1e9/rate; samples holding only timestamps (one per event),
with ``thread.name``, ``thread.id`` and ``cpu.logical_number`` attributes; locations with a
mapping, an address, lines for symbolized frames and the ``profile.frame.type`` attribute.

The stacks are real: those of aiflame's eBPF recording of a PyTorch training loop
(tests/data/server/torch_train_cpu.pb.gz), each frame given the type the profiler would
give it (``cpython``, ``kernel``, ``native``); some native frames are left unsymbolized
(an address in a mapping and no line, as the profiler sends native code).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass

from google.protobuf import json_format
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from payloads import recording

from aiflame.model import FrameKind

RATE_HZ = 20
PERIOD = 1_000_000_000 // RATE_HZ
SCOPE = ("otelcol-ebpf-profiler", "0.140.0")
_LINE = re.compile(r" \((?:[^()]*):\d+\)$")


@dataclass
class Process:
    pid: int
    exe: str = "/usr/bin/python3.11"
    container: str = "cd" * 32
    service: str = ""  # service.name, which the profiler sets only for APM processes
    extra: tuple[tuple[str, str], ...] = ()


class Builder:
    """One request's dictionary, its tables filled as the profiler's ordered sets do."""

    def __init__(self) -> None:
        self.req = svc.ExportProfilesServiceRequest()
        d = self.req.dictionary
        d.string_table.append("")
        d.mapping_table.add()
        d.location_table.add()
        d.function_table.add()
        d.link_table.add()
        d.attribute_table.add()
        d.stack_table.add()
        self._strings: dict[str, int] = {"": 0}
        self._index: dict[tuple, int] = {}

    def string(self, s: str) -> int:
        if s not in self._strings:
            self._strings[s] = len(self.req.dictionary.string_table)
            self.req.dictionary.string_table.append(s)
        return self._strings[s]

    def _intern(self, key: tuple, table, make) -> int:  # type: ignore[no-untyped-def]
        if key not in self._index:
            self._index[key] = len(table)
            make()
        return self._index[key]

    def attribute(self, key: str, value: str | int) -> int:
        d = self.req.dictionary

        def make() -> None:
            v = (
                common_pb2.AnyValue(int_value=value)
                if isinstance(value, int)
                else common_pb2.AnyValue(string_value=value)
            )
            d.attribute_table.add(key_strindex=self.string(key), value=v)

        return self._intern(("attr", key, value), d.attribute_table, make)

    def mapping(self, filename: str) -> int:
        d = self.req.dictionary

        def make() -> None:
            m = d.mapping_table.add(
                memory_start=0x400000,
                memory_limit=0x7FFFFFFF,
                filename_strindex=self.string(filename),
            )
            digest = hashlib.sha256(filename.encode()).hexdigest()[:32]
            m.attribute_indices.append(
                self.attribute("process.executable.build_id.htlhash", digest)
            )

        return self._intern(("map", filename), d.mapping_table, make)

    def function(self, name: str, filename: str) -> int:
        d = self.req.dictionary

        def make() -> None:
            d.function_table.add(
                name_strindex=self.string(name), filename_strindex=self.string(filename)
            )

        return self._intern(("fn", name, filename), d.function_table, make)

    def location(
        self, frame_type: str, module: str, address: int, fn: int | None, line: int
    ) -> int:
        d = self.req.dictionary

        def make() -> None:
            loc = d.location_table.add(
                mapping_index=self.mapping(module or "[unknown]"), address=address
            )
            if fn is not None:
                loc.lines.add(function_index=fn, line=line)
            loc.attribute_indices.append(self.attribute("profile.frame.type", frame_type))

        return self._intern(("loc", frame_type, module, address, fn, line), d.location_table, make)

    def stack(self, locations: list[int]) -> int:
        d = self.req.dictionary

        def make() -> None:
            d.stack_table.add(location_indices=locations)

        return self._intern(("stack", tuple(locations)), d.stack_table, make)


def frame_location(
    b: Builder, name: str, kind: int, file: str, line: int, module: str, i: int
) -> int | None:
    """A recorded frame as the profiler would send it (None: a synthetic frame it has not)."""
    kind = FrameKind(kind)
    if kind in (FrameKind.LABEL, FrameKind.DELIMITER):
        return None
    if kind == FrameKind.PYTHON:
        fn = b.function(_LINE.sub("", name), file)
        return b.location("cpython", "", 0, fn, line)
    if kind == FrameKind.KERNEL:
        return b.location("kernel", "vmlinux", 0, b.function(name, ""), 0)
    # native code: every third frame unsymbolized (its address in its mapping), as the
    # profiler sends native frames it does not symbolize
    address = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little")
    if i % 3 == 0:
        return b.location("native", module or "[anon]", address, None, 0)
    return b.location("native", module or "[anon]", address, b.function(name, file), line)


def export(
    processes: list[Process],
    time_ns: int,
    profile_ids: bool = True,
    seed: int = 0,
) -> svc.ExportProfilesServiceRequest:
    """The recording's samples split among ``processes`` (sample i to process i mod n), one
    timestamp per sampled event (the recording's counts), as one export."""
    p = recording()
    fr = p.frames
    S = fr.strings
    b = Builder()
    loc_of: dict[int, int | None] = {}
    for f in range(len(fr)):
        loc_of[f] = frame_location(
            b, S[fr.name[f]], fr.kind[f], S[fr.file[f]], fr.line[f], S[fr.module[f]], f
        )
    stacks = p.stacks
    per_process: list[list[tuple[int, int]]] = [[] for _ in processes]
    counts = p.values[:, p.type_index(None)].astype(int)
    for i, (sid, count) in enumerate(zip(p.sample_stack.tolist(), counts.tolist(), strict=True)):
        frames = stacks.frames_of(sid) if sid >= 0 else []
        locs = [loc_of[f] for f in reversed(frames)]  # leaf first
        stack = b.stack([x for x in locs if x is not None])
        per_process[(i + seed) % len(processes)].append((stack, count))
    for n, (proc, samples) in enumerate(zip(processes, per_process, strict=True)):
        rp = b.req.resource_profiles.add(schema_url="https://opentelemetry.io/schemas/1.37.0")
        attrs = rp.resource.attributes
        attrs.add(key="process.pid", value=common_pb2.AnyValue(int_value=proc.pid))
        attrs.add(key="process.executable.path", value=common_pb2.AnyValue(string_value=proc.exe))
        attrs.add(
            key="process.executable.name",
            value=common_pb2.AnyValue(string_value=proc.exe.rsplit("/", 1)[-1]),
        )
        if proc.container:
            attrs.add(key="container.id", value=common_pb2.AnyValue(string_value=proc.container))
        if proc.service:
            attrs.add(key="service.name", value=common_pb2.AnyValue(string_value=proc.service))
        for k, v in proc.extra:
            attrs.add(key=k, value=common_pb2.AnyValue(string_value=v))
        sp = rp.scope_profiles.add()
        sp.scope.name, sp.scope.version = SCOPE
        prof = sp.profiles.add(
            time_unix_nano=time_ns,
            duration_nano=10_000_000_000,
            period=PERIOD,
        )
        prof.sample_type.type_strindex = b.string("samples")
        prof.sample_type.unit_strindex = b.string("count")
        prof.period_type.type_strindex = b.string("cpu")
        prof.period_type.unit_strindex = b.string("nanoseconds")
        if profile_ids:
            prof.profile_id = hashlib.blake2b(
                f"{proc.pid}-{time_ns}-{seed}".encode(), digest_size=16
            ).digest()
        for j, (stack, count) in enumerate(samples):
            s = prof.samples.add(stack_index=stack)
            s.timestamps_unix_nano.extend(time_ns + (j * 7 + k) * PERIOD for k in range(count))
            s.attribute_indices.extend(
                [
                    b.attribute("thread.name", "python3"),
                    b.attribute("thread.id", proc.pid + n),
                    b.attribute("cpu.logical_number", j % 2),
                ]
            )
    return b.req


def total_events(req: svc.ExportProfilesServiceRequest) -> int:
    return sum(
        len(s.timestamps_unix_nano) if not s.values else sum(s.values)
        for rp in req.resource_profiles
        for sp in rp.scope_profiles
        for p in sp.profiles
        for s in p.samples
    )


def otlp_json(req: svc.ExportProfilesServiceRequest) -> bytes:
    """The request in OTLP/JSON: camelCase names, ids as hex strings (not base64)."""
    doc = json_format.MessageToDict(req)

    def hexify(node):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("profileId", "traceId", "spanId") and isinstance(v, str):
                    node[k] = base64.b64decode(v).hex()
                else:
                    hexify(v)
        elif isinstance(node, list):
            for v in node:
                hexify(v)
        return node

    return json.dumps(hexify(doc)).encode()
