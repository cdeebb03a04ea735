"""Differential profiles: two profiles become one whose samples carry ``base`` and ``test``.

Stacks are matched by the names of their frames from the root down (kinds, files and
addresses do not take part in matching; the first profile's frame is kept where both have
one). The result has one sample per stack that is non-zero in either input, with the two
values side by side, like the ``stack base test`` lines of FlameGraph's ``difffolded.pl``.
``normalize`` scales the base values by ``test_total / base_total`` (``difffolded.pl -n``),
so that a change of load does not paint everything red or blue.

Labels and timestamps are not carried over: a diff compares where the value went, not when.
"""

from __future__ import annotations

import math
import re

import numpy as np

from aiflame.errors import AiflameError
from aiflame.model import FrameTable, Profile, SampleType, StackTable, StringTable
from aiflame.model.stacks import depths_of

_HEX = re.compile(r"0x[0-9a-fA-F]+")


def strip_hex_name(name: str) -> str:
    """``0x7f3a12`` -> ``0x...``, as ``difffolded.pl -s`` does, so addresses that moved match."""
    return _HEX.sub("0x...", name)


def diff_profiles(
    base: Profile,
    test: Profile,
    metric: str | None = None,
    normalize: bool = False,
    strip_hex: bool = False,
) -> Profile:
    """The differential profile of ``base`` (before) and ``test`` (after).

    ``metric`` names the sample type to compare (default: each profile's main one); it must
    exist in both and have the same unit. The result's sample types are ``base`` and
    ``test``; ``meta["diff"]`` says which column is which, whether base was normalized, and
    the totals of both inputs before normalization.
    """
    bcol, tcol = _column(base, metric, "base"), _column(test, metric, "test")
    bunit, tunit = base.sample_types[bcol].unit, test.sample_types[tcol].unit
    if bunit != tunit:
        raise AiflameError(
            f"cannot compare {_name(base, 'base')} ({base.sample_types[bcol].name}, {bunit}) "
            f"with {_name(test, 'test')} ({test.sample_types[tcol].name}, {tunit}): "
            "the units differ; choose a metric both have with -m"
        )
    base_total = total(base.values[:, bcol])
    test_total = total(test.values[:, tcol])

    union = _Union(strip_hex)
    union.add(base)
    union.add(test)
    strings, frames, stacks, node_maps = union.freeze()

    n = len(stacks)
    bvals = _per_node(base, bcol, node_maps[0], n)
    tvals = _per_node(test, tcol, node_maps[1], n)
    keep, bvals, tvals = diff_columns(
        bvals, tvals, normalize, base_total, test_total, _name(base, "base")
    )
    return make_diff_profile(
        (strings, frames, stacks),
        keep - 1,  # node slot 0 holds the empty stack
        bvals,
        tvals,
        normalize=normalize,
        totals=(base_total, test_total),
        metric=test.sample_types[tcol].name,
        unit=tunit,
        sources=(base.meta.get("source"), test.meta.get("source")),
    )


def total(values: np.ndarray) -> float:
    """An exact sum (``math.fsum``), so the same values give the same total on every path."""
    return math.fsum(values.tolist()) if len(values) else 0.0


