"""The Profile: interned frames and stacks, columnar samples with several value types."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from aiflame.model.frames import Frame, FrameKind, FrameTable
from aiflame.model.stacks import EMPTY_STACK, StackTable
from aiflame.model.strings import StringTable

# Units understood by the renderers: values are formatted accordingly.
UNITS = ("count", "nanoseconds", "bytes")
# Former names of sample types, still accepted where a metric is named: the self time of
# traced CPU slices was called cpu-time, but it is measured by the wall clock.
METRIC_ALIASES = {"cpu-time": "wall-time"}


@dataclass(frozen=True, slots=True)
class SampleType:
    """One kind of value carried by every sample, e.g. ``cpu-samples``/``count``."""

    name: str
    unit: str = "count"


@dataclass(repr=False)  # the columns can be millions of rows: see __repr__
class Profile:
    """A frozen profile: columns of samples over interned stacks and frames.

    ``values`` has one row per sample and one column per entry of ``sample_types``.
    ``labels[i]`` indexes ``label_sets`` (0 is the empty set); a label set is a tuple of
    (key, value) string pairs, sorted by key.
    """

    strings: StringTable
    frames: FrameTable
    stacks: StackTable
    sample_types: list[SampleType]
    sample_stack: np.ndarray  # int64 stack ids, one per sample
    values: np.ndarray  # float64, shape (n_samples, n_types)
    sample_labels: np.ndarray  # int64 label-set ids
    label_sets: list[tuple[tuple[str, str], ...]]
    timestamps: np.ndarray | None = None  # int64 ns, one per sample, when known
    meta: dict[str, object] = field(default_factory=dict)  # title, source, time range...

    # -- queries --------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.sample_stack.shape[0])

    def type_index(self, name: str | None) -> int:
        """Column of the sample type ``name`` (or of the name it had: ``METRIC_ALIASES``).

        None means the default type (``meta["default_type"]``, else the first), unless it
        holds no value while another type does: then the first type that has values.
        """
        if name is None:
            chosen = self.meta.get("default_type", 0)
            default = chosen if isinstance(chosen, int) else 0
            if len(self) and not self.values[:, default].any():
                filled = np.flatnonzero(self.values.any(axis=0))
                return int(filled[0]) if filled.size else default
            return default
        for wanted in (name, METRIC_ALIASES.get(name)):
            for i, t in enumerate(self.sample_types):
                if t.name == wanted:
                    return i
        known = ", ".join(t.name for t in self.sample_types)
        raise KeyError(f"no metric '{name}' in this profile (it has: {known})")

    def filled_types(self) -> list[int]:
        """Columns of the sample types that hold a value (the metrics worth offering)."""
        return np.flatnonzero(self.values.any(axis=0)).tolist() if len(self) else []

    def totals(self) -> np.ndarray:
        """Sum of every sample type."""
        return self.values.sum(axis=0) if len(self) else np.zeros(len(self.sample_types))

    def stack_frames(self, stack: int) -> list[Frame]:
        return [self.frames.get(f) for f in self.stacks.frames_of(stack)]

    def stack_names(self, stack: int) -> list[str]:
        names = self.strings.strings
        fname = self.frames.name
        return [names[fname[f]] for f in self.stacks.frames_of(stack)]

    def labels_of(self, sample: int) -> dict[str, str]:
        return dict(self.label_sets[int(self.sample_labels[sample])])

    def iter_stack_values(self, type_index: int | None = None) -> Iterator[tuple[int, float]]:
        """(stack id, summed value) for every stack with samples, in stack-id order."""
        col = self.type_index(None) if type_index is None else type_index
        if not len(self):
            return iter(())
        per_stack = np.bincount(
            self.sample_stack + 1, weights=self.values[:, col], minlength=len(self.stacks) + 1
        )
        hit = np.bincount(self.sample_stack + 1, minlength=len(self.stacks) + 1) > 0
        ids = np.nonzero(hit)[0]
        return ((int(i) - 1, float(per_stack[i])) for i in ids)

    def with_stacks(
        self,
        stacks: StackTable,
        new_stack_of: np.ndarray,
        frames: FrameTable | None = None,
    ) -> Profile:
        """This profile with samples moved onto another stack table (and frame table).

        ``new_stack_of[s]`` is the new id of old stack ``s``; index -1 (the last entry)
        maps the empty stack. Values, labels and timestamps are shared, not copied.
        """
        meta = dict(self.meta)
        launches = meta.get("gpu_launches")
        if isinstance(launches, dict) and "stack" in launches:
            # stack ids of GPU launches (model/gpu.py LAUNCHES) move with the stacks
            old = np.asarray(launches["stack"], dtype=np.int64)
            moved = np.where(old >= 0, new_stack_of[np.maximum(old, 0)], -1)
            meta["gpu_launches"] = {**launches, "stack": moved}
        return replace(
            self,
            strings=frames.strings if frames is not None else self.strings,
            frames=frames if frames is not None else self.frames,
            stacks=stacks,
            sample_stack=new_stack_of[self.sample_stack],
            sample_types=list(self.sample_types),
            label_sets=list(self.label_sets),
            meta=meta,
        )

    def is_empty(self) -> bool:
        return len(self) == 0 or not np.any(self.values)

    # -- display ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        types = ", ".join(f"{t.name} ({t.unit})" for t in self.sample_types)
        source = self.meta.get("source")
        where = f" from {source}" if isinstance(source, str) and source else ""
        return (
            f"<Profile{where}: {len(self):,} samples of {types or 'no type'}; "
            f"{len(self.stacks):,} stacks, {len(self.frames):,} frames>"
        )

    def _repr_html_(self) -> str | None:
        """Jupyter shows a profile as its interactive flame graph: what the display layer
        (:mod:`aiflame.notebook`) registered with :func:`register_html_repr`, or the text
        form (None) where none did. Jupyter looks the method up on the class, so it is
        here; what it draws is registered from above, so that the model imports nothing of
        the layers above it."""
        return _html_repr(self) if _html_repr is not None else None

    def value_problem(self) -> str | None:
        """Why the values cannot be added up and shown, or None (see :func:`value_problem`)."""
        return value_problem(self.values, [t.name for t in self.sample_types])


_html_repr: Callable[[Profile], str | None] | None = None


def register_html_repr(render: Callable[[Profile], str | None]) -> None:
    """How a notebook shows a profile (:meth:`Profile._repr_html_`); the display layer
    registers its flame graph when it is imported."""
    global _html_repr
    _html_repr = render


def value_problem(values: np.ndarray, names: Sequence[str]) -> str | None:
    """Why ``values`` (samples by type, one column per name) cannot be added up and
    shown, or None: a value that is NaN or infinite, or values whose sum is beyond the
    range of a float (about 1.8e308), which no call tree, total or output could hold."""
    if not len(values):
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # overflows are what is looked for
        sums = values.sum(axis=0)  # NaN and infinities propagate into the sums
        if np.isfinite(sums).all() and not (values < 0).any():
            return None
        for i, name in enumerate(names):
            col = values[:, i]
            bad = ~np.isfinite(col)
            if bad.any():
                k = int(np.argmax(bad))
                return f"sample {k + 1:,} has the {name} value {col[k]} (not a finite number)"
            if not np.isfinite(np.abs(col).sum()):
                return f"the {name} values add up to more than a float holds (1.8e308)"
    return None


class ProfileBuilder:
    """Collects samples cheaply (appends to compact arrays), then freezes a :class:`Profile`.

    Sources intern frames with :meth:`frame`, stacks with :meth:`stack`, then call
    :meth:`add`. Samples with the same stack and labels are *not* merged here; use
    :func:`aiflame.transforms.merge_samples` when that matters.
    """

    def __init__(self, sample_types: Sequence[SampleType] | None = None) -> None:
        self.strings = StringTable()
        self.frames = FrameTable(self.strings)
        self.stacks = StackTable()
        # None means the default type; [] means none yet (add them with add_type, as merge does).
        types = [SampleType("samples", "count")] if sample_types is None else sample_types
        self.sample_types: list[SampleType] = list(types)
        self._stack = array("q")
        self._labels = array("q")
        self._values: list[array] = [array("d") for _ in self.sample_types]
        self._timestamps: array | None = None
        self.label_sets: list[tuple[tuple[str, str], ...]] = [()]
        self._label_index: dict[tuple[tuple[str, str], ...], int] = {(): 0}
        self.meta: dict[str, object] = {}

    # -- interning ----------------------------------------------------------------------------
    def frame(
        self,
        name: str,
        kind: FrameKind | int = FrameKind.UNKNOWN,
        file: str = "",
        line: int = 0,
        module: str = "",
        address: int = 0,
    ) -> int:
        return self.frames.intern(name, kind, file, line, module, address)

    def stack(self, frames: Iterable[int], parent: int = EMPTY_STACK) -> int:
        """Stack id of frame ids ``frames`` (root first)."""
        return self.stacks.intern(frames, parent)

    def labels(self, labels: Mapping[str, object] | None) -> int:
        if not labels:
            return 0
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        i = self._label_index.get(key)
        if i is None:
            i = len(self.label_sets)
            self._label_index[key] = i
            self.label_sets.append(key)
        return i

    def add_type(self, sample_type: SampleType) -> int:
        """Add a sample type (existing samples get 0 for it); returns its column."""
        for i, t in enumerate(self.sample_types):
            if t.name == sample_type.name:
                return i
        self.sample_types.append(sample_type)
        self._values.append(array("d", bytes(8 * len(self._stack))))
        return len(self.sample_types) - 1

    # -- samples ------------------------------------------------------------------------------
    def add(
        self,
        stack: int,
        values: Sequence[float] | float,
        labels: int = 0,
        timestamp: int | None = None,
    ) -> None:
        """Add one sample; ``values`` is one number per sample type (or one number)."""
        self._stack.append(stack)
        self._labels.append(labels)
        if isinstance(values, (int, float)):
            self._values[0].append(values)
            for col in self._values[1:]:
                col.append(0.0)
        else:
            for col, v in zip(self._values, values, strict=True):
                col.append(v)
        if timestamp is not None:
            if self._timestamps is None:
                self._timestamps = array("q", bytes(8 * (len(self._stack) - 1)))
            self._timestamps.append(timestamp)
        elif self._timestamps is not None:
            self._timestamps.append(0)

    def add_value(self, stack: int, column: int, value: float, labels: int = 0) -> None:
        """Add a sample carrying a value for one type only (others are 0)."""
        self._stack.append(stack)
        self._labels.append(labels)
        for i, col in enumerate(self._values):
            col.append(value if i == column else 0.0)
        if self._timestamps is not None:
            self._timestamps.append(0)

    def add_many(
        self,
        stacks: np.ndarray,
        values: np.ndarray,
        labels: np.ndarray | None = None,
        timestamps: np.ndarray | None = None,
    ) -> None:
        """Bulk :meth:`add`: ``values`` has shape (n, number of sample types)."""
        n = int(stacks.shape[0])
        if timestamps is not None and self._timestamps is None:
            self._timestamps = array("q", bytes(8 * len(self._stack)))
        self._stack.frombytes(np.ascontiguousarray(stacks, dtype=np.int64).tobytes())
        lab = np.zeros(n, dtype=np.int64) if labels is None else labels
        self._labels.frombytes(np.ascontiguousarray(lab, dtype=np.int64).tobytes())
        vals = np.asarray(values, dtype=np.float64).reshape(n, len(self._values))
        for c, col in enumerate(self._values):
            col.frombytes(np.ascontiguousarray(vals[:, c]).tobytes())
        if self._timestamps is not None:
            ts = np.zeros(n, dtype=np.int64) if timestamps is None else timestamps
            self._timestamps.frombytes(np.ascontiguousarray(ts, dtype=np.int64).tobytes())

    def __len__(self) -> int:
        return len(self._stack)

    def build(self) -> Profile:
        n = len(self._stack)
        if self._values:
            values = np.empty((n, len(self._values)), dtype=np.float64)
            for i, col in enumerate(self._values):
                values[:, i] = np.frombuffer(col, dtype=np.float64) if n else []
        else:
            values = np.zeros((n, 0))
        ts = np.frombuffer(self._timestamps, dtype=np.int64).copy() if self._timestamps else None
        return Profile(
            strings=self.strings,
            frames=self.frames,
            stacks=self.stacks,
            sample_types=list(self.sample_types),
            sample_stack=np.frombuffer(self._stack, dtype=np.int64).copy(),
            values=values,
            sample_labels=np.frombuffer(self._labels, dtype=np.int64).copy(),
            label_sets=list(self.label_sets),
            timestamps=ts,
            meta=dict(self.meta),
        )
