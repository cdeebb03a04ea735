"""Two folded files straight to a differential profile, as difffolded.pl reads them.

For folded inputs, matching stacks by frame names is matching lines by their stack text, so
the union can be taken on the text: one stack tree is built for the union instead of one per
input plus their merge (``aiflame diff`` on two 1M-sample files: one tree of 3.4M nodes
instead of three), and ``stack base test`` lines need no tree at all. The results are those
of :func:`aiflame.transforms.diff.diff_profiles` on the loaded profiles (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiflame.errors import InputError
from aiflame.model import Profile
from aiflame.model.profile import value_problem
from aiflame.sources.folded.importer import build_profile, read_counts
from aiflame.sources.inputs import Input
from aiflame.transforms.diff import diff_columns, make_diff_profile, strip_hex_name, total


@dataclass
class FoldedPair:
    """The union of two folded files' stacks, with each file's summed count per stack."""

    base_path: str
    test_path: str
    stacks: list[str]
    base: np.ndarray
    test: np.ndarray
    base_total: float
    test_total: float

    def columns(self, normalize: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(stacks, base, test) of the stacks non-zero in either file, base scaled if asked."""
        keep, base, test = diff_columns(
            self.base, self.test, normalize, self.base_total, self.test_total, self.base_path
        )
        return [self.stacks[i] for i in keep.tolist()], base, test


def read_pair(base_path: str, test_path: str, strip_hex: bool = False) -> FoldedPair:
    base = _counts(base_path, strip_hex)
    test = _counts(test_path, strip_hex)
    # Base's stacks in its order, then those only in test.
    stacks = list(base)
    stacks.extend(s for s in test if s not in base)
    bvals = np.zeros(len(stacks))
    bvals[: len(base)] = np.fromiter(base.values(), dtype=np.float64, count=len(base))
    tget = test.get
    tvals = np.fromiter((tget(s, 0.0) for s in stacks), dtype=np.float64, count=len(stacks))
    return FoldedPair(
        base_path,
        test_path,
        stacks,
        bvals,
        tvals,
        total(np.fromiter(base.values(), dtype=np.float64, count=len(base))),
        total(np.fromiter(test.values(), dtype=np.float64, count=len(test))),
    )


def load_diff(
    base_path: str, test_path: str, normalize: bool = False, strip_hex: bool = False
) -> Profile:
    """The differential profile of two folded files (see ``diff_profiles``)."""
    pair = read_pair(base_path, test_path, strip_hex)
    stacks, base, test = pair.columns(normalize)
    # The folded builder takes one value per stack: give it row numbers, then look the two
    # real columns up by the row number each sample carries.
    built = build_profile({s: float(i) for i, s in enumerate(stacks)}).build()
    rows = built.values[:, 0].astype(np.int64)
    return make_diff_profile(
        (built.strings, built.frames, built.stacks),
        built.sample_stack,
        base[rows],
        test[rows],
        normalize=normalize,
        totals=(pair.base_total, pair.test_total),
        metric="samples",
        unit="count",
        sources=(base_path, test_path),
    )


def _counts(path: str, strip_hex: bool) -> dict[str, float]:
    counts, _ = read_counts(Input(path))
    if not counts:
        raise InputError(path, "no folded stacks found (expected lines like 'a;b;c 42')")
    values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    problem = value_problem(values.reshape(-1, 1), ["samples"])
    if problem:
        raise InputError(path, problem)
    if not strip_hex:
        return counts
    stripped: dict[str, float] = {}
    for stack, value in counts.items():
        key = strip_hex_name(stack) if "0x" in stack else stack
        stripped[key] = stripped.get(key, 0.0) + value
    return stripped