def diff_columns(
    base: np.ndarray,
    test: np.ndarray,
    normalize: bool,
    base_total: float,
    test_total: float,
    base_name: str = "the base profile",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kept rows, base values, test values): the rows non-zero in either input.

    With ``normalize``, base values are scaled by ``test_total / base_total``.
    """
    if normalize and base_total == 0 and test_total != 0:
        raise AiflameError(f"cannot normalize: {base_name} has a total of 0")
    keep = np.nonzero((base != 0) | (test != 0))[0]
    base, test = base[keep], test[keep]
    if normalize and base_total != test_total:
        base = base * test_total / base_total  # difffolded.pl's order: count * total2 / total1
    return keep, base, test


def make_diff_profile(
    tables: tuple[StringTable, FrameTable, StackTable],
    sample_stack: np.ndarray,
    base: np.ndarray,
    test: np.ndarray,
    *,
    normalize: bool,
    totals: tuple[float, float],
    metric: str,
    unit: str,
    sources: tuple[object, object],
) -> Profile:
    """The differential profile: one sample per stack, columns ``base`` and ``test``."""
    strings, frames, stacks = tables
    return Profile(
        strings=strings,
        frames=frames,
        stacks=stacks,
        sample_types=[SampleType("base", unit), SampleType("test", unit)],
        sample_stack=np.asarray(sample_stack, dtype=np.int64),
        values=np.stack([base, test], axis=1).astype(np.float64).reshape(-1, 2),
        sample_labels=np.zeros(len(sample_stack), dtype=np.int64),
        label_sets=[()],
        meta={
            "title": "Differential flame graph",
            "format": "diff",
            "sources": list(sources),
            "default_type": 1,  # widths show the test profile, as in difffolded.pl
            "diff": {
                "base": 0,
                "test": 1,
                "normalized": bool(normalize),
                "base_total": totals[0],
                "test_total": totals[1],
                "metric": metric,
                "unit": unit,
                "base_source": sources[0],
                "test_source": sources[1],
            },
        },
    )


def _name(profile: Profile, role: str) -> str:
    return str(profile.meta.get("source") or f"the {role} profile")


def _column(profile: Profile, metric: str | None, role: str) -> int:
    try:
        return profile.type_index(metric)
    except KeyError as e:
        raise AiflameError(f"{_name(profile, role)}: {e.args[0]}") from None


def _per_node(profile: Profile, col: int, node_map: np.ndarray, n: int) -> np.ndarray:
    """Summed values by union node + 1 (slot 0 holds samples with an empty stack)."""
    if not len(profile):
        return np.zeros(n + 1)
    slots = node_map[profile.sample_stack + 1] + 1
    return np.bincount(slots, weights=profile.values[:, col], minlength=n + 1)


class _Union:
    """Merges the stack trees of several profiles by frame names, one depth level at a time.

    Per level, a node's key is (union id of its parent, name id); ``np.unique`` over the keys
    gives the union ids of that level, so no Python loop runs over the millions of nodes.
    """

    def __init__(self, strip_hex: bool) -> None:
        self.strip_hex = strip_hex
        self.strings = StringTable()
        self.frames = FrameTable(self.strings)
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, profile: Profile) -> None:
        """Queue ``profile``'s nodes as (parent, name id, union frame id, depth) columns."""
        src, st = profile.frames, profile.strings.strings
        intern = self.frames.intern
        union_name = self.frames.name
        ids: list[int] = []
        columns = zip(src.name, src.kind, src.file, src.line, src.module, src.address, strict=True)
        for name, kind, file, line, module, address in columns:
            text = st[name]
            if self.strip_hex and "0x" in text:
                text = strip_hex_name(text)
            ids.append(intern(text, kind, st[file], line, st[module], address))
        frame_id = np.asarray(ids, dtype=np.int64)
        name_id = np.asarray(union_name, dtype=np.int64)[frame_id]
        parent = profile.stacks.parents_array()
        fr = profile.stacks.frames_array()
        self.parts.append((parent, name_id[fr], frame_id[fr], depths_of(parent)))

    def freeze(self) -> tuple[StringTable, FrameTable, StackTable, list[np.ndarray]]:
        """The union tables, and per profile an array: its stack id + 1 -> union stack id."""
        offsets = np.cumsum([0] + [len(p[0]) for p in self.parts])
        shifted = [
            np.where(p[0] >= 0, p[0] + off, -1)
            for p, off in zip(self.parts, offsets[:-1], strict=True)
        ]
        parent = np.concatenate(shifted).astype(np.int64)
        name = np.concatenate([p[1] for p in self.parts]).astype(np.int64)
        frame = np.concatenate([p[2] for p in self.parts]).astype(np.int64)
        depth = np.concatenate([p[3] for p in self.parts]).astype(np.int64)

        union_of = np.empty(len(parent), dtype=np.int64)
        new_parent: list[np.ndarray] = []
        new_frame: list[np.ndarray] = []
        # A stable sort keeps earlier profiles first within a level, so np.unique's first
        # occurrence (return_index) picks the earlier profile's frame for a shared node.
        # numpy sorts 16-bit keys with a (linear) radix sort.
        key = depth.astype(np.int16) if len(depth) and depth.max() < 2**15 else depth
        order = np.argsort(key, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=-1)) + 2))
        width = len(self.strings)
        next_id = 0
        for d in range(len(bounds) - 1):
            idx = order[bounds[d] : bounds[d + 1]]
            if not len(idx):
                continue
            p = parent[idx]
            up = np.where(p >= 0, union_of[np.maximum(p, 0)], -1)
            keys = (up + 1) * width + name[idx]
            uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            union_of[idx] = next_id + inverse.reshape(-1)
            new_parent.append(uniq // width - 1)
            new_frame.append(frame[idx[first]])
            next_id += len(uniq)

        stacks = StackTable()
        if new_parent:
            _fill(stacks, np.concatenate(new_parent).tolist(), np.concatenate(new_frame).tolist())
        maps = [
            np.concatenate(([-1], union_of[offsets[i] : offsets[i + 1]]))
            for i in range(len(self.parts))
        ]
        return self.strings, self.frames, stacks, maps


def _fill(stacks: StackTable, parents: list[int], frames: list[int]) -> None:
    """Append nodes known to be new and in parent-first order (the index is rebuilt lazily)."""
    col_parent, col_frame = stacks.bulk_columns()
    col_parent.extend(parents)
    col_frame.extend(frames)
    stacks.bulk_done()
