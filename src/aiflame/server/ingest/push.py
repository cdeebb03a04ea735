"""Pyroscope's push API (``push.v1.PusherService/Push``) -> profile items for the writer.

Each ``RawProfileSeries`` names its labels (``__name__``, ``service_name``, ...) and carries
``RawSample``s: a pprof (gzipped or not) and the profile's ``ID``, its idempotency key (a
sample without one is keyed by a hash of its labels and bytes, so a retried push is still
stored once). The whole request is decoded before anything is queued: a bad profile
anywhere makes the request a 400 and nothing of it is stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.server.bodies import GZIP_MAGIC, gunzip
from aiflame.server.errors import BadRequest
from aiflame.server.ingest import pprof_columns
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.profiles import ProfileItem, profile_item
from aiflame.server.labels import check_labels

DELTA_LABEL = "__delta__"


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 32 << 20
    max_profile_bytes: int = 256 << 20  # one pprof, inflated
    max_labels: int = 64
    max_series_per_push: int = 1024
    max_samples_per_profile: int = 2_000_000
    max_trace_bytes: int = 512 << 20
    max_telemetry_bytes: int = 8 << 20


def content_key(labels: dict[str, str], raw: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for k in sorted(labels):
        h.update(f"{k}\x00{labels[k]}\x01".encode())
    h.update(raw)
    return "content-" + h.hexdigest()


def decode_pprof(raw: bytes, limits: Limits) -> pprof_columns.PprofColumns:
    data = gunzip(raw, limits.max_profile_bytes, "a profile") if raw[:2] == GZIP_MAGIC else raw
    if len(data) > limits.max_profile_bytes:
        raise BadRequest(f"a profile is larger than {limits.max_profile_bytes:,} bytes")
    cols = pprof_columns.decode(data)
    if cols.num_samples > limits.max_samples_per_profile:
        raise BadRequest(
            f"a profile has {cols.num_samples:,} samples; at most "
            f"{limits.max_samples_per_profile:,} are accepted"
        )
    return cols


def push_items(
    request: push_pb2.PushRequest,
    *,
    tenant: str,
    received_ms: int,
    limits: Limits,
    strings: StringHashes,
    min_time_ms: int,
) -> list[ProfileItem]:
    if len(request.series) > limits.max_series_per_push:
        raise BadRequest(
            f"{len(request.series)} series in one push; at most {limits.max_series_per_push}"
        )
    items: list[ProfileItem] = []
    for series in request.series:
        labels = check_labels([(lb.name, lb.value) for lb in series.labels], limits.max_labels)
        # Pyroscope's __delta__ says whether the server must subtract the previous
        # cumulative profile; profiles here are stored as pushed, so it names no series.
        labels.pop(DELTA_LABEL, None)
        for sample in series.samples:
            raw = sample.raw_profile
            if not raw:
                raise BadRequest("a RawSample without raw_profile")
            cols = decode_pprof(raw, limits)
            item = profile_item(
                cols,
                labels,
                tenant=tenant,
                profile_id=sample.ID or content_key(labels, raw),
                received_ms=received_ms,
                pprof_bytes=len(raw),
                strings=strings,
            )
            check_time(item, min_time_ms, received_ms)
            items.append(item)
    return items


def check_time(item: ProfileItem, min_time_ms: int, received_ms: int) -> None:
    """Refuse what the retention would drop at once (or a clock far in the future)."""
    if item.time_ms < min_time_ms:
        raise BadRequest(
            f"profile {item.profile_id}: its time is older than the retention of profiles"
        )
    if item.time_ms > received_ms + 3_600_000:
        raise BadRequest(f"profile {item.profile_id}: its time is more than 1 h in the future")
