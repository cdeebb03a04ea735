"""Pyroscope's push API (``push.v1.PusherService/Push``) -> profile items for the writer.

Each ``RawProfileSeries`` names its labels (``__name__``, ``service_name``, ...) and carries
``RawSample``s: a pprof (gzipped or not) and the profile's ``ID``, its idempotency key: a
retried push with the same ID is stored once. A sample without an ID is named by the request
it came in (``request_key``, made when it was received and kept in the write-ahead log), so
two clients sending the same bytes are two profiles, as in Pyroscope, while the replay of
the log after a crash stores it once. The whole request is decoded before anything is
queued: a bad profile anywhere makes the request a 400 and nothing of it is stored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from aiflame.proto.pyroscope.push.v1 import push_pb2
from aiflame.server.bodies import GZIP_MAGIC, gunzip
from aiflame.server.errors import BadRequest
from aiflame.server.ingest import pprof_columns
from aiflame.server.ingest.dictionaries import DictionaryCache
from aiflame.server.ingest.hashing import StringHashes
from aiflame.server.ingest.profiles import Dictionary, ProfileItem, profile_item
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


MAX_ID_BYTES = 256


def client_key(key: str, what: str = "ID") -> str:
    """A client's idempotency key, checked: at most 256 bytes of printable text."""
    if len(key.encode()) > MAX_ID_BYTES or not key.isprintable():
        raise BadRequest(f"invalid {what}: at most {MAX_ID_BYTES} bytes of printable text")
    return key


def content_key(labels: dict[str, str], raw: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for k in sorted(labels):
        h.update(f"{k}\x00{labels[k]}\x01".encode())
    h.update(raw)
    return "content-" + h.hexdigest()


def decode_pprof(
    raw: bytes,
    limits: Limits,
    strings: StringHashes,
    dictionaries: DictionaryCache | None = None,
) -> tuple[pprof_columns.PprofColumns, Dictionary | None]:
    """The columns of a pprof (gzipped or not), and its dictionary when ``dictionaries``
    knew it (then the columns hold the samples only)."""
    data = gunzip(raw, limits.max_profile_bytes, "a profile") if raw[:2] == GZIP_MAGIC else raw
    if len(data) > limits.max_profile_bytes:
        raise BadRequest(f"a profile is larger than {limits.max_profile_bytes:,} bytes")
    if dictionaries is None:
        cols, known = pprof_columns.decode(data), None
    else:
        cols, known = dictionaries.decode(data, strings)
    if cols.num_samples > limits.max_samples_per_profile:
        raise BadRequest(
            f"a profile has {cols.num_samples:,} samples; at most "
            f"{limits.max_samples_per_profile:,} are accepted"
        )
    return cols, known


def push_items(
    request: push_pb2.PushRequest,
    *,
    tenant: str,
    received_ms: int,
    limits: Limits,
    strings: StringHashes,
    min_time_ms: int,
    dictionaries: DictionaryCache | None = None,
    request_key: str | None = None,
) -> list[ProfileItem]:
    if len(request.series) > limits.max_series_per_push:
        raise BadRequest(
            f"{len(request.series)} series in one push; at most {limits.max_series_per_push}"
        )
    items: list[ProfileItem] = []
    for si, series in enumerate(request.series):
        labels = check_labels([(lb.name, lb.value) for lb in series.labels], limits.max_labels)
        # Pyroscope's __delta__ says whether the server must subtract the previous
        # cumulative profile; profiles here are stored as pushed, so it names no series.
        labels.pop(DELTA_LABEL, None)
        for ri, sample in enumerate(series.samples):
            raw = sample.raw_profile
            if not raw:
                raise BadRequest("a RawSample without raw_profile")
            if sample.ID:
                profile_id = client_key(sample.ID)
            elif request_key:
                profile_id = f"{request_key}-{si}-{ri}"
            else:  # a record logged by an older version: named by its content, as it was
                profile_id = content_key(labels, raw)
            cols, known = decode_pprof(raw, limits, strings, dictionaries)
            item = profile_item(
                cols,
                labels,
                tenant=tenant,
                profile_id=profile_id,
                received_ms=received_ms,
                pprof_bytes=len(raw),
                strings=strings,
                known=known,
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
