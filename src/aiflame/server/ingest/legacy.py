"""Pyroscope's older ingest API: ``POST /ingest?name=APP.SUFFIX{k=v,...}&format=...``.

``format=pprof`` (the body, or the ``profile`` part of a multipart form as the old Go SDK
sends it), ``folded`` (``a;b;c 42`` lines) or ``lines`` (one stack per line, each counted
once). The suffix names the profile: ``cpu`` is ``process_cpu`` with ``samples/count`` and
``cpu/nanoseconds`` (samples x 1e9 / sampleRate, as Pyroscope converts them), the memory
suffixes (``alloc_objects``, ``inuse_space``...) are ``memory``, anything else its own name.
"""

from __future__ import annotations

import email.parser
import email.policy
import re

import numpy as np

from aiflame.server.errors import BadRequest
from aiflame.server.ingest.pprof_columns import PprofColumns
from aiflame.server.labels import NAME_LABEL, SERVICE_LABEL, check_labels

FORMATS = ("pprof", "folded", "lines")
_MEMORY = {
    "alloc_objects": "count",
    "alloc_space": "bytes",
    "inuse_objects": "count",
    "inuse_space": "bytes",
}
_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.]*\Z")
MAX_COUNT = 2**63 - 1  # the store's Int64 values


def parse_name(name: str, max_labels: int) -> tuple[str, str, dict[str, str]]:
    """``app.cpu{k=v}`` -> (app, suffix, labels)."""
    if not name:
        raise BadRequest("the name parameter is required (e.g. name=myapp.cpu{env=prod})")
    head, brace, tail = name.partition("{")
    pairs: list[tuple[str, str]] = []
    if brace:
        if not tail.endswith("}"):
            raise BadRequest(f"invalid name {name[:200]!r}: labels must end with '}}'")
        body = tail[:-1].strip()
        for part in body.split(",") if body else []:
            k, eq, v = part.partition("=")
            k = k.strip()
            if not eq or not _KEY.match(k):
                raise BadRequest(f"invalid label {part[:100]!r} in name")
            pairs.append((k, v.strip()))
    app, dot, suffix = head.strip().rpartition(".")
    if not dot:
        app, suffix = head.strip(), "cpu"
    if not app:
        raise BadRequest(f"invalid name {name[:200]!r}: no application name")
    labels = check_labels(pairs, max_labels)
    labels[SERVICE_LABEL] = app
    return app, suffix, labels


def profile_name(suffix: str) -> str:
    if suffix in ("cpu", "itimer"):
        return "process_cpu"
    if suffix in _MEMORY:
        return "memory"
    return suffix


def multipart_profile(body: bytes, content_type: str) -> bytes:
    """The ``profile`` part of a multipart/form-data body."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not msg.is_multipart():
        raise BadRequest("a multipart body without parts")
    for part in msg.iter_parts():
        if part.get_param("name", header="content-disposition") == "profile":
            payload = part.get_payload(decode=True)
            return payload if isinstance(payload, bytes) else b""
    raise BadRequest("the multipart body has no 'profile' part")


def folded_columns(
    text: bytes, fmt: str, suffix: str, sample_rate: float, start_ns: int, end_ns: int
) -> PprofColumns:
    """Folded (or ``lines``) stacks as the columns a pprof would give."""
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise BadRequest("folded input is not UTF-8 text") from None
    names: dict[str, int] = {"": 0}
    stacks: list[list[int]] = []
    counts: list[int] = []
    for n, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        if fmt == "lines":
            stack, count = line, 1
        else:
            stack, _, num = line.rpartition(" ")
            try:
                count = int(num)
            except ValueError:
                raise BadRequest(f"folded line {n}: no sample count at its end") from None
            if not 0 <= count <= MAX_COUNT:
                raise BadRequest(f"folded line {n}: the count is out of range (0 to {MAX_COUNT})")
        frames = [names.setdefault(f, len(names)) for f in stack.split(";") if f]
        if not frames:
            raise BadRequest(f"{fmt} line {n}: an empty stack")
        stacks.append(frames)
        counts.append(count)
    strings = list(names)
    nf = len(strings) - 1
    fn_ids = np.arange(1, nf + 1, dtype=np.uint64)
    cpu = suffix in ("cpu", "itimer")
    period = int(1e9 / sample_rate) if cpu and sample_rate > 0 else 0
    if period and counts and max(counts) > MAX_COUNT // period:
        raise BadRequest("a count times the sampling period is more than a 64-bit integer holds")

    def string(text: str) -> int:
        if text not in names:
            names[text] = len(names)
            strings.append(text)
        return names[text]

    if cpu:
        cpu_ns = (string("cpu"), string("nanoseconds"))
        sample_types = [(string("samples"), string("count")), cpu_ns]
        period_type = cpu_ns
        values = np.array([[c, c * period] for c in counts], dtype=np.int64).reshape(-1, 2)
    else:
        sample_types = [(string(suffix), string(_MEMORY.get(suffix, "count")))]
        period_type = (0, 0)
        values = np.array(counts, dtype=np.int64).reshape(-1, 1)
    flat = [f for s in stacks for f in reversed(s)]  # leaf first, as pprof's location ids
    z = np.zeros(0, dtype=np.int64)
    return PprofColumns(
        strings=strings,
        sample_types=sample_types,
        period_type=period_type,
        period=period,
        time_nanos=start_ns,
        duration_nanos=max(0, end_ns - start_ns),
        fn_id=fn_ids,
        fn_name=np.arange(1, nf + 1, dtype=np.int64),
        fn_system_name=np.zeros(nf, dtype=np.int64),
        fn_filename=np.zeros(nf, dtype=np.int64),
        map_id=z.astype(np.uint64),
        map_filename=z,
        loc_id=fn_ids,
        loc_mapping=np.zeros(nf, dtype=np.uint64),
        loc_address=np.zeros(nf, dtype=np.uint64),
        loc_nlines=np.ones(nf, dtype=np.int64),
        line_function=fn_ids,
        line_line=np.zeros(nf, dtype=np.int64),
        sample_nlocs=np.array([len(s) for s in stacks], dtype=np.int64),
        sample_locs=np.array(flat, dtype=np.uint64),
        values=values,
        label_sample=z,
        label_key=z,
        label_str=z,
    )


def name_labels(app_labels: dict[str, str], suffix: str) -> dict[str, str]:
    labels = dict(app_labels)
    labels[NAME_LABEL] = profile_name(suffix)
    return labels
