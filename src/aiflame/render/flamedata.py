"""Pack a profile's call tree into the compact binary that the HTML page decodes.

The page must hold every node of trees with millions of them and still weigh a few MB, so
the tree travels as columns, not objects (memray and speedscope do the same):

* nodes in DFS preorder, children sorted by name (as flamegraph.pl orders them, but with
  numbers in names compared as numbers: ``Layer_2`` before ``Layer_10``), node 0
  being the synthetic root ``all``; a node is its frame id and its depth, stored as the
  number of levels closed since the previous node ("pops"), which is tiny and repetitive;
* self values per sample type as sparse lists (most nodes have no self value);
* a frame table (name, kind, file, line), frames numbered in that order so that sorting
  siblings by frame id sorts them by name, and one table of the strings they use.

Integer columns are split into byte planes (all low bytes, then the next ones...) so that
deflate sees the long runs of zero high bytes. Everything is one zlib stream, base64 in
the page, inflated by the browser's native ``DecompressionStream``. ``assets/data.js``
is the reader; :func:`unpack` is the Python reader the tests use.
"""

from __future__ import annotations

import json
import math
import zlib
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from aiflame.model import CallTree, FrameKind, Profile
from aiflame.model.strings import natural_key
from aiflame.render.visible import visible_all

FORMAT_VERSION = 1
ROOT_NAME = "all"
# Deflate level: 4 is within 5% of level 9 on frame-id columns and several times faster.
ZLIB_LEVEL = 4


@dataclass
class Packed:
    """What the page embeds: a JSON-able header and the compressed section bytes."""

    header: dict[str, object]
    payload: bytes
    # The page node of each tree node (= stack id of the profile), -1 where it was dropped.
    page_node: np.ndarray | None = None


# -- tree ordering --------------------------------------------------------------------------


# A level's vectorised pass costs about as much as this many nodes visited one by one.
_LEVEL_COST = 100


def level_order(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Node ids grouped by depth, and the bounds of each depth's group."""
    # A stable sort of 16-bit keys is a radix sort in numpy: linear time.
    small = np.int16 if int(depth.max(initial=0)) < 32767 else np.int32
    order = np.argsort(depth.astype(small), kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=0)) + 2))
    return order, bounds


