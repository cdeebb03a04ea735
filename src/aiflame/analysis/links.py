"""Links from the findings of ``aiflame analyze`` into the full-stack flame graph.

The report's flame graph page is built from the same traces (one root frame per trace when
there are several). A finding's evidence names stacks as the trace wrote them (raw Python
frames like ``path/file.py(12): fn``, operators, runtime calls, innermost last, possibly cut
at the top); each is found in the flame graph's call tree and becomes a URL fragment
(``render/assets/fragment.js``) that zooms to it, with the metric and search that show
the pattern (e.g. the CPU time of the synchronize calls under it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

import numpy as np

from aiflame.analysis.schema import Finding
from aiflame.analysis.stacks import ANY_STEP, STEP_NAME
from aiflame.analysis.sync import TO_PAGEABLE
from aiflame.model import CallTree, FrameKind, Profile, ProfileBuilder, SampleType
from aiflame.model.profile import METRIC_ALIASES
from aiflame.model.stacks import EMPTY_STACK
from aiflame.sources.kineto.names import python_frame
from aiflame.transforms.pynames import module_call_frames


@dataclass(frozen=True)
class Hint:
    """How to show one section's stacks: the metric, and a search for the calls it is about."""

    metric: str | None = None
    search: Callable[[dict[str, Any]], str | None] | None = None


def _calls_regex(calls: Any) -> str | None:
    if isinstance(calls, dict) and calls:
        # nsys names API calls with their version (cudaMemcpy_v3020)
        # a copy call listed by what makes it block: "cudaMemcpyAsync (to pageable memory)"
        names = {re.escape(str(c).removesuffix(TO_PAGEABLE)) for c in calls}
        return "^(" + "|".join(sorted(names)) + r")(_v\d+)?$"
    return None


_LAUNCHES = r"^(cuda|hip)(Graph)?Launch|^cuLaunch"
# Kineto names a copy with its memory kinds; nsys' flame graph only with its direction.
_COPIES = r"^Memcpy|^\[memcpy "

# The stacks in the report's sections (by top-level key); findings carry their own view.
SECTION_HINTS: dict[str, Hint] = {
    "idle": Hint("gpu-idle"),
    "launch": Hint("wall-time", lambda e: _LAUNCHES),
    "sync": Hint("wall-time", lambda e: _calls_regex(e.get("by_call"))),
    "memory_traffic": Hint("gpu-time", lambda e: _COPIES),
}


# -- one flame graph of several traces -------------------------------------------------


def combine(profiles: Sequence[Profile], roots: Sequence[str | None]) -> Profile:
    """The profiles in one, each under its root frame (None: no root frame)."""
    if len(profiles) == 1 and roots[0] is None:
        return profiles[0]
    types: list[SampleType] = []
    for p in profiles:
        types += [t for t in p.sample_types if t.name not in {x.name for x in types}]
    builder = ProfileBuilder(types)
    column = {t.name: i for i, t in enumerate(types)}
    for profile, root in zip(profiles, roots, strict=True):
        base = EMPTY_STACK
        if root is not None:
            base = builder.stacks.child(EMPTY_STACK, builder.frame(root, FrameKind.LABEL))
        frame_map = [
            builder.frames.intern_frame(profile.frames.get(f)) for f in range(len(profile.frames))
        ]
        stack_map = np.full(len(profile.stacks) + 1, base, dtype=np.int64)
        parents, frames = profile.stacks.parent, profile.stacks.frame
        for s in range(len(profile.stacks)):  # parents come before children
            stack_map[s + 1] = builder.stacks.child(
                int(stack_map[parents[s] + 1]), frame_map[frames[s]]
            )
        values = np.zeros((len(profile), len(types)))
        for t, st in enumerate(profile.sample_types):
            values[:, column[st.name]] = profile.values[:, t]
        labels = np.asarray([builder.labels(dict(ls)) for ls in profile.label_sets], dtype=np.int64)
        builder.add_many(
            stack_map[profile.sample_stack + 1],
            values,
            labels[profile.sample_labels] if len(labels) else profile.sample_labels,
            profile.timestamps,
        )
    merged = builder.build()
    merged.meta["default_type"] = 0
    return merged


