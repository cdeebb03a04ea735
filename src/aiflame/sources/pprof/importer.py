"""pprof profiles (``profile.proto``, gzipped or not): Go, ``go tool pprof``, Pyroscope, Parca...

Every sample type is imported; ``--metric`` picks one, and the default is pprof's
``default_sample_type`` or else the last type, as ``go tool pprof`` does. A location's
lines (inlined calls, innermost first in the file) become one frame each, caller first,
so the innermost function is the leaf. Frames keep the function name, file, line and the
mapping's file as module. The address is kept for locations without symbols (they are
named ``0x<address>``); ``granularity="address"`` keeps it everywhere, and
``granularity="function"`` uses the function's start line instead of the sampled line, so
that a function is one frame. String and numeric labels become labels; time, duration,
period and comments go to ``meta``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np
from google.protobuf.message import DecodeError

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.proto import conventions as conv
from aiflame.proto.pyroscope.google.v1.profile_pb2 import Profile as PprofProfile
from aiflame.sources.inputs import SNIFF_BYTES, Input
from aiflame.sources.pprof.wire import looks_like_profile
from aiflame.sources.stacktrie import intern_paths
from aiflame.symbolize.kinds import KindGuesser

FORMAT = "pprof"
GRANULARITIES = ("line", "function", "address")
_KERNEL_MODULES = ("[kernel.kallsyms]", "[kernel]", "[vmlinux]")


def sniff(head: bytes, path: str) -> bool:
    return looks_like_profile(head, complete=len(head) < SNIFF_BYTES)


def load(source: Input, granularity: str = "line", **_: object) -> Profile:
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, not {granularity!r}")
    data = source.read_bytes()
    try:
        message = PprofProfile.FromString(data)
    except DecodeError:
        raise InputError(
            source.path, "corrupt or truncated pprof data (not a valid profile.proto message)"
        ) from None
    return _Reader(message, source.path, granularity).profile()


class _Reader:
    """Turns one decoded pprof message into a Profile, checking every cross-reference."""

    def __init__(self, message: PprofProfile, path: str, granularity: str) -> None:
        self.msg = message
        self.path = path
        self.granularity = granularity
        self.strings: list[str] = list(message.string_table)
        if self.strings and self.strings[0] != "":
            self.fail("the string table does not start with the empty string")
        self.guess = KindGuesser()

    def fail(self, why: str) -> InputError:
        raise InputError(self.path, f"invalid pprof data: {why} (truncated or corrupt file?)")

    def string(self, i: int) -> str:
        if 0 <= i < len(self.strings):
            return self.strings[i]
        raise self.fail(f"string index {i} out of range")

    # -- tables -----------------------------------------------------------------------------
    def sample_types(self) -> tuple[list[SampleType], list[int]]:
        types: list[SampleType] = []
        exponents: list[int] = []
        names: set[str] = set()
        for vt in self.msg.sample_type:
            unit, exponent = conv.unscaled_unit(self.string(vt.unit) or "count")
            name = self.string(vt.type) or "samples"
            if name in names:  # pprof allows repeats; --metric needs distinct names
                name = f"{name}_{len(types)}"
            names.add(name)
            types.append(SampleType(name, unit))
            exponents.append(exponent)
        return types, exponents

    def location_frames(self, builder: ProfileBuilder) -> _Locations:
        """Every location's frame ids, caller first."""
        modules = {m.id: self.string(m.filename) for m in self.msg.mapping}
        functions = {
            f.id: (self.string(f.name), self.string(f.system_name), self.string(f.filename), f)
            for f in self.msg.function
        }
        intern = builder.frames.intern
        by_address = self.granularity == "address"
        by_function = self.granularity == "function"
        ids: list[int] = []
        frames: list[list[int]] = []
        for loc in self.msg.location:
            if loc.mapping_id and loc.mapping_id not in modules:
                raise self.fail(f"location {loc.id} refers to missing mapping {loc.mapping_id}")
            module = modules.get(loc.mapping_id, "")
            chain = []
            for line in reversed(loc.line):
                fn = functions.get(line.function_id)
                if fn is None:
                    raise self.fail(
                        f"location {loc.id} refers to missing function {line.function_id}"
                    )
                name, system_name, file, func = fn
                kind = conv.kind_from_system_name(name, system_name)
                if kind is None:  # not written by aiflame (which keeps even empty names)
                    name = name or system_name or f"0x{loc.address:x}"
                    kind = self.guess_kind(name, module)
                lineno = func.start_line if by_function else line.line
                address = loc.address if by_address else 0
                chain.append(intern(name, kind, file, lineno, module, address))
            if not chain:  # no symbols: the address is all there is
                kind = self.guess_kind("", module)
                chain.append(intern(f"0x{loc.address:x}", kind, "", 0, module, loc.address))
            ids.append(loc.id)
            frames.append(chain)
        return _Locations(ids, frames)

    def guess_kind(self, name: str, module: str) -> FrameKind:
        if module in _KERNEL_MODULES:
            return FrameKind.KERNEL
        if not name:
            return FrameKind.NATIVE
        return self.guess(name)

    # -- samples ----------------------------------------------------------------------------
    def profile(self) -> Profile:
        types, exponents = self.sample_types()
        if not types and len(self.msg.sample):
            raise self.fail("samples but no sample types")
        builder = ProfileBuilder(types)
        locations = self.location_frames(builder)
        paths: dict[tuple[int, ...], int] = {}  # distinct location lists, leaf first
        label_sets: dict[tuple, int] = {(): 0}
        numeric_keys: set[str] = set()
        ntypes = len(types)
        rows: list[int] = []
        labels: list[int] = []
        values: list[int] = []
        for sample in self.msg.sample:
            key = tuple(sample.location_id)
            row = paths.get(key)
            if row is None:
                row = paths[key] = len(paths)
            rows.append(row)
            if len(sample.value) != ntypes:
                raise self.fail(f"a sample has {len(sample.value)} values for {ntypes} types")
            values.extend(sample.value)
            if sample.label:
                lkey = tuple((lb.key, lb.str, lb.num, lb.num_unit) for lb in sample.label)
                lid = label_sets.get(lkey)
                if lid is None:
                    lid = label_sets[lkey] = builder.labels(self.labels(lkey, numeric_keys))
                labels.append(lid)
            else:
                labels.append(0)
        flat, lengths = locations.expand(list(paths), self.fail)
        leaf = intern_paths(builder.stacks, flat, lengths)
        array = np.asarray(values, dtype=np.float64).reshape(len(rows), ntypes)
        for col, exponent in enumerate(exponents):
            if exponent:
                array[:, col] /= 10.0**exponent
        builder.add_many(
            leaf[np.asarray(rows, dtype=np.int64)], array, np.asarray(labels, dtype=np.int64)
        )
        builder.meta.update(self.meta(types, numeric_keys))
        return builder.build()

    def labels(self, raw: Sequence[tuple[int, int, int, int]], numeric: set[str]) -> dict:
        out: dict[str, str] = {}
        for key, text, num, unit in raw:
            k = self.string(key)
            if text:
                value = self.string(text)
            else:
                value = conv.numeric_label_text(num, self.string(unit))
                numeric.add(k)
            # pprof allows several values per key; aiflame keeps one string per key.
            out[k] = f"{out[k]},{value}" if k in out else value
        return out

    def meta(self, types: list[SampleType], numeric_keys: set[str]) -> dict[str, object]:
        m = self.msg
        meta: dict[str, object] = {"default_type": max(len(types) - 1, 0)}
        if m.default_sample_type:
            wanted = self.string(m.default_sample_type)
            for i, vt in enumerate(m.sample_type):
                if self.string(vt.type) == wanted:
                    meta["default_type"] = i
                    break
        if m.time_nanos:
            meta["time_nanos"] = m.time_nanos
            meta["time_range_ns"] = (m.time_nanos, m.time_nanos + m.duration_nanos)
        if m.duration_nanos:
            meta["duration_nanos"] = m.duration_nanos
        if m.HasField("period_type"):
            meta["period_type"] = [
                self.string(m.period_type.type),
                self.string(m.period_type.unit),
            ]
        if m.period:
            meta["period"] = m.period
        if m.comment:
            meta["comments"] = [self.string(c) for c in m.comment]
        for field in ("drop_frames", "keep_frames", "doc_url"):
            value = self.string(getattr(m, field))
            if value:
                meta[field] = value
        if numeric_keys:
            meta[conv.NUMERIC_LABELS_META] = sorted(numeric_keys)
        return meta


