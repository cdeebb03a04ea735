"""Merged stacks of a selection: as an aiflame Profile (the flame graph page, pprof) and as
Pyroscope's ``FlameGraph`` (names and levels, what Grafana draws).

Stack and frame rows never change once written, so they are cached in memory by id: a
query fetches from the store only the stacks it has not seen.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from aiflame.model import FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.proto.pyroscope.querier.v1 import querier_pb2
from aiflame.server.labels import ProfileType
from aiflame.server.query.select import Selection, stack_values_sql
from aiflame.server.store import rollups
from aiflame.server.store.connection import Store
from aiflame.sources.stacktrie import intern_paths

_STACK_CACHE_LIMIT = 400_000
_FRAME_CACHE_LIMIT = 1_000_000
DEFAULT_MAX_NODES = 16384
MAX_NODES = 1 << 20


class Symbols:
    """Caches of stack id -> frame ids and frame id -> (name, kind, file, line, module)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.stacks: dict[int, np.ndarray] = {}
        self.frames: dict[int, tuple[str, int, str, int, str]] = {}
        # Function names interned once, and each stack as name ids (how flame graphs of
        # Pyroscope and Grafana merge frames).
        self.names: list[str] = ["total"]
        self._name_index: dict[str, int] = {"total": 0}
        self._stack_names: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def stack_frames(self, ids: np.ndarray) -> list[np.ndarray]:
        keys = ids.tolist()
        with self._lock:
            missing = [k for k in keys if k not in self.stacks]
        if missing:
            t = self.store.arrow(
                f"SELECT stack_id, any(frames) AS frames FROM {self.store.db}.stacks "
                "WHERE stack_id IN {ids:Array(UInt64)} GROUP BY stack_id",
                {"ids": missing},
            )
            got = t.column("stack_id").to_numpy().tolist()
            lists = t.column("frames").combine_chunks()
            offsets = lists.offsets.to_numpy()
            values = lists.values.to_numpy()
            with self._lock:
                if len(self.stacks) > _STACK_CACHE_LIMIT:
                    self.stacks.clear()
                for i, sid in enumerate(got):
                    self.stacks[sid] = values[offsets[i] : offsets[i + 1]]
        with self._lock:
            empty = np.zeros(0, dtype=np.uint64)
            return [self.stacks.get(k, empty) for k in keys]

    def frame_info(self, ids: list[int]) -> dict[int, tuple[str, int, str, int, str]]:
        with self._lock:
            missing = [k for k in ids if k not in self.frames]
        if missing:
            rows = self.store.rows(
                f"SELECT frame_id, any(name), any(kind), any(file), any(line), any(module) "
                f"FROM {self.store.db}.frames WHERE frame_id IN {{ids:Array(UInt64)}} "
                "GROUP BY frame_id",
                {"ids": missing},
            )
            with self._lock:
                if len(self.frames) > _FRAME_CACHE_LIMIT:
                    self.frames.clear()
                for fid, name, kind, file, line, module in rows:
                    self.frames[int(fid)] = (name, int(kind), file, int(line), module)
        with self._lock:
            unknown = ("[unknown frame]", int(FrameKind.UNKNOWN), "", 0, "")
            return {k: self.frames.get(k, unknown) for k in ids}

    def name_paths(self, ids: np.ndarray, seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The stacks as name ids (root first), flattened, and their lengths."""
        keys = ids.tolist()
        with self._lock:
            cached = [self._stack_names.get(k) for k in keys]
        missing = [i for i, c in enumerate(cached) if c is None]
        if missing:
            cat = np.concatenate([seqs[i] for i in missing])
            uniq, inv = np.unique(cat, return_inverse=True)
            info = self.frame_info(uniq.tolist())
            with self._lock:
                index, names = self._name_index, self.names
                of_uniq = np.empty(uniq.size, dtype=np.int32)
                for j, f in enumerate(uniq.tolist()):
                    name = info[f][0]
                    i = index.get(name)
                    if i is None:
                        i = index[name] = len(names)
                        names.append(name)
                    of_uniq[j] = i
                if len(self._stack_names) > _STACK_CACHE_LIMIT:
                    self._stack_names.clear()
                sizes = np.fromiter((seqs[i].size for i in missing), dtype=np.int64)
                parts = np.split(of_uniq[inv], np.cumsum(sizes)[:-1])
                for i, arr in zip(missing, parts, strict=True):
                    self._stack_names[keys[i]] = cached[i] = arr
        done = [c if c is not None else np.zeros(0, dtype=np.int32) for c in cached]
        lengths = np.fromiter((c.size for c in done), dtype=np.int64, count=len(done))
        flat = np.concatenate(done) if done else np.zeros(0, dtype=np.int32)
        return flat, lengths


@dataclass
class Merged:
    """Stacks of a selection with their summed values: frame ids root first, flattened."""

    frames: np.ndarray  # uint64 frame ids
    lengths: np.ndarray
    values: np.ndarray  # int64, one per stack
    ids: np.ndarray | None = None  # the stack ids
    seqs: list[np.ndarray] | None = None  # each stack's frame ids

    @property
    def total(self) -> int:
        return int(self.values.sum())


def merged_stacks(store: Store, symbols: Symbols, sel: Selection) -> Merged:
    params: dict[str, object] = {}
    # (a selection of profile or span ids reads their samples, never the roll-ups)
    mark = None if sel.profile_ids or sel.span_ids else rollups.watermark_ms(store)
    sql = stack_values_sql(sel, store.db, params, mark)
    t = store.arrow(sql, params)
    ids = t.column("stack_id").to_numpy()
    values = t.column("value").to_numpy().astype(np.int64)
    seqs = symbols.stack_frames(ids)
    lengths = np.fromiter((s.size for s in seqs), dtype=np.int64, count=len(seqs))
    frames = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.uint64)
    return Merged(frames.astype(np.uint64), lengths, values, ids, seqs)


def select_call_site(merged: Merged, symbols: Symbols, call_site: list[str]) -> Merged:
    """Only the stacks whose functions, root first, begin with ``call_site`` (Pyroscope's
    ``StackTraceSelector.call_site``; a leading ``total``, the flame graph's root, is no
    function and is skipped)."""
    if call_site and call_site[0] == "total":
        call_site = call_site[1:]
    if not call_site or merged.ids is None:
        return merged
    flat, lengths = symbols.name_paths(merged.ids, merged.seqs or [])
    want = [symbols._name_index.get(n, -1) for n in call_site]
    starts = np.cumsum(lengths) - lengths
    ok = lengths >= len(want)
    for j, w in enumerate(want):
        at = np.minimum(starts + j, max(flat.size - 1, 0))
        ok &= (flat[at] == w) if flat.size else False
    keep = np.flatnonzero(ok)
    seqs = [merged.seqs[i] for i in keep.tolist()] if merged.seqs is not None else None
    frames = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.uint64)
    return Merged(frames, merged.lengths[keep], merged.values[keep], merged.ids[keep], seqs)


OTHER_FRAME = 0  # the frame id of what truncation folded (content ids are never 0)


def to_profile(
    merged: Merged,
    symbols: Symbols,
    profile_type: str,
    title: str = "",
    max_nodes: int | None = None,
) -> Profile:
    """The merged stacks as an aiflame Profile with one sample type (the profile type's);
    with ``max_nodes``, the call tree of frames truncated as the flame graph is."""
    pt = ProfileType.parse(profile_type)
    b = ProfileBuilder([SampleType(pt.sample_type, pt.sample_unit or "count")])
    if max_nodes:
        merged = truncated_stacks(merged, node_limit(max_nodes))
    uniq, local = np.unique(merged.frames, return_inverse=True)
    info = symbols.frame_info([f for f in uniq.tolist() if f != OTHER_FRAME])
    info[OTHER_FRAME] = ("other", int(FrameKind.UNKNOWN), "", 0, "")
    ids = np.array([b.frame(*_frame_args(info[f])) for f in uniq.tolist()], dtype=np.int64)
    leaf = intern_paths(b.stacks, ids[local] if local.size else local, merged.lengths)
    b.add_many(leaf, merged.values.astype(np.float64).reshape(-1, 1))
    b.meta["title"] = title
    b.meta["profile_type"] = profile_type
    return b.build()


def truncated_stacks(merged: Merged, max_nodes: int) -> Merged:
    """The stacks of the call tree of frames (not names) truncated to ``max_nodes`` nodes,
    what was folded under a node now one ``other`` frame below it."""
    uniq, local = np.unique(merged.frames, return_inverse=True)
    labels = [""] + [str(i) for i in range(uniq.size)]  # id 0 is the root ("total")
    tree = truncate(build_tree(local + 1, merged.lengths, merged.values.reshape(-1, 1), labels),
                    max_nodes)  # fmt: skip
    if tree.folded_name < 0:
        return merged
    # the tree's names are the labels above: a frame's index in uniq, or "other"
    frame_of = np.array(
        [
            OTHER_FRAME if k == 0 or k == tree.folded_name else int(uniq[int(tree.names[k])])
            for k in range(len(tree.names))
        ],
        dtype=np.uint64,
    )
    rows = np.flatnonzero(tree.self_value[:, 0])
    rows = rows[rows != 0]
    seqs: list[np.ndarray] = []
    for node in rows.tolist():
        path = []
        while node > 0:
            path.append(int(tree.name[node]))
            node = int(tree.parent[node])
        seqs.append(frame_of[np.asarray(path[::-1], dtype=np.int64)])
    lengths = np.fromiter((x.size for x in seqs), dtype=np.int64, count=len(seqs))
    frames = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.uint64)
    return Merged(frames, lengths, tree.self_value[rows, 0].astype(np.int64), None, seqs)


def _frame_args(info: tuple[str, int, str, int, str]) -> tuple[str, FrameKind, str, int, str]:
    name, kind, file, line, module = info
    try:
        k = FrameKind(kind)
    except ValueError:
        k = FrameKind.UNKNOWN
    return name, k, file, line, module


# -- Pyroscope's flame graph encoding ---------------------------------------------------------
@dataclass
class NameTree:
    """The call tree by function name (how Pyroscope and Grafana merge frames), with one or
    more value columns: node 0 is the root ("total"); a parent comes before its children."""

    names: list[str]
    parent: np.ndarray
    name: np.ndarray  # index into names
    depth: np.ndarray
    self_value: np.ndarray  # (nodes, columns)
    total: np.ndarray  # (nodes, columns)
    folded_name: int = -1  # the name index of the "other" nodes truncation made (drawn last)


def name_tree(merged: Merged, symbols: Symbols, values: np.ndarray | None = None) -> NameTree:
    """The by-name call tree of merged stacks; ``values``: (stacks, columns), by default
    the stacks' values. Nodes are numbered depth by depth, each depth left to right
    (children ordered by name), which is the order of Pyroscope's levels."""
    ids = merged.ids if merged.ids is not None else np.zeros(0, dtype=np.uint64)
    flat, lengths = symbols.name_paths(ids, merged.seqs or [])
    vals = merged.values.reshape(-1, 1) if values is None else values
    return build_tree(flat, lengths, vals, symbols.names)


def build_tree(
    flat: np.ndarray, lengths: np.ndarray, values: np.ndarray, all_names: list[str]
) -> NameTree:
    used = np.flatnonzero(np.bincount(flat, minlength=1)) if flat.size else np.zeros(0, np.int64)
    used = used[used != 0]
    names = ["total", *(all_names[i] for i in used.tolist())]
    local = np.zeros(max(len(all_names), int(flat.max()) + 1 if flat.size else 1), dtype=np.int64)
    local[used] = np.arange(1, used.size + 1)
    # Rank of each local name in alphabetical order: children are laid out by name.
    by_name = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names), dtype=np.int64)
    rank[by_name] = np.arange(len(names))
    unrank = np.asarray(by_name, dtype=np.int64)
    seq = rank[local[flat]] if flat.size else flat.astype(np.int64)
    n = lengths.size
    starts = np.cumsum(lengths) - lengths
    node = np.zeros(n, dtype=np.int64)
    leaf = np.zeros(n, dtype=np.int64)
    parents, labels, depths = [np.array([-1])], [np.array([0])], [np.array([0])]
    next_id = 1
    width = len(names)
    active = np.flatnonzero(lengths > 0)
    d = 0
    while active.size:
        keys = node[active] * width + seq[starts[active] + d]
        uniq, inv = np.unique(keys, return_inverse=True)
        parents.append(uniq // width)
        labels.append(unrank[uniq % width])
        depths.append(np.full(uniq.size, d + 1))
        node[active] = next_id + inv
        next_id += uniq.size
        done = lengths[active] == d + 1
        leaf[active[done]] = node[active[done]]
        active = active[~done]
        d += 1
    parent = np.concatenate(parents)
    depth = np.concatenate(depths)
    k = values.shape[1]
    self_v = np.zeros((next_id, k), dtype=np.int64)
    for c in range(k):
        self_v[:, c] = np.bincount(leaf, weights=values[:, c], minlength=next_id).astype(np.int64)
    total = self_v.copy()
    bounds = np.searchsorted(depth, np.arange(d + 2))
    for dd in range(d, 0, -1):
        lo, hi = bounds[dd], bounds[dd + 1]
        # The parents of depth dd are the nodes of depth dd - 1: summed into those alone (a
        # count over every node at every depth is quadratic in a 70,000-frame stack).
        plo, phi = bounds[dd - 1], bounds[dd]
        for c in range(k):
            total[plo:phi, c] += np.bincount(
                parent[lo:hi] - plo, weights=total[lo:hi, c], minlength=phi - plo
            ).astype(np.int64)
    return NameTree(names, parent, np.concatenate(labels), depth, self_v, total)


def min_value(rank: np.ndarray, max_nodes: int) -> int:
    """The smallest rank a node needs to be drawn: the ``max_nodes``-th largest rank, or 0
    when there are no more nodes than that (Pyroscope's ``minValue``: ties are all kept)."""
    if max_nodes < 1 or rank.size <= max_nodes:
        return 0
    return int(np.partition(rank, rank.size - max_nodes)[rank.size - max_nodes])


def truncate(tree: NameTree, max_nodes: int, count_root: bool = False) -> NameTree:
    """The nodes whose rank (their total; over several columns, the largest) is at least
    the ``max_nodes``-th largest, the rest of each parent's children folded into one
    ``other`` child placed after them: Pyroscope's truncation, which fills the budget (the
    ``other`` nodes and the root come on top of it). ``count_root``: the root is one of the
    ranked nodes, as in Pyroscope's diff."""
    rank = tree.total.max(axis=1) if tree.total.shape[1] > 1 else tree.total[:, 0]
    n = rank.size
    ranked = rank if count_root else rank[1:]
    floor = min_value(ranked, max_nodes)
    if floor == 0 and "other" not in tree.names:
        return tree
    keep = rank >= floor
    if "other" in tree.names:  # a node of the data named "other" is folded, as Pyroscope does
        keep &= tree.name != tree.names.index("other")
    keep[0] = True
    for d in range(1, int(tree.depth.max()) + 1 if n else 0):  # a kept node's parent is kept
        at = np.flatnonzero(tree.depth == d)
        keep[at] &= keep[tree.parent[at]]
    if keep.all():
        return tree
    dropped = np.flatnonzero(~keep & keep[np.maximum(tree.parent, 0)])
    up = np.unique(tree.parent[dropped])
    kept = np.flatnonzero(keep)
    remap = np.full(n, -1, dtype=np.int64)
    remap[kept] = np.arange(kept.size)
    sums = np.zeros_like(tree.total)
    np.add.at(sums, tree.parent[dropped], tree.total[dropped])
    parent = np.concatenate((remap[np.maximum(tree.parent[kept], 0)], remap[up]))
    parent[0] = -1
    return NameTree(
        names=[*tree.names, "other"],
        parent=parent,
        name=np.concatenate((tree.name[kept], np.full(up.size, len(tree.names)))),
        depth=np.concatenate((tree.depth[kept], tree.depth[up] + 1)),
        self_value=np.concatenate((tree.self_value[kept], sums[up])),
        total=np.concatenate((tree.total[kept], sums[up])),
        folded_name=len(tree.names),
    )


def levels(tree: NameTree, column: int = 0) -> list[list[int]]:
    """Pyroscope's level encoding of one value column: per depth, [x offset from the
    previous node's end, total, self, name index] for each node left to right (children
    ordered by name: the same order for every column, so the sides of a diff line up)."""
    n = tree.parent.size
    total = tree.total[:, column]
    self_v = tree.self_value[:, column]
    by_name = sorted(range(len(tree.names)), key=tree.names.__getitem__)
    name_rank = np.empty(len(tree.names), dtype=np.int64)
    name_rank[by_name] = np.arange(len(by_name))
    if tree.folded_name >= 0:  # what truncation folded comes after its siblings
        name_rank[tree.folded_name] = len(by_name)
    x = np.zeros(n, dtype=np.int64)
    order_in_level = np.zeros(n, dtype=np.int64)
    out: list[list[int]] = []
    for d in range(int(tree.depth.max()) + 1 if n else 0):
        at = np.flatnonzero(tree.depth == d)
        if d > 0:
            key = order_in_level[tree.parent[at]] * (len(tree.names) + 1) + name_rank[tree.name[at]]
            at = at[np.argsort(key, kind="stable")]
            p = tree.parent[at]
            tot = total[at]
            cum = np.cumsum(tot) - tot
            first = np.ones(at.size, dtype=bool)
            first[1:] = p[1:] != p[:-1]
            group_start = np.maximum.accumulate(np.where(first, np.arange(at.size), 0))
            x[at] = x[p] + cum - cum[group_start]
        order_in_level[at] = np.arange(at.size)
        xs, tot = x[at], total[at]
        delta = xs - np.concatenate(([0], (xs + tot)[:-1]))
        out.append(np.stack((delta, tot, self_v[at], tree.name[at]), axis=1).ravel().tolist())
    return out


def node_limit(max_nodes: int | None) -> int:
    return DEFAULT_MAX_NODES if not max_nodes or max_nodes <= 0 else min(max_nodes, MAX_NODES)


def flame_graph(merged: Merged, symbols: Symbols, max_nodes: int | None) -> querier_pb2.FlameGraph:
    tree = truncate(name_tree(merged, symbols), node_limit(max_nodes))
    fg = querier_pb2.FlameGraph(
        names=tree.names,
        total=int(tree.total[0, 0]),
        max_self=int(tree.self_value[:, 0].max()),
    )
    for row in levels(tree):
        fg.levels.add(values=row)
    return fg
