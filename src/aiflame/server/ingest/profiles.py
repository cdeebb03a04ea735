"""One pushed pprof profile -> the rows the store keeps: samples, stacks, frames, series.

A sample becomes one row per sample type with a non-zero value: (series, profile type,
stack id, value), where the stack id names the sequence of frames root first (pprof's
inlined lines expanded, callers first) and the frame id names (function name, system name,
file, line, module). Stacks and frames are written once per store (the writer skips those
already known). String labels of pprof samples make series of their own, as in Pyroscope:
a profile with samples labelled ``span_name=a`` and ``span_name=b`` is two series. The labels
that name one sample's span or trace (``span_id``, ``profile_id`` which Pyroscope reads as a
span id, ``trace_id``) make no series: a sample's span id (16 hex digits, as the Pyroscope
SDKs' OpenTelemetry integrations write it) is kept beside its values, as Pyroscope keeps it,
for span profiles and span heatmaps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from aiflame.model import FrameKind
from aiflame.proto import conventions as conv
from aiflame.server.errors import BadRequest
from aiflame.server.ingest import hashing
from aiflame.server.ingest.pprof_columns import PprofColumns
from aiflame.server.labels import NAME_LABEL, SERVICE_LABEL, check_labels, series_id
from aiflame.symbolize.kinds import KindGuesser

MAX_SAMPLE_LABEL_SETS = 256  # beyond this, a profile's sample labels are not made series
SPAN_LABELS = ("span_id", "profile_id")  # Pyroscope renames profile_id to span_id
PER_SAMPLE_LABELS = (*SPAN_LABELS, "trace_id")  # one sample's, never a series label
_KERNEL_MODULES = ("[kernel.kallsyms]", "[kernel]", "[vmlinux]")
_guess = KindGuesser()


@dataclass
class ProfileItem:
    """A pushed profile, decoded and hashed, ready for the writer."""

    tenant: str
    profile_id: str
    name: str
    time_ms: int
    duration_ns: int
    period: int
    pprof_bytes: int
    series_labels: list[dict[str, str]]  # index 0: the pushed series; then sample label sets
    series_ids: list[int]
    type_ids: list[str]  # one profile type id per sample type column
    # rows
    row_series: np.ndarray  # index into series_ids
    row_type: np.ndarray  # index into type_ids
    row_stack: np.ndarray
    row_value: np.ndarray
    # distinct stacks of this profile, frames root first
    stack_ids: np.ndarray
    stack_frames: np.ndarray
    stack_lengths: np.ndarray
    # every frame this profile refers to (sorted), and the string indices that describe it
    frame_ids: np.ndarray
    frame_src: np.ndarray  # (n, 5): name, system name, file, module (strings), line
    strings: list[str]
    samples: int = 0
    totals: list[int] = field(default_factory=list)
    # the samples that name a span: (series, type, stack, span id, value) rows
    spans: SpanRows | None = None
    # where its frames come from (the same object for every push of one dictionary)
    dictionary: Dictionary | None = field(default=None, compare=False, repr=False)

    def frame_rows(self, wanted: np.ndarray) -> list[tuple[int, str, int, str, int, str]]:
        """(frame_id, name, kind, file, line, module) of the frames in ``wanted``."""
        src = self.frame_src[np.searchsorted(self.frame_ids, wanted)].tolist()
        S = self.strings
        out = []
        for fid, (name, system_name, file, module, line) in zip(wanted.tolist(), src, strict=True):
            n, f, m = S[name], S[file], S[module]
            out.append((fid, n, int(_kind(n, S[system_name], f, m)), f, line, m))
        return out


@dataclass
class SpanRows:
    """Values of the samples that carry a span id, summed per (series, stack, span)."""

    row_series: np.ndarray
    row_type: np.ndarray
    row_stack: np.ndarray
    row_span: np.ndarray  # uint64: the span id's 8 bytes, little-endian (as Pyroscope)
    row_value: np.ndarray


def span_id_value(text: str) -> int:
    """A span id of 16 hex digits as Pyroscope stores it (its bytes read little-endian),
    0 for anything else (no span)."""
    if len(text) != 16:
        return 0
    try:
        return int.from_bytes(bytes.fromhex(text), "little")
    except ValueError:
        return 0


def span_id_text(value: int) -> str:
    """The inverse of :func:`span_id_value`."""
    return int(value).to_bytes(8, "little").hex() if value else ""


def _kind(name: str, system_name: str, file: str, module: str) -> FrameKind:
    kind = conv.kind_from_system_name(name, system_name)
    if kind is not None:
        return kind
    if module in _KERNEL_MODULES:
        return FrameKind.KERNEL
    if file.endswith(".py"):
        return FrameKind.PYTHON
    return _guess(name) if name else FrameKind.NATIVE


def _positions(ids: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Index of each of ``wanted`` in ``ids`` (BadRequest if one is missing)."""
    order = np.argsort(ids, kind="stable")
    return _sorted_positions(ids[order], order, wanted, what)


