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

from collections.abc import Sequence

import numpy as np
from google.protobuf.message import DecodeError

from aiflame.errors import InputError
from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.stacks import EMPTY_STACK
from aiflame.proto import conventions as conv
from aiflame.proto.profile_pb2 import Profile as PprofProfile
from aiflame.sources.inputs import SNIFF_BYTES, Input
from aiflame.sources.pprof_wire import looks_like_profile
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
    except DecodeError as e:
        raise InputError(source.path, f"corrupt or truncated pprof data ({e})") from None
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

    def location_frames(self, builder: ProfileBuilder) -> dict[int, list[int]]:
        """Location id -> its frame ids, caller first."""
        modules = {m.id: self.string(m.filename) for m in self.msg.mapping}
        functions = {
            f.id: (self.string(f.name), self.string(f.system_name), self.string(f.filename), f)
            for f in self.msg.function
        }
        intern = builder.frames.intern
        by_address = self.granularity == "address"
        by_function = self.granularity == "function"
        out: dict[int, list[int]] = {}
        for loc in self.msg.location:
            if loc.mapping_id and loc.mapping_id not in modules:
                raise self.fail(f"location {loc.id} refers to missing mapping {loc.mapping_id}")
            module = modules.get(loc.mapping_id, "")
            ids = []
            for line in reversed(loc.line):
                fn = functions.get(line.function_id)
                if fn is None:
                    raise self.fail(
                        f"location {loc.id} refers to missing function {line.function_id}"
                    )
                name, system_name, file, func = fn
                name = name or system_name or f"0x{loc.address:x}"
                kind = conv.kind_from_system_name(name, system_name)
                if kind is None:
                    kind = self.guess_kind(name, module)
                lineno = func.start_line if by_function else line.line
                address = loc.address if by_address else 0
                ids.append(intern(name, kind, file, lineno, module, address))
            if not ids:  # no symbols: the address is all there is
                kind = self.guess_kind("", module)
                ids.append(intern(f"0x{loc.address:x}", kind, "", 0, module, loc.address))
            out[loc.id] = ids
        return out

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
        frames_of = self.location_frames(builder)
        intern = builder.stacks.intern
        stack_of: dict[tuple[int, ...], int] = {}
        label_sets: dict[tuple, int] = {(): 0}
        numeric_keys: set[str] = set()
        ntypes = len(types)
        stacks: list[int] = []
        labels: list[int] = []
        values: list[int] = []
        for sample in self.msg.sample:
            key = tuple(sample.location_id)
            stack = stack_of.get(key)
            if stack is None:
                stack = EMPTY_STACK
                for loc in reversed(key):
                    ids = frames_of.get(loc)
                    if ids is None:
                        raise self.fail(f"a sample refers to missing location {loc}")
                    stack = intern(ids, stack)
                stack_of[key] = stack
            stacks.append(stack)
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
        array = np.asarray(values, dtype=np.float64).reshape(len(stacks), ntypes)
        for col, exponent in enumerate(exponents):
            if exponent:
                array[:, col] /= 10.0**exponent
        builder.add_many(
            np.asarray(stacks, dtype=np.int64), array, np.asarray(labels, dtype=np.int64)
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
