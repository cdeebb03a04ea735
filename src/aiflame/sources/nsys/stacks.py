"""CPU call stacks of an nsys export: sampled stacks (SAMPLING_CALLCHAINS) and the
backtraces attached to CUDA API calls (CUDA_CALLCHAINS), as interned frames.

Both tables hold one row per frame, ``stackDepth`` 0 being the innermost (leaf) frame.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator

from aiflame.model import FrameKind, ProfileBuilder
from aiflame.sources.nsys.db import NsysDB
from aiflame.symbolize.kinds import KindGuesser

# Frames of the profiler's own injection and of the driver below a CUDA API entry point:
# dropped from API backtraces when the entry point itself is not found by name.
_INJECTION_MODULES = ("libcupti", "libcuda.", "libToolsInjection", "libnvidia-", "libnvperf")
_VERSION_SUFFIX = re.compile(r"_v\d+$")


class CpuFrames:
    """Interns CPU frames from (symbol, module) StringIds; unresolved addresses are named
    after their module (``[libcuda.so.1]``) so that they merge instead of scattering."""

    def __init__(self, db: NsysDB, builder: ProfileBuilder) -> None:
        self._strings = db.strings
        self._builder = builder
        self._cache: dict[tuple[int, int, bool, bool], tuple[int, str, str]] = {}
        self._guess = KindGuesser()

    def get(
        self, symbol: int, module: int, unresolved: object, kernel_mode: object
    ) -> tuple[int, str, str]:
        """(frame id, symbol text, module base name)."""
        key = (symbol, module, bool(unresolved), bool(kernel_mode))
        hit = self._cache.get(key)
        if hit is None:
            text = self._strings.get(symbol, "")
            module_path = self._strings.get(module, "")
            base = os.path.basename(module_path)
            name = text
            if key[2] or not text:
                name = (base if base.startswith("[") else f"[{base}]") if base else "[unknown]"
            if key[3]:
                kind = FrameKind.KERNEL
            elif name == text and text.startswith("[") and text.endswith("]"):
                kind = FrameKind.LABEL  # nsys' own markers: [Broken backtraces], [Unknown]
            else:
                kind = self._guess(name)
            fid = self._builder.frame(name, kind, module=module_path)
            hit = self._cache[key] = (fid, text, base)
        return hit


Chain = tuple[tuple[int, str, str], ...]  # (frame id, symbol, module base name), leaf first


class Callchains:
    """The callchains of one table, aggregated by SQLite into one text key per chain.

    Fetching one row per chain rather than per frame, and parsing each distinct chain once,
    keeps large exports (millions of frames) fast: most samples repeat a few stacks.
    Exports also hold chains of calls that launched no GPU work, so the backtraces of
    CUDA calls are read in one pass rather than looked up one by one.
    """

    def __init__(self, db: NsysDB, table: str, frames: CpuFrames) -> None:
        self.db = db
        self.table = table
        self._frames = frames
        self._parsed: dict[str, Chain] = {}
        self._all: dict[int, Chain] | None = None
        cols = db.columns(table)
        self.present = {"id", "symbol", "module", "stackDepth"} <= cols.keys()
        flags = [f'coalesce("{c}", 0)' if c in cols else "0" for c in ("unresolved", "kernelMode")]
        # printf is the cheapest way found to build the key inside SQLite.
        fields = ", ".join(['"stackDepth"', '"symbol"', '"module"', *flags])
        self._key = f"group_concat(printf('%d,%d,%d,%d,%d', {fields}), ';')"

    def parse(self, key: str | None) -> Chain:
        if not key:
            return ()
        chain = self._parsed.get(key)
        if chain is None:
            items = sorted(tuple(int(x) for x in item.split(",")) for item in key.split(";"))
            get = self._frames.get
            chain = self._parsed[key] = tuple(get(s, m, u, k) for _, s, m, u, k in items)
        return chain

    def iter_all(self) -> Iterator[tuple[int, Chain]]:
        """(chain id, chain) for every chain, by increasing id."""
        if not self.present:
            return
        sql = f'SELECT "id", {self._key} FROM "{self.table}" GROUP BY "id" ORDER BY "id"'
        for cid, key in self.db.conn.execute(sql):
            yield cid, self.parse(key)

    def get(self, cid: int) -> Chain | None:
        """One chain by id, None when absent (all chains are read on the first call)."""
        if self._all is None:
            self._all = dict(self.iter_all())
        return self._all.get(cid)


def _api_names(names: Iterable[str]) -> set[str]:
    out = set()
    for n in names:
        out.add(n)
        out.add(_VERSION_SUFFIX.sub("", n))
    out.discard("")
    return out


def _api_frame(chain: Chain, names: set[str]) -> int | None:
    """Index of the leaf-most frame of ``chain`` that is one of the API ``names``."""
    return next((i for i, (_, sym, _) in enumerate(chain) if sym in names), None)


def callchain_offset(
    chains: Callable[[int], Chain | None], calls: Iterable[tuple[int, Iterable[str]]]
) -> int:
    """The shift between ``callchainId`` and CUDA_CALLCHAINS ids that makes backtraces
    match their calls by name: 0 for a sound export. Some exports (seen with nsys 2022.2)
    count callchainId from 0 but the callchains from 1, which would give every call the
    backtrace of the call before it."""
    hits = dict.fromkeys((0, 1, -1), 0)
    for chain_id, names in calls:
        wanted = _api_names(names)
        for off in hits:
            chain = chains(chain_id + off)
            if chain and _api_frame(chain, wanted) is not None:
                hits[off] += 1
    best = max(hits, key=lambda off: (hits[off], off == 0))
    return best if hits[best] > hits[0] else 0


def callers_of_api(chain: Chain, api_names: Iterable[str]) -> list[int]:
    """Frame ids of the callers of a CUDA API call, root first.

    The backtrace starts inside the driver and the profiler's injection library; the
    frames up to and including the API entry point (``cudaMemcpy`` for the call
    ``cudaMemcpy_v3020``) are dropped, since the API call gets its own frame.
    """
    at = _api_frame(chain, _api_names(api_names))
    if at is not None:
        cut = at + 1
    else:
        cut = 0
        while cut < len(chain) and chain[cut][2].startswith(_INJECTION_MODULES):
            cut += 1
    return [fid for fid, _, _ in reversed(chain[cut:])]