def preorder(parent: np.ndarray, depth: np.ndarray, sort_key: np.ndarray) -> np.ndarray | None:
    """Node ids in depth-first preorder, siblings ascending by ``sort_key`` (ints >= 0),
    or None when ids 0..n-1 already are in that order.

    Importers that intern sorted stacks (folded) number nodes that way; that is checked
    first (in linear time), and then nothing moves, or only the few groups of siblings that
    the order of names with numbers moves. Otherwise it is vectorised per depth
    level (a Python DFS over millions of nodes would take seconds): subtree sizes bottom-up,
    then each node's position = its parent's position + 1 + the sizes of the siblings
    sorted before it.
    """
    n = len(parent)
    if n == 0:
        return None
    misordered = misordered_parents(parent, depth, sort_key)
    if misordered is not None and len(misordered) == 0:
        return None
    if (
        misordered is not None
        and len(misordered) <= LOCAL_REORDER_MAX
        and int(depth[misordered[misordered >= 0]].max(initial=0)) < LOCAL_REORDER_DEPTH
    ):
        return _reorder_children(depth, sort_key, misordered)
    order, bounds = level_order(depth)
    deep = (len(bounds) - 2) * _LEVEL_COST > n  # a few very deep stacks: node by node
    size = np.ones(n, dtype=np.int64)
    if deep:
        up, counts = parent.tolist(), size.tolist()
        for i in order[::-1].tolist():  # deepest first: a child before its parent
            if up[i] >= 0:
                counts[up[i]] += counts[i]
        size = np.asarray(counts, dtype=np.int64)
    else:
        for d in range(len(bounds) - 2, 0, -1):
            idx = order[bounds[d] : bounds[d + 1]]
            np.add.at(size, parent[idx], size[idx])
    # Siblings are contiguous after sorting by (parent, key); offsets are the exclusive
    # running sums of subtree sizes within each sibling group.
    sib = np.argsort((parent + 1) * (int(sort_key.max()) + 1) + sort_key, kind="stable")
    sizes = size[sib]
    running = np.cumsum(sizes) - sizes
    sib_parent = parent[sib]
    first = np.ones(n, dtype=bool)
    first[1:] = sib_parent[1:] != sib_parent[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    offset = np.empty(n, dtype=np.int64)
    offset[sib] = running - running[group_start]
    pos = np.empty(n, dtype=np.int64)
    roots = order[bounds[0] : bounds[1]]
    pos[roots] = offset[roots]
    if deep:
        up, off, at = parent.tolist(), offset.tolist(), pos.tolist()
        for i in order[bounds[1] :].tolist():  # by depth: a parent before its children
            at[i] = at[up[i]] + 1 + off[i]
        pos = np.asarray(at, dtype=np.int64)
    else:
        for d in range(1, len(bounds) - 1):
            idx = order[bounds[d] : bounds[d + 1]]
            pos[idx] = pos[parent[idx]] + 1 + offset[idx]
    out = np.empty(n, dtype=np.int64)
    out[pos] = np.arange(n)
    return out


def is_sorted_preorder(parent: np.ndarray, depth: np.ndarray, sort_key: np.ndarray) -> bool:
    """Whether ids 0..n-1 are a DFS preorder with siblings ascending by ``sort_key``."""
    misordered = misordered_parents(parent, depth, sort_key)
    return misordered is not None and len(misordered) == 0


def misordered_parents(
    parent: np.ndarray, depth: np.ndarray, sort_key: np.ndarray
) -> np.ndarray | None:
    """If ids 0..n-1 are a DFS preorder, the parents (-1: the roots) whose children are not
    ascending by ``sort_key``; None if they are no preorder at all.

    Walking the ids in order, each step goes one level down to a first child (whose parent
    must be the node before it), or comes back up to a next sibling: then the last earlier
    node at its depth must share its parent, and should sort before it. ``depth`` must agree
    with ``parent``.
    """
    if depth[0] != 0:
        return None
    step = np.diff(depth)
    if np.any(step > 1):
        return None
    down = np.flatnonzero(step == 1) + 1
    if not np.array_equal(parent[down], down - 1):
        return None
    # Nodes grouped by depth, ascending ids within a group: the one before a next sibling
    # in its group is the last earlier node at its depth, its previous sibling.
    order, _ = level_order(depth)
    is_next = np.ones(len(depth), dtype=bool)
    is_next[down] = False
    is_next[0] = False
    at = np.flatnonzero(is_next[order])
    if len(at) and at[0] == 0:
        return None
    nxt, prev = order[at], order[at - 1]
    if not (np.array_equal(depth[prev], depth[nxt]) and np.array_equal(parent[prev], parent[nxt])):
        return None
    return np.unique(parent[nxt[sort_key[prev] >= sort_key[nxt]]])


# Up to this many parents with misordered children, only their subtrees are rearranged
# (recursively: not below this depth).
LOCAL_REORDER_MAX = 2000
LOCAL_REORDER_DEPTH = 400


def _reorder_children(depth: np.ndarray, sort_key: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """The preorder of a tree whose ids are a preorder except that the children of
    ``parents`` (sorted ids, -1 for the roots) are out of order: those children's subtrees
    (contiguous id ranges) are put in order, the rest stays, so the cost follows the
    rearranged subtrees, not the tree (names compared as numbers move a few siblings)."""
    n = len(depth)
    misordered = parents.tolist()

    def end_of(p: int) -> int:
        if p < 0:
            return n
        after = np.flatnonzero(depth[p + 1 :] <= depth[p])
        return p + 1 + int(after[0]) if len(after) else n

    def arrange(p: int, end: int) -> list[np.ndarray]:
        """Ids of p's subtree [p, end) (without p) in order, as ranges."""
        lo = p + 1
        starts = lo + np.flatnonzero(depth[lo:end] == (depth[p] + 1 if p >= 0 else 0))
        bounds = [*starts.tolist(), end]
        kids = sorted(range(len(starts)), key=lambda k: int(sort_key[starts[k]]))
        out: list[np.ndarray] = []
        for k in kids if p in wanted else range(len(starts)):
            c, c_end = bounds[k], bounds[k + 1]
            j = bisect_right(misordered, c)
            if (j < len(misordered) and misordered[j] < c_end) or c in wanted:
                out.append(np.asarray([c]))
                out.extend(arrange(c, c_end))  # a misordered parent inside: recurse
            else:
                out.append(np.arange(c, c_end))
        return out

    wanted = set(misordered)
    pieces: list[np.ndarray] = []
    pos = 0
    for p in misordered:
        if p < pos and p >= 0:
            continue  # inside a subtree already rearranged
        start = max(p, 0)
        pieces.append(np.arange(pos, start + (1 if p >= 0 else 0)))
        end = end_of(p)
        pieces.extend(arrange(p, end))
        pos = end
    pieces.append(np.arange(pos, n))
    return np.concatenate(pieces).astype(np.int64)


# -- encodings ------------------------------------------------------------------------------


def byte_width(max_value: int) -> int:
    return max(1, math.ceil(max(int(max_value), 1).bit_length() / 8))


def planes(values: np.ndarray, width: int) -> bytes:
    """Unsigned integers as ``width`` byte planes: every low byte, then every next byte."""
    raw = np.ascontiguousarray(values, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return raw[:, :width].T.tobytes()


def varints(values: np.ndarray) -> bytes:
    """LEB128 of non-negative integers below 2**53 (what a JS number holds exactly)."""
    v = np.ascontiguousarray(values, dtype=np.uint64)
    nbytes = np.ones(len(v), dtype=np.int64)
    for shift in range(7, 56, 7):
        nbytes += v >= np.uint64(1 << shift)
    out = np.zeros(int(nbytes.sum()), dtype=np.uint8)
    start = np.cumsum(nbytes) - nbytes
    for k in range(int(nbytes.max(initial=1))):
        has = nbytes > k
        chunk = (v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (nbytes[has] > k + 1).astype(np.uint64) << np.uint64(7)
        out[start[has] + k] = (chunk | more).astype(np.uint8)
    return out.tobytes()


def is_integral(values: np.ndarray) -> bool:
    return bool(
        np.all(np.isfinite(values))
        and np.all(values >= 0)
        and np.all(values < 2.0**53)
        and np.all(values == np.floor(values))
    )


class _Sections:
    """Accumulates named sections; the header records where each one lies."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.index: list[dict[str, object]] = []
        self.offset = 0

    def add(self, name: str, data: bytes, enc: str, **extra: object) -> None:
        self.index.append({"name": name, "enc": enc, "offset": self.offset, "length": len(data)})
        self.index[-1].update(extra)
        self.parts.append(data)
        self.offset += len(data)

    def add_uints(self, name: str, values: np.ndarray) -> None:
        width = byte_width(int(values.max(initial=0)))
        self.add(name, planes(values, width), "planes", width=width, count=len(values))

    def add_values(self, name: str, values: np.ndarray) -> None:
        """A value column that is mostly zero: positions of the non-zeros, then their values."""
        nz = np.flatnonzero(values)
        gaps = np.diff(nz, prepend=-1) - 1
        vals = values[nz]
        if is_integral(vals):
            body, venc = varints(vals), "varint"
        else:
            body, venc = np.ascontiguousarray(vals, dtype="<f8").tobytes(), "f64"
        self.add(name, varints(gaps) + body, "sparse", count=len(nz), values=venc)


# -- the tree and its tables ----------------------------------------------------------------


def _kept_nodes(tree: CallTree, also: np.ndarray | None = None) -> np.ndarray:
    """Nodes with a value in some sample type, plus (for negative values) their ancestors,
    plus the nodes ``also`` and their ancestors."""
    keep = np.any(tree.total_value != 0, axis=1)
    if also is not None and len(also):
        cur = np.unique(also[(also >= 0) & (also < len(keep))])
        while len(cur):
            cur = cur[~keep[cur]]
            keep[cur] = True
            cur = tree.parent[cur]
            cur = cur[cur >= 0]
    if np.any(tree.self_value < 0):
        order, bounds = level_order(tree.depth)
        for d in range(len(bounds) - 2, 0, -1):
            idx = order[bounds[d] : bounds[d + 1]]
            keep[tree.parent[idx[keep[idx]]]] = True
    return np.flatnonzero(keep)


def _frame_table(profile: Profile, used: np.ndarray) -> tuple[np.ndarray, list[str], dict]:
    """Renumber the used frames in (name, kind, file, line) order; returns old->new ids,
    the strings they need, and the frame columns."""
    frames, strings = profile.frames, profile.strings.strings
    name = np.asarray(frames.name, dtype=np.int64)[used]
    kind = np.asarray(frames.kind, dtype=np.int64)[used]
    file = np.asarray(frames.file, dtype=np.int64)[used]
    line = np.asarray(frames.line, dtype=np.int64)[used]
    # Rank the distinct names once in Python (natural order: Layer_2 before Layer_10), then
    # sort frames with numpy.
    uniq_names, name_inv = np.unique(name, return_inverse=True)
    by_text = sorted(range(len(uniq_names)), key=lambda i: natural_key(strings[uniq_names[i]]))
    name_rank = np.empty(len(uniq_names), dtype=np.int64)
    name_rank[by_text] = np.arange(len(uniq_names))
    order = np.lexsort((line, file, kind, name_rank[name_inv]))
    remap = np.full(len(frames) + 1, -1, dtype=np.int64)
    remap[used[order]] = np.arange(len(used))
    # Strings: "" first, then the names in sorted order, then files.
    str_remap = np.full(len(strings), -1, dtype=np.int64)
    str_remap[0] = 0
    str_list = [""]
    for s in uniq_names[by_text].tolist() + np.unique(file).tolist():
        if str_remap[s] < 0:
            str_remap[s] = len(str_list)
            str_list.append(strings[s])
    columns = {
        "name": str_remap[name[order]],
        "kind": kind[order],
        "file": str_remap[file[order]],
        "line": np.maximum(line[order], 0),
    }
    return remap, str_list, columns


def _strings_section(strings: list[str]) -> bytes:
    # ASCII JSON (non-ASCII as \u escapes): the browser parses it in one native call, and
    # names that are not valid Unicode (lone surrogates) still round-trip.
    data = json.dumps(strings, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    if b"\\" in data:  # escapes: there may be control or bidirectional characters
        shown = visible_all(strings)  # shown as <U+XXXX>, so a name cannot pose as another
        if shown != strings:
            data = json.dumps(shown, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return data


def pack(
    profile: Profile,
    *,
    title: str = "",
    subtitle: str = "",
    metric: int = 0,
    inverted: bool = False,
    extra: dict[str, object] | None = None,
    keep: np.ndarray | None = None,
) -> Packed:
    """The page data of ``profile``; ``metric`` is the column shown first; the stacks
    ``keep`` stay in the page even with no value (the page may give them one later)."""
    tree = CallTree.from_profile(profile)
    kept = _kept_nodes(tree, keep)
    n_real = len(kept)
    if n_real == len(tree):  # the usual case: every node has a value; no copies
        parent, frame_old, depth = tree.parent, tree.frame, tree.depth
    else:
        # Re-index parents into the kept subset (kept is sorted, parents are kept too).
        parent_old = tree.parent[kept]
        parent = np.where(parent_old >= 0, np.searchsorted(kept, np.maximum(parent_old, 0)), -1)
        frame_old, depth = tree.frame[kept], tree.depth[kept]
    used_frames = np.flatnonzero(np.bincount(frame_old, minlength=len(profile.frames)))
    remap, strings, fcols = _frame_table(profile, used_frames)
    frame = remap[frame_old]
    order = preorder(parent, depth, frame)
    in_order = order is None

    root_frame = len(used_frames)  # one past the table: the synthetic "all"
    node_frame = np.empty(n_real + 1, dtype=np.int64)
    node_frame[0] = root_frame
    node_frame[1:] = frame if in_order else frame[order]
    node_depth = np.empty(n_real + 1, dtype=np.int64)
    node_depth[0] = 0
    node_depth[1:] = depth if in_order else depth[order]
    node_depth[1:] += 1
    pops = np.zeros(n_real + 1, dtype=np.int64)
    pops[1:] = node_depth[:-1] + 1 - node_depth[1:]
    source_node = kept if in_order else kept[order]  # tree node of each page node

    sections = _Sections()
    sections.add_uints("node.frame", node_frame)
    sections.add_uints("node.pops", pops)
    ntypes = len(profile.sample_types)
    for t in range(ntypes):
        col = np.zeros(n_real + 1)
        col[1:] = tree.self_value[source_node, t]
        sections.add_values(f"node.self.{t}", col)
    sections.add_uints("frame.name", fcols["name"])
    sections.add_uints("frame.kind", fcols["kind"])
    sections.add_uints("frame.file", fcols["file"])
    sections.add("frame.line", varints(fcols["line"]), "varint", count=len(fcols["line"]))
    sections.add("strings", _strings_section(strings), "strings", count=len(strings))

    totals = profile.totals()
    header: dict[str, object] = {
        "version": FORMAT_VERSION,
        "title": title,
        "subtitle": subtitle,
        "types": [
            {"name": st.name, "unit": st.unit, "total": float(totals[i])}
            for i, st in enumerate(profile.sample_types)
        ],
        "metric": metric,
        "inverted": inverted,
        "nodes": n_real + 1,
        "frames": len(used_frames),
        "rootFrame": root_frame,
        "rootName": ROOT_NAME,
        "maxDepth": int(node_depth.max(initial=0)),
        "kinds": {int(k): k.slug for k in FrameKind},
        "sections": sections.index,
    }
    if extra:
        header.update(extra)
    payload = zlib.compress(b"".join(sections.parts), ZLIB_LEVEL)
    page_node = np.full(len(tree), -1, dtype=np.int64)
    page_node[source_node] = np.arange(1, n_real + 1)
    return Packed(header, payload, page_node)


# -- reading back (tests and tools) ---------------------------------------------------------


def _read_varints(data: bytes, count: int, pos: int = 0) -> tuple[list[int], int]:
    out = []
    for _ in range(count):
        value = shift = 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        out.append(value)
    return out, pos


def unpack(header: dict, payload: bytes) -> dict[str, object]:
    """Decode a page's data like ``assets/data.js`` does: preorder node columns,
    per-type self values, the frame table and the strings."""
    raw = zlib.decompress(payload)
    sec = {s["name"]: s for s in header["sections"]}  # type: ignore[index, union-attr]

    def body(name: str) -> bytes:
        s = sec[name]
        return raw[s["offset"] : s["offset"] + s["length"]]

    def uints(name: str) -> np.ndarray:
        s, data = sec[name], body(name)
        w, n = s["width"], s["count"]
        out = np.zeros(n, dtype=np.int64)
        for j in range(w):
            out |= np.frombuffer(data, np.uint8, n, j * n).astype(np.int64) << (8 * j)
        return out

    n = int(header["nodes"])  # type: ignore[arg-type]
    frame = uints("node.frame")
    pops = uints("node.pops")
    depth = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        depth[i] = depth[i - 1] + 1 - pops[i]
    selfs = []
    for t in range(len(header["types"])):  # type: ignore[arg-type]
        s, data = sec[f"node.self.{t}"], body(f"node.self.{t}")
        gaps, pos = _read_varints(data, s["count"])
        if s["values"] == "varint":
            vals = [float(v) for v in _read_varints(data, s["count"], pos)[0]]
        else:
            vals = np.frombuffer(data, "<f8", s["count"], pos).tolist()
        col = np.zeros(n)
        col[np.cumsum(np.asarray(gaps, dtype=np.int64) + 1) - 1] = vals
        selfs.append(col)
    strings = json.loads(body("strings"))
    return {
        "frame": frame,
        "depth": depth,
        "self": selfs,
        "frame_name": uints("frame.name"),
        "frame_kind": uints("frame.kind"),
        "frame_file": uints("frame.file"),
        "frame_line": np.asarray(_read_varints(body("frame.line"), sec["frame.line"]["count"])[0]),
        "strings": strings,
    }
