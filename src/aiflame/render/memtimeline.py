"""The memory-over-time chart of a memory profile's page, and what it needs to show what
was live at any moment it draws.

The importer (:mod:`aiflame.sources.torch_memory.importer`) leaves in ``meta["memory_timeline"]`` a
decimated series (at most a few thousand points, the peak kept) and, per allocation, its
lifetime in points of that series (``blocks``: live at point ``k`` iff
``alloc <= k < free``). Here allocations with the same page node and the same lifetime are
merged (their bytes summed), so what the page carries is bounded by the points it draws
times the stacks, not by the length of the trace. The page (``assets/memchart.js``) sums
the bytes of the allocations live at a selected point, or at some moment of a selected
range, onto their stack's node, and redraws the flame graph with that as self values.

Sections (one zlib stream, like :mod:`aiflame.render.flamedata`'s): ``time`` (varint
deltas from the first point), ``live`` and ``reserved`` (bytes per point), then per merged
allocation ``node``, ``alloc``, ``free`` (byte planes) and ``size`` (varint).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiflame.model import Profile
from aiflame.render.flamedata import (
    ZLIB_LEVEL,
    Packed,
    _read_varints,
    _Sections,
    is_integral,
    varints,
)


def _blocks(profile: Profile) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The timeline and its per-allocation lifetimes, if the profile has a usable pair."""
    tl = profile.meta.get("memory_timeline")
    if not isinstance(tl, dict):
        return None
    blocks = tl.get("blocks")
    points = tl.get("time_us")
    if not isinstance(blocks, dict) or not isinstance(points, Sequence) or not points:
        return None
    first = blocks.get("first_sample")
    n = len(blocks.get("size") or ())
    if not isinstance(first, int) or first < 0 or first + n > len(profile):
        return None
    if not all(len(blocks.get(k) or ()) == n for k in ("alloc", "free")):
        return None
    return tl, blocks


def memory_stacks(profile: Profile) -> np.ndarray | None:
    """Stacks of the timeline's allocations, which the page must keep even when they have
    no value of their own (an allocation freed before the peak and never counted)."""
    found = _blocks(profile)
    if found is None:
        return None
    blocks = found[1]
    first = int(blocks["first_sample"])
    return profile.sample_stack[first : first + len(blocks["size"])]


def _add_numbers(sections: _Sections, name: str, values: np.ndarray) -> None:
    if is_integral(values):
        sections.add(name, varints(values), "varint", count=len(values))
    else:
        data = np.ascontiguousarray(values, dtype="<f8").tobytes()
        sections.add(name, data, "f64", count=len(values))


def pack_memory(profile: Profile, packed: Packed) -> tuple[dict[str, object], bytes] | None:
    """Header and compressed sections of the chart, or None when the profile has none."""
    found = _blocks(profile)
    if found is None or packed.page_node is None:
        return None
    tl, blocks = found
    time = np.asarray(tl["time_us"], dtype=np.float64)
    live = np.asarray(tl["live_bytes"], dtype=np.float64)
    reserved = np.asarray(tl.get("reserved_bytes") or np.zeros(len(time)), dtype=np.float64)
    m = len(time)
    if len(live) != m or len(reserved) != m:
        return None
    first = int(blocks["first_sample"])
    n = len(blocks["size"])
    stacks = profile.sample_stack[first : first + n]
    node = np.where(stacks >= 0, packed.page_node[np.maximum(stacks, 0)], -1)
    alloc = np.clip(np.asarray(blocks["alloc"], dtype=np.int64), 0, m)
    free = np.clip(np.asarray(blocks["free"], dtype=np.int64), 0, m)
    size = np.asarray(blocks["size"], dtype=np.float64)
    ok = node >= 0  # an allocation with no stack has no place in the flame graph
    node, alloc, free, size = node[ok], alloc[ok], free[ok], size[ok]
    # Merge allocations of one node with one lifetime (in points): bytes add up.
    key = (node * (m + 1) + alloc) * (m + 1) + free
    uniq, inverse = np.unique(key, return_inverse=True)
    merged_size = np.bincount(inverse, weights=size, minlength=len(uniq))
    u_free = uniq % (m + 1)
    u_alloc = (uniq // (m + 1)) % (m + 1)
    u_node = uniq // ((m + 1) * (m + 1))

    sections = _Sections()
    steps = np.diff(time, prepend=time[0])
    if is_integral(time) and is_integral(steps):
        sections.add("time", varints(steps), "varint-delta", count=m)
    else:
        sections.add("time", np.ascontiguousarray(time, "<f8").tobytes(), "f64", count=m)
    _add_numbers(sections, "live", live)
    _add_numbers(sections, "reserved", reserved)
    sections.add_uints("node", u_node)
    sections.add_uints("alloc", u_alloc)
    sections.add_uints("free", u_free)
    _add_numbers(sections, "size", merged_size)
    peak_index = int(tl.get("peak_index", int(np.argmax(live))))
    metric = profile.type_index("peak-bytes") if _has_type(profile, "peak-bytes") else 0
    header: dict[str, object] = {
        "device": tl.get("device", 0),
        "scope": tl.get("scope") or f"device {tl.get('device', 0)}",  # what the chart counts
        "unit": tl.get("unit", "us"),
        "points": m,
        "events": int(tl.get("points", m)),
        "peakIndex": peak_index,
        "peakBytes": float(live[peak_index]),
        "metric": metric,
        "blocks": len(uniq),
        "allocations": n,
        "legend": str(profile.meta.get("legend", "") or ""),
        "sections": sections.index,
    }
    return header, zlib.compress(b"".join(sections.parts), ZLIB_LEVEL)


def _has_type(profile: Profile, name: str) -> bool:
    return any(st.name == name for st in profile.sample_types)


def unpack_memory(header: dict[str, Any], payload: bytes) -> dict[str, np.ndarray]:
    """The chart's columns as ``assets/memchart.js`` reads them (for tests and tools)."""
    raw = zlib.decompress(payload)
    out: dict[str, np.ndarray] = {}
    for s in header["sections"]:
        body = raw[s["offset"] : s["offset"] + s["length"]]
        n = s["count"]
        if s["enc"] == "planes":
            col = np.zeros(n, dtype=np.int64)
            for j in range(s["width"]):
                col |= np.frombuffer(body, np.uint8, n, j * n).astype(np.int64) << (8 * j)
            out[s["name"]] = col
        elif s["enc"] == "f64":
            out[s["name"]] = np.frombuffer(body, "<f8", n).copy()
        else:
            vals = np.asarray(_read_varints(body, n)[0], dtype=np.float64)
            out[s["name"]] = np.cumsum(vals) if s["enc"] == "varint-delta" else vals
    return out