def _sorted_positions(
    sorted_ids: np.ndarray, order: np.ndarray, wanted: np.ndarray, what: str
) -> np.ndarray:
    pos = np.searchsorted(sorted_ids, wanted)
    pos = np.minimum(pos, max(sorted_ids.size - 1, 0))
    if wanted.size and (sorted_ids.size == 0 or np.any(sorted_ids[pos] != wanted)):
        missing = wanted[(sorted_ids.size == 0) | (sorted_ids[pos] != wanted)][0]
        raise BadRequest(f"invalid pprof data: reference to missing {what} {int(missing)}")
    return order[pos]


def _ragged_take(
    values: np.ndarray, offsets: np.ndarray, counts: np.ndarray, picks: np.ndarray
) -> np.ndarray:
    """Concatenate ``values[offsets[i]:offsets[i]+counts[i]]`` for each i in ``picks``."""
    c = counts[picks]
    total = int(c.sum())
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(c) - c, c)
    return values[np.repeat(offsets[picks], c) + within]


def _reverse_segments(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(flat.size, dtype=np.int64) - np.repeat(starts, lengths)
    return flat[np.repeat(starts + lengths - 1, lengths) - pos]


@dataclass
class Dictionary:
    """What a profile's functions, locations and mappings make: the frames of every location
    (innermost first, as pprof lists inlined lines), and every frame's strings. It depends on
    nothing else, so a profile whose dictionary was seen before reuses it."""

    strings: list[str]  # the profile's string table, then names made for bare addresses
    loc_ids: np.ndarray  # sorted location ids, and where each one is in the arrays below
    loc_order: np.ndarray
    loc_frames: np.ndarray  # frames of the locations, flattened
    loc_off: np.ndarray
    per_loc: np.ndarray
    frame_ids: np.ndarray  # sorted (for the frames table)
    frame_src: np.ndarray  # (n, 5) string indices and line, as ProfileItem.frame_src
    # Index by location id, where the ids are small numbers (as pprof writers number them):
    # one array lookup per sample location instead of a binary search; -1 for no location.
    loc_dense: np.ndarray | None = None
    # When the writer last found every frame of it stored (time.time()): the frames of a
    # dictionary pushed every period are looked up once a day, not every period.
    frames_stored_at: float = float("-inf")

    def location_positions(self, wanted: np.ndarray) -> np.ndarray:
        """Index of each location id in ``wanted`` (BadRequest if one is missing)."""
        dense = self.loc_dense
        if dense is not None and wanted.size and int(wanted.max()) < dense.size:
            pos = dense[wanted]
            if int(pos.min()) >= 0:
                return pos
        return _sorted_positions(self.loc_ids, self.loc_order, wanted, "location")


def dictionary(cols: PprofColumns, strings: hashing.StringHashes) -> Dictionary:
    """The frames of a profile's locations (BadRequest for a dangling reference)."""
    S = cols.strings
    h = strings.of(S)
    fn_pos = _positions(cols.fn_id, cols.line_function, "function")
    nl = cols.loc_id.size
    loc_of_line = np.repeat(np.arange(nl), cols.loc_nlines)
    map_pos = np.full(nl, -1, dtype=np.int64)
    mapped = cols.loc_mapping != 0
    map_pos[mapped] = _positions(cols.map_id, cols.loc_mapping[mapped], "mapping")
    loc_module = np.zeros(nl, dtype=np.int64)
    loc_module[mapped] = cols.map_filename[map_pos[mapped]]
    line_module = loc_module[loc_of_line]
    line_frames = hashing.frame_ids(
        h[cols.fn_name[fn_pos]],
        h[cols.fn_system_name[fn_pos]],
        h[cols.fn_filename[fn_pos]],
        h[line_module],
        cols.line_line,
    )
    src = np.stack(
        (
            cols.fn_name[fn_pos],
            cols.fn_system_name[fn_pos],
            cols.fn_filename[fn_pos],
            line_module,
            cols.line_line,
        ),
        axis=1,
    )
    per_loc = np.maximum(cols.loc_nlines, 1)
    loc_off = np.cumsum(per_loc) - per_loc
    loc_frames = np.empty(int(per_loc.sum()), dtype=np.uint64)
    nlines = cols.loc_nlines
    within = np.arange(loc_of_line.size) - np.repeat(np.cumsum(nlines) - nlines, nlines)
    loc_frames[loc_off[loc_of_line] + within] = line_frames
    bare = np.flatnonzero(cols.loc_nlines == 0)
    if bare.size:  # no symbols: the address is all there is
        names = [f"0x{int(a):x}" for a in cols.loc_address[bare].tolist()]
        zero = np.zeros(bare.size, dtype=np.uint64)
        loc_frames[loc_off[bare]] = hashing.frame_ids(
            strings.of(names), zero, zero, h[loc_module[bare]], zero.astype(np.int64)
        )
        ext = np.arange(len(S), len(S) + bare.size, dtype=np.int64)
        S = [*S, *names]
        z = np.zeros(bare.size, dtype=np.int64)
        src = np.concatenate((src, np.stack((ext, z, z, loc_module[bare], z), axis=1)))
        line_frames = np.concatenate((line_frames, loc_frames[loc_off[bare]]))
    loc_order = np.argsort(cols.loc_id, kind="stable")
    frame_order = np.argsort(line_frames, kind="stable")
    loc_dense = None
    if nl and int(cols.loc_id.max()) < 4 * nl + 1024:
        loc_dense = np.full(int(cols.loc_id.max()) + 1, -1, dtype=np.int64)
        loc_dense[cols.loc_id[::-1]] = np.arange(nl - 1, -1, -1)  # the first of equal ids
    return Dictionary(
        strings=S,
        loc_ids=cols.loc_id[loc_order],
        loc_order=loc_order,
        loc_frames=loc_frames,
        loc_off=loc_off,
        per_loc=per_loc,
        frame_ids=line_frames[frame_order],
        frame_src=src[frame_order],
        loc_dense=loc_dense,
    )


def profile_item(
    cols: PprofColumns,
    labels: dict[str, str],
    *,
    tenant: str,
    profile_id: str,
    received_ms: int,
    pprof_bytes: int,
    strings: hashing.StringHashes,
    known: Dictionary | None = None,
) -> ProfileItem:
    """The rows of one profile. ``known``: its dictionary, when it was decoded before (then
    ``cols`` holds only the samples)."""
    name = labels.get(NAME_LABEL, "")
    if not name:
        raise BadRequest("a profile series needs a __name__ label (e.g. process_cpu)")
    labels = dict(labels)
    labels.setdefault(SERVICE_LABEL, "unknown_service")
    S = cols.strings
    type_ids = [
        f"{name}:{S[t]}:{S[u]}:{S[cols.period_type[0]]}:{S[cols.period_type[1]]}"
        for t, u in cols.sample_types
    ]
    if len(set(type_ids)) != len(type_ids):
        raise BadRequest("invalid pprof data: the same sample type twice")
    d = known if known is not None else dictionary(cols, strings)
    # Stacks: each sample's locations (leaf first) expanded to frames, then root first.
    n = cols.num_samples
    if n and float(np.abs(cols.values, dtype=np.float64).sum(axis=0).max()) >= 2.0**63:
        # Summed per stack and series as 64-bit integers: a sum that does not fit is refused
        # here rather than stored wrapped around.
        raise BadRequest("invalid pprof data: its values sum to more than a 64-bit integer")
    loc_pos = d.location_positions(cols.sample_locs)
    leaf_first = _ragged_take(d.loc_frames, d.loc_off, d.per_loc, loc_pos)
    lengths = np.zeros(n, dtype=np.int64)
    if n and loc_pos.size:
        starts = np.cumsum(cols.sample_nlocs) - cols.sample_nlocs
        has = cols.sample_nlocs > 0
        lengths[has] = np.add.reduceat(d.per_loc[loc_pos], starts[has])
    root_first = _reverse_segments(leaf_first, lengths)
    sample_stack = hashing.sequence_ids(root_first, lengths)
    # Series: the pushed one, and one per distinct set of sample labels.
    per_sample = _per_sample_label_rows(cols)
    series_labels, label_set = _label_sets(cols, labels, n, ~per_sample)
    # Rows: values summed per (series, stack), one row per non-zero value per type.
    order = np.lexsort((label_set, sample_stack))
    st, ls = sample_stack[order], label_set[order]
    first = np.ones(n, dtype=bool)
    if n:
        first[1:] = (st[1:] != st[:-1]) | (ls[1:] != ls[:-1])
    starts = np.flatnonzero(first)
    ntypes = len(type_ids)
    sums = (
        np.add.reduceat(cols.values[order], starts, axis=0)
        if n
        else np.zeros((0, ntypes), dtype=np.int64)
    )
    nz_row, nz_type = np.nonzero(sums)
    # Distinct stacks with their frames, for the stacks table.
    uniq, first_sample = np.unique(sample_stack, return_index=True)
    offs = np.cumsum(lengths) - lengths
    return ProfileItem(
        tenant=tenant,
        profile_id=profile_id,
        name=name,
        time_ms=cols.time_nanos // 1_000_000 if cols.time_nanos > 0 else received_ms,
        duration_ns=max(cols.duration_nanos, 0),
        period=cols.period,
        pprof_bytes=pprof_bytes,
        series_labels=series_labels,
        series_ids=[series_id(lb) for lb in series_labels],
        type_ids=type_ids,
        row_series=ls[starts][nz_row].astype(np.int32),
        row_type=nz_type.astype(np.int16),
        row_stack=st[starts][nz_row],
        row_value=sums[nz_row, nz_type].astype(np.int64),
        stack_ids=uniq,
        stack_frames=_ragged_take(root_first, offs, lengths, first_sample),
        stack_lengths=lengths[first_sample],
        frame_ids=d.frame_ids,
        frame_src=d.frame_src,
        strings=d.strings,
        samples=n,
        totals=[int(x) for x in cols.values.sum(axis=0).tolist()] if n else [0] * ntypes,
        spans=_span_rows(cols, per_sample, sample_stack, label_set) if per_sample.any() else None,
        dictionary=d,
    )


def _per_sample_label_rows(cols: PprofColumns) -> np.ndarray:
    """Which string labels of the samples name a span or a trace (no series of their own)."""
    if cols.label_key.size == 0:
        return np.zeros(0, dtype=bool)
    S = cols.strings
    keys = np.unique(cols.label_key)
    names = [k for k in keys.tolist() if 0 <= k < len(S) and S[k] in PER_SAMPLE_LABELS]
    return np.isin(cols.label_key, names)


def _span_rows(
    cols: PprofColumns, per_sample: np.ndarray, stack: np.ndarray, label_set: np.ndarray
) -> SpanRows | None:
    S = cols.strings
    span = np.zeros(cols.num_samples, dtype=np.uint64)
    # span_id first, so that it wins over a profile_id of the same sample
    for name in reversed(SPAN_LABELS):
        rows = np.flatnonzero(per_sample)
        rows = rows[[S[k] == name for k in cols.label_key[rows].tolist()]]
        values = cols.label_str[rows].tolist()
        span[cols.label_sample[rows]] = [span_id_value(S[v]) for v in values]
    has = np.flatnonzero(span)
    if has.size == 0:
        return None
    sp, st, ls = span[has], stack[has], label_set[has]
    order = np.lexsort((sp, st, ls))
    sp, st, ls = sp[order], st[order], ls[order]
    first = np.ones(has.size, dtype=bool)
    first[1:] = (sp[1:] != sp[:-1]) | (st[1:] != st[:-1]) | (ls[1:] != ls[:-1])
    starts = np.flatnonzero(first)
    sums = np.add.reduceat(cols.values[has][order], starts, axis=0)
    nz_row, nz_type = np.nonzero(sums)
    return SpanRows(
        row_series=ls[starts][nz_row].astype(np.int32),
        row_type=nz_type.astype(np.int16),
        row_stack=st[starts][nz_row],
        row_span=sp[starts][nz_row],
        row_value=sums[nz_row, nz_type].astype(np.int64),
    )


def _label_sets(
    cols: PprofColumns, labels: dict[str, str], n: int, series_rows: np.ndarray
) -> tuple[list[dict[str, str]], np.ndarray]:
    """The series of a profile and each sample's: the labels of the samples (those of
    ``series_rows``) added to the pushed ones."""
    label_set = np.zeros(n, dtype=np.int64)
    series = [check_labels(list(labels.items()))]
    if not series_rows.any():
        return series, label_set
    S = cols.strings
    rows = np.flatnonzero(series_rows)
    order = rows[np.argsort(cols.label_sample[rows], kind="stable")]
    samples = cols.label_sample[order]
    keys, vals = cols.label_key[order].tolist(), cols.label_str[order].tolist()
    cuts = np.flatnonzero(np.diff(samples)) + 1
    bounds = [0, *cuts.tolist(), samples.size]
    index: dict[tuple[tuple[int, int], ...], int] = {}
    for a, b in itertools.pairwise(bounds):
        key = tuple(sorted(zip(keys[a:b], vals[a:b], strict=True)))
        i = index.get(key)
        if i is None:
            i = index[key] = len(index) + 1
            if i > MAX_SAMPLE_LABEL_SETS:
                return series[:1], np.zeros(n, dtype=np.int64)
        label_set[int(samples[a])] = i
    for key in index:
        merged = dict(labels)
        merged.update((S[k], S[v]) for k, v in key)
        series.append(check_labels(list(merged.items())))
    return series, label_set