# -- finding a trace's stack in the flame graph ------------------------------------------


_VERSION = re.compile(r"_v\d+$")
_INSTANCE = re.compile(r"^nn\.Module: .*_\d+$")
_MODULE_CLASS = re.compile(r"^nn\.Module: ([A-Za-z_][\w.]*?)(?:_\d+)?$")


def _flame_keys(name: str) -> tuple[str, ...]:
    """The names a flame graph frame answers to: itself, without nsys' API version, a
    module method (``BertLayer > forward (x.py:1)``) as the plain function, and a profiler
    step as any step (stacks name them ``ProfilerStep#*``)."""
    keys = {name, _VERSION.sub("", name), name.rsplit(" > ", 1)[-1]}
    if STEP_NAME.match(name):
        keys.add(ANY_STEP)
    return tuple(keys)


@lru_cache(maxsize=65536)
def _trace_keys(raw: str) -> frozenset[str]:
    """The names a trace's slice may have in the flame graph (raw, or the readable form)."""
    return frozenset((raw, python_frame(raw).name))


class StackFinder:
    """Finds the flame graph node of a stack named innermost-last, maybe cut at the top."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        stacks = profile.stacks
        self.parent = stacks.parents_array()
        frame_names = profile.frames.name
        strings = profile.strings.strings
        self.names = [strings[frame_names[f]] for f in stacks.frames_array().tolist()]
        keys_of: dict[str, tuple[str, ...]] = {}
        self.keys = [keys_of.setdefault(n, _flame_keys(n)) for n in self.names]
        self._by_key: dict[str, list[int]] = {}
        for node, keys in enumerate(self.keys):
            for k in keys:
                self._by_key.setdefault(k, []).append(node)
        self._weight = self._node_weights()
        self._root = self._roots()
        # Module instances merged in the graph: a stack's module frames are not in it.
        self.merged_modules = not any(_INSTANCE.match(n) for n in keys_of)

    def _roots(self) -> np.ndarray:
        """The root node above every node (pointer jumping: log(depth) passes)."""
        up = np.where(self.parent >= 0, self.parent, np.arange(self.parent.size))
        while True:
            nxt = up[up]
            if np.array_equal(nxt, up):
                return up
            up = nxt

    def _node_weights(self) -> np.ndarray:
        """Total value of every node summed over the metrics (each as a share), for ties."""
        totals = CallTree.from_profile(self.profile).total_value
        scale = totals.sum(axis=0)
        scale[scale == 0] = 1.0
        return (totals / scale).sum(axis=1)

    def _candidates(self, raw: str) -> set[int]:
        return {n for k in _trace_keys(raw) for n in self._by_key.get(k, ())}

    def _matches(self, node: int, raw: str) -> bool:
        wanted = _trace_keys(raw)
        return any(k in wanted for k in self.keys[node])

    def find(self, stack: Sequence[str], within: str | None = None) -> list[str] | None:
        """Names from the root to the node best matching ``stack``, or None.

        The innermost name must match; the others are matched in order up the ancestors,
        which may hold frames the stack does not; the node matching most names with the
        fewest frames in between wins, then the one with the most time. ``within``:
        the root frame the node must be under (the trace's, in a combined graph).
        """
        module = None  # the class of a module frame the stack ends in (merged away)
        if self.merged_modules and stack:
            dropped = module_call_frames([python_frame(s).name for s in stack])
            tail = [s for s, drop in zip(stack, dropped, strict=True) if drop]
            if dropped[-1] and (m := _MODULE_CLASS.match(tail[0])):
                module = m.group(1)
            stack = [s for s, drop in zip(stack, dropped, strict=True) if not drop]
        if not stack:
            return None
        best: tuple[int, int, float, int] | None = None
        for node in self._candidates(stack[-1]):
            if within is not None and self.names[int(self._root[node])] != within:
                continue
            matched, skipped, j, up = 1, 0, len(stack) - 2, int(self.parent[node])
            while up >= 0 and j >= 0 and skipped <= MAX_SKIPPED:
                if self._matches(up, stack[j]):
                    matched += 1
                    j -= 1
                else:
                    skipped += 1  # a frame between two of the stack's: a looser match
                up = int(self.parent[up])
            key = (matched, -skipped, float(self._weight[node]), -node)
            if best is None or key > best:
                best = key
        if best is None:
            return None
        node = -best[3]
        if module is not None:
            # the module's own time is its method frame's in the graph (Class > forward)
            kids = np.nonzero(self.parent == node)[0]
            methods = [int(k) for k in kids if self.names[k].startswith(module + " > ")]
            if methods:
                node = max(methods, key=lambda k: float(self._weight[k]))
        return self.path(node)

    def path(self, node: int) -> list[str]:
        out = []
        while node >= 0:
            out.append(self.names[node])
            node = int(self.parent[node])
        return out[::-1]


# Frames between two of a stack's names beyond which a node is no match: keeps the search
# linear in the flame graph when slices nest thousands deep (real gaps are a few frames).
MAX_SKIPPED = 256


def _params(metric: str | None, search: str | None, metrics: set[str]) -> list[tuple[str, str]]:
    params: list[tuple[str, str]] = []
    metric = metric if metric in metrics else METRIC_ALIASES.get(metric or "", metric)
    if metric in metrics:
        params.append(("metric", metric))
    if search:
        params.append(("search", search))
    return params


def _stack_fragments(
    stacks: Sequence[Sequence[str]],
    params: list[tuple[str, str]],
    finder: StackFinder,
    root: str | None,
) -> list[str | None]:
    out: list[str | None] = []
    for stack in stacks:
        path = finder.find([str(x) for x in stack], root)
        out.append(urlencode(params + [("path", p) for p in path]) if path else None)
    return out


def fragment(
    finding: Finding, finder: StackFinder, metrics: set[str], root: str | None
) -> tuple[str | None, list[str | None]]:
    """The URL fragment of a finding and of each of its stacks (None: no link)."""
    params = _params(finding.flame.metric, finding.flame.search, metrics)
    per_stack = _stack_fragments([s.stack for s in finding.top_stacks], params, finder, root)
    main = next((f for f in per_stack if f), None)
    if main is None and (params or root):
        main = urlencode(params + ([("path", root)] if root else []))
    return main, per_stack


def _is_stack_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and isinstance(v.get("stack"), list) for v in value)
    )


def section_fragments(
    rank: dict[str, Any], finder: StackFinder, metrics: set[str], root: str | None
) -> dict[str, list[str | None]]:
    """Fragments of the stacks in a rank's sections (idle, launch, sync, copies), keyed by
    their path in the report's JSON: ``"idle/top_stacks/host_wait"`` -> one per stack."""
    out: dict[str, list[str | None]] = {}

    def walk(value: Any, path: list[str], params: list[tuple[str, str]]) -> None:
        if _is_stack_list(value):
            stacks = [v["stack"] for v in value]
            out["/".join(path)] = _stack_fragments(stacks, params, finder, root)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, [*path, str(k)], params)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, [*path, str(i)], params)

    for key, value in rank.items():
        if key in ("findings", "notes", "unavailable") or not isinstance(value, dict | list):
            continue
        data = value if isinstance(value, dict) else {}
        hint = SECTION_HINTS.get(key, Hint())
        search = hint.search(data) if hint.search else None
        walk(value, [key], _params(hint.metric, search, metrics))
    return out