_EXPAND_CHUNK = 1 << 20  # location ids expanded at a time


class _Locations:
    """Frame ids of every location, as flat arrays indexed by sorted location id."""

    def __init__(self, ids: list[int], frames: list[list[int]]) -> None:
        order = np.argsort(np.asarray(ids, dtype=np.uint64), kind="stable")
        self.ids = np.asarray(ids, dtype=np.uint64)[order]
        counts = np.asarray([len(frames[i]) for i in order.tolist()], dtype=np.int64)
        self.counts = counts
        self.offsets = np.cumsum(counts) - counts
        self.frames = np.asarray([f for i in order.tolist() for f in frames[i]], dtype=np.int64)

    def positions(self, locs: np.ndarray) -> np.ndarray:
        """Index of each location id in the sorted table, -1 where there is none."""
        n = len(self.ids)
        if n and int(self.ids[-1]) < 4 * n + 1024:  # ids are small: a lookup table is faster
            table = np.full(int(self.ids[-1]) + 1, -1, dtype=np.int64)
            table[self.ids.astype(np.int64)] = np.arange(n)
            inside = locs < len(table)
            pos = np.full(len(locs), -1, dtype=np.int64)
            pos[inside] = table[locs[inside].astype(np.int64)]
            return pos
        pos = np.searchsorted(self.ids, locs)
        found = pos < n
        found[found] = self.ids[pos[found]] == locs[found]
        return np.where(found, pos, -1)

    def expand(
        self, paths: list[tuple[int, ...]], fail: Callable[[str], InputError]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Root-first frame ids of leaf-first location lists, concatenated, and lengths.

        A chunk of paths at a time, so that the index arrays of one chunk are all that is
        held beside the result (samples with deep stacks hold tens of millions of ids)."""
        flats, lengths = [], []
        lo = 0
        while lo < len(paths):
            hi, held = lo, 0
            while hi < len(paths) and (held < _EXPAND_CHUNK or hi == lo):
                held += len(paths[hi])
                hi += 1
            flat, length = self._expand(paths[lo:hi], held, fail)
            flats.append(flat)
            lengths.append(length)
            lo = hi
        if not flats:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(flats), np.concatenate(lengths)

    def _expand(
        self, paths: list[tuple[int, ...]], total: int, fail: Callable[[str], InputError]
    ) -> tuple[np.ndarray, np.ndarray]:
        locs = np.fromiter(
            chain.from_iterable(p[::-1] for p in paths), dtype=np.uint64, count=total
        )
        pos = self.positions(locs)
        if (pos < 0).any():
            raise fail(f"a sample refers to missing location {int(locs[pos < 0][0])}")
        del locs
        path_lengths = np.fromiter(map(len, paths), dtype=np.int64, count=len(paths))
        counts = self.counts[pos]
        starts = np.repeat(self.offsets[pos], counts)
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        flat = self.frames[starts + within]
        ends = np.cumsum(path_lengths)
        cum = np.concatenate(([0], np.cumsum(counts)))
        lengths = cum[ends] - cum[ends - path_lengths]
        return flat, lengths
