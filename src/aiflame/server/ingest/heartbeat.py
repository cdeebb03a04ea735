"""``POST /api/v1/agents/heartbeat``: an agent's state, checked against a typed schema.

Every field is bounded by its column (``spool_bytes`` UInt64, ``sampling_rate_hz`` a finite
Float32, ``started`` a time the store holds), so a heartbeat that is answered is one that
``GET /api/v1/agents`` can show again: ``sampling_rate_hz: 1e308`` is a 400 naming the field.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import msgspec
import pyarrow as pa

from aiflame.server import validate
from aiflame.server.ingest.telemetry import GpuIndex, Text

_MS = pa.timestamp("ms", tz="UTC")
MAX_BODY = 1 << 20


class HeartbeatGpu(msgspec.Struct, forbid_unknown_fields=False):
    index: GpuIndex = 0
    uuid: Text = ""
    name: Text = ""


class Heartbeat(msgspec.Struct, forbid_unknown_fields=False):
    host: Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
    agent_version: Annotated[str, msgspec.Meta(max_length=64)] = ""
    started: Annotated[float, msgspec.Meta(ge=0.0, le=validate.MAX_TIME_MS / 1000)] | None = None
    gpus: Annotated[list[HeartbeatGpu], msgspec.Meta(max_length=1024)] = []
    spool_bytes: Annotated[int, msgspec.Meta(ge=0, le=validate.INT64_MAX)] | None = None
    sampling_rate_hz: Annotated[float, msgspec.Meta(ge=0.0, le=1e6)] | None = None


_DECODER = msgspec.json.Decoder(Heartbeat)


def parse(body: bytes) -> Heartbeat:
    hb: Heartbeat = validate.decode_json(_DECODER, body or b"{}", "heartbeat")
    return hb


def agent_row(hb: Heartbeat, tenant: str, now_ms: int | None = None) -> dict[str, object]:
    """The ``agents`` row of a heartbeat (its last sighting: now)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    started_ms = int(hb.started * 1000) if hb.started is not None else now_ms
    gpus = [{"index": g.index, "uuid": g.uuid, "name": g.name} for g in hb.gpus]
    return {
        "tenant": [tenant],
        "host": [hb.host],
        "agent_version": [hb.agent_version],
        "started": pa.array([min(started_ms, now_ms)], _MS),
        "last_seen": pa.array([now_ms], _MS),
        "gpus": [json.dumps(gpus)],
        "spool_bytes": pa.array([hb.spool_bytes or 0], pa.uint64()),
        "sampling_rate_hz": pa.array([hb.sampling_rate_hz or 0.0], pa.float32()),
    }
