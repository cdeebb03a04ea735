"""pprof output: gzipped ``profile.proto`` for ``go tool pprof``, Pyroscope, Grafana, Parca.

All sample types are written; samples with the same stack and labels are summed. Each
aiflame frame is one Location with one Line (function name, file, line), in a Mapping
named after the frame's module. The frame kind is kept in ``Function.system_name`` (see
:mod:`aiflame.proto.conventions`), so names and files stay what other tools show.
"""

from __future__ import annotations

import gzip

import numpy as np

from aiflame.errors import AiflameError
from aiflame.model import Profile
from aiflame.proto import conventions as conv
from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb
from aiflame.render.stackpaths import check_frames, leaf_first_paths

# Level 1 is what Go's runtime/pprof uses: the protobuf is mostly varints that compress
# well anyway, and level 6 costs several times the time for a few percent.
_GZIP_LEVEL = 1


def render_pprof(profile: Profile) -> bytes:
    """The profile as gzipped pprof bytes (deterministic: no gzip timestamp)."""
    data = build_message(profile).SerializeToString()
    return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)


def build_message(profile: Profile) -> pb.Profile:
    return _Writer(profile).message


class _Writer:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.message = pb.Profile()
        self._index: dict[str, int] = {"": 0}
        self.table: list[str] = [""]
        self.stack_frames = profile.stacks.frames_array()
        exponents = self.sample_types()
        loc_of = self.locations()
        self.samples(exponents, loc_of)
        self.header()
        try:
            self.message.string_table.extend(self.table)
        except UnicodeEncodeError:  # a lone surrogate (from a JSON escape): not UTF-8
            self.message.string_table.extend(map(utf8_text, self.table))

    def s(self, text: str) -> int:
        i = self._index.get(text)
        if i is None:
            i = self._index[text] = len(self.table)
            self.table.append(text)
        return i

    def sample_types(self) -> list[int]:
        exponents = []
        for col, t in enumerate(self.profile.sample_types):
            e = conv.integer_exponent(self.profile.values[:, col])
            exponents.append(e)
            self.message.sample_type.add(
                type=self.s(t.name), unit=self.s(conv.scaled_unit(t.unit, e))
            )
        return exponents

    def locations(self) -> np.ndarray:
        """One Location per frame used by a stack; returns frame id -> location id."""
        p = self.profile
        frames, strings = p.frames, p.strings.strings
        used = np.flatnonzero(np.bincount(self.stack_frames, minlength=len(frames)))
        loc_of = np.zeros(len(frames), dtype=np.int64)
        functions: dict[tuple[int, int, int], int] = {}
        mappings: dict[int, pb.Mapping] = {}
        msg = self.message
        for n, f in enumerate(used.tolist(), start=1):
            name, file, module = (
                strings[frames.name[f]],
                strings[frames.file[f]],
                strings[frames.module[f]],
            )
            key = (self.s(name), self.s(conv.system_name_for(name, frames.kind[f])), self.s(file))
            fid = functions.get(key)
            if fid is None:
                fid = functions[key] = len(functions) + 1
                msg.function.add(id=fid, name=key[0], system_name=key[1], filename=key[2])
            mapping_id = 0
            if module:
                m = mappings.get(frames.module[f])
                if m is None:
                    m = mappings[frames.module[f]] = msg.mapping.add(
                        id=len(mappings) + 1, filename=self.s(module), has_functions=True
                    )
                m.has_filenames |= bool(file)
                m.has_line_numbers |= frames.line[f] > 0
                mapping_id = m.id
            loc = msg.location.add(id=n, mapping_id=mapping_id, address=frames.address[f])
            loc.line.add(function_id=fid, line=frames.line[f])
            loc_of[f] = n
        return loc_of

    def samples(self, exponents: list[int], loc_of: np.ndarray) -> None:
        p = self.profile
        if not len(p):
            return
        # Sum samples that share a stack and a label set.
        nlab = max(len(p.label_sets), 1)
        keys = (p.sample_stack + 1) * nlab + p.sample_labels
        groups, inverse = np.unique(keys, return_inverse=True)
        ncols = len(p.sample_types)
        sums = np.empty((len(groups), ncols))
        for c in range(ncols):
            sums[:, c] = np.bincount(inverse, weights=p.values[:, c], minlength=len(groups))
        ints = np.empty((len(groups), ncols), dtype=np.int64)
        for c, e in enumerate(exponents):
            scaled = np.round(sums[:, c] * 10.0**e)
            if not np.all(np.abs(scaled) < 2.0**63):  # NaN fails too
                raise AiflameError(
                    f"pprof holds 64-bit integers: {p.sample_types[c].name} has a value of "
                    f"{float(np.max(np.abs(sums[:, c]))):.4g}, beyond 9.2e18; write folded or"
                    " speedscope instead"
                )
            ints[:, c] = scaled
        keep = np.any(ints != 0, axis=1)
        groups, ints = groups[keep], ints[keep]
        stacks = groups // nlab - 1
        label_ids = (groups % nlab).tolist()
        # Each sample spells its stack out: 8 bytes per frame as the message holds them.
        check_frames("pprof output", p.stacks, stacks, 8)
        labels = self.label_protos()
        add = self.message.sample.add
        paths = leaf_first_paths(p.stacks, stacks, loc_of[self.stack_frames])
        for path, vals, lid in zip(paths, ints.tolist(), label_ids, strict=True):
            sample = add(location_id=path, value=vals)
            if lid:
                sample.label.extend(labels[lid])

    def label_protos(self) -> list[list[pb.Label]]:
        numeric = set(self.profile.meta.get(conv.NUMERIC_LABELS_META, ()))  # type: ignore[call-overload]
        out: list[list[pb.Label]] = []
        for label_set in self.profile.label_sets:
            row = []
            for key, value in label_set:
                parsed = conv.parse_numeric_label(value) if key in numeric else None
                if parsed is None:
                    row.append(pb.Label(key=self.s(key), str=self.s(value)))
                else:
                    num, unit = parsed
                    row.append(
                        pb.Label(key=self.s(key), num=num, num_unit=self.s(unit) if unit else 0)
                    )
            out.append(row)
        return out

    def header(self) -> None:
        p, msg, meta = self.profile, self.message, self.profile.meta
        if p.sample_types:
            msg.default_sample_type = self.s(p.sample_types[p.type_index(None)].name)
        start, duration = _time_span(p)
        for what, value in (("start", start), ("duration", duration)):
            if not -(2**63) <= value < 2**63:
                raise AiflameError(
                    f"pprof holds 64-bit nanoseconds: the profile's {what} is {value:,} ns, "
                    "beyond them"
                )
        msg.time_nanos, msg.duration_nanos = start, duration
        period_type = meta.get("period_type")
        if isinstance(period_type, (list, tuple)) and len(period_type) == 2:
            msg.period_type.type = self.s(str(period_type[0]))
            msg.period_type.unit = self.s(str(period_type[1]))
        if isinstance(meta.get("period"), int):
            msg.period = meta["period"]  # type: ignore[assignment]
        for comment in meta.get("comments", ()) or ():  # type: ignore[attr-defined]
            msg.comment.append(self.s(str(comment)))
        for field in ("drop_frames", "keep_frames", "doc_url"):
            if isinstance(meta.get(field), str):
                setattr(msg, field, self.s(meta[field]))  # type: ignore[arg-type]


def utf8_text(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (lone surrogates) replaced by "?"."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _time_span(p: Profile) -> tuple[int, int]:
    """(start, duration) in ns from pprof meta, a time range, or the sample timestamps."""
    meta = p.meta
    start, dur = meta.get("time_nanos"), meta.get("duration_nanos")
    if isinstance(start, int):
        return start, int(dur) if isinstance(dur, int | float) else 0
    span = meta.get("time_range_ns")
    if isinstance(span, (list, tuple)) and len(span) == 2:
        return int(span[0]), int(span[1]) - int(span[0])
    if p.timestamps is not None and len(p):
        lo, hi = int(p.timestamps.min()), int(p.timestamps.max())
        if lo > 0:
            return lo, hi - lo
    return 0, 0
