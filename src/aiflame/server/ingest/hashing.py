"""Content ids of frames and stacks: the same frame or stack has the same 64-bit id in every
profile, on every server replica, forever (the store keeps each one once).

Strings are hashed with BLAKE2b (cached, since the same names come in every profile); a
frame's id mixes its strings' hashes and line, a stack's id its frames in order, both with
the SplitMix64 finalizer over numpy arrays, so a profile's thousands of frames cost a few
vectorised operations. These are not cryptographic commitments: they identify content the
way ClickHouse's cityHash64 or Pyroscope's stack hashes do.
"""

from __future__ import annotations

import hashlib

import numpy as np

U64 = np.uint64
_C1 = U64(0xBF58476D1CE4E5B9)
_C2 = U64(0x94D049BB133111EB)
_GOLDEN = U64(0x9E3779B97F4A7C15)
_SEED = U64(0x6A09E667F3BCC908)
_CACHE_LIMIT = 2_000_000


def splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x.astype(U64, copy=True)
        z ^= z >> U64(30)
        z *= _C1
        z ^= z >> U64(27)
        z *= _C2
        z ^= z >> U64(31)
    return z


def combine(h: np.ndarray, x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return splitmix(h * _GOLDEN + x.astype(U64))


class StringHashes:
    """64-bit hashes of strings, remembered across profiles."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def of(self, strings: list[str]) -> np.ndarray:
        cache = self._cache
        if len(cache) > _CACHE_LIMIT:
            cache.clear()
        got = list(map(cache.get, strings))  # one C-level pass for the strings seen before
        if None in got:
            for i, h in enumerate(got):
                if h is None:
                    s = strings[i]
                    digest = hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8)
                    got[i] = cache[s] = int.from_bytes(digest.digest(), "little")
        return np.array(got, dtype=U64)


def frame_ids(
    name: np.ndarray,
    system_name: np.ndarray,
    file: np.ndarray,
    module: np.ndarray,
    line: np.ndarray,
) -> np.ndarray:
    """Ids of frames from the hashes of their strings and their line numbers."""
    h = np.full(name.shape, _SEED, dtype=U64)
    for part in (name, system_name, file, module, line.astype(np.int64).view(U64)):
        h = combine(h, part)
    return h


def sequence_ids(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The id of each sequence (of frame ids, root first) concatenated in ``flat``."""
    n = lengths.size
    if n == 0:
        return np.zeros(0, dtype=U64)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(flat.size, dtype=np.int64) - np.repeat(starts, lengths)
    with np.errstate(over="ignore"):
        terms = splitmix(flat.astype(U64) ^ (pos.astype(U64) + U64(1)) * _GOLDEN)
        sums = np.zeros(n, dtype=U64)
        nonempty = lengths > 0
        if flat.size:
            sums[nonempty] = np.add.reduceat(terms, starts[nonempty])
        return splitmix(sums ^ (lengths.astype(U64) * _C2) ^ _SEED)
