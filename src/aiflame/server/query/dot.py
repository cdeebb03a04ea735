"""Merged stacks as a call graph in Graphviz DOT, as ``go tool pprof -dot`` draws one (what
Pyroscope's ``/pyroscope/render?format=dot`` answers, and Grafana's Profiles Drilldown app
hands to its assistant): a node per function with its flat (self) and cumulative values, an
edge per caller -> callee with the value that went through it; the ``max_nodes`` functions
of the largest cumulative value are drawn, the edges between them.
"""

from __future__ import annotations

import re

import numpy as np

from aiflame.server.query.flame import Merged, Symbols


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _share(v: int, total: int) -> str:
    return f"{100 * v / total:.2f}%" if total else "0%"


def call_graph(
    merged: Merged, symbols: Symbols, unit: str, max_nodes: int = 100, title: str = ""
) -> str:
    unit = re.sub(r"[^A-Za-z0-9_.*/-]", "_", unit)
    ids = merged.ids if merged.ids is not None else np.zeros(0, dtype=np.uint64)
    global_names, lengths = symbols.name_paths(ids, merged.seqs or [])
    names, flat_names = np.unique(global_names, return_inverse=True)  # this graph's names
    values = merged.values.astype(np.int64)
    total = int(values.sum())
    stack_of = np.repeat(np.arange(lengths.size), lengths)
    ends = np.cumsum(lengths) - 1
    has = lengths > 0
    width = max(names.size, 1)
    # flat: the leaf's value; cum: once per function per stack (recursion counted once)
    flat = np.bincount(flat_names[ends[has]], weights=values[has], minlength=width)
    pairs = np.unique(stack_of.astype(np.int64) * width + flat_names)
    cum = np.bincount(pairs % width, weights=values[pairs // width], minlength=width)
    # edges: consecutive frames of a stack, once per stack
    inner = np.ones(flat_names.size, dtype=bool)
    inner[ends[has]] = False
    src = np.flatnonzero(inner)
    caller, callee = flat_names[src].astype(np.int64), flat_names[src + 1].astype(np.int64)
    edge_keys = np.unique((stack_of[src].astype(np.int64) * width + caller) * width + callee)
    edge = edge_keys % (width * width)
    edge_value = np.bincount(edge, weights=values[edge_keys // (width * width)])
    shown = np.argsort(-cum, kind="stable")[: max(1, max_nodes)]
    shown = shown[cum[shown] > 0]
    node = {int(n): i + 1 for i, n in enumerate(shown.tolist())}
    kept = int(flat[shown].sum())
    legend = (
        f"Type: {unit}\\lShowing nodes accounting for {kept} {unit}, "
        f"{_share(kept, total)} of {total} {unit} total\\l"
    )  # \l: a left-justified line in Graphviz
    lines = [
        f"digraph {_quote(title or 'aiflame')} {{",
        'node [style=filled fillcolor="#f8f8f8"]',
        f'subgraph cluster_L {{ "Type: {unit}" [shape=box fontsize=16 label="{legend}"] }}',
    ]
    for n, i in node.items():
        name = symbols.names[int(names[n])]
        f, c = int(flat[n]), int(cum[n])
        label = f"{name}\n{f} {unit} ({_share(f, total)})"
        if c != f:
            label += f"\nof {c} {unit} ({_share(c, total)})"
        size = 8 + int(16 * c / total) if total else 8
        lines.append(f'N{i} [label={_quote(label)} id="node{i}" fontsize={size} shape=box]')
    order = np.argsort(-edge_value, kind="stable")
    for k in order.tolist():
        v = int(edge_value[k])
        a, b = divmod(k, width)
        if v <= 0 or a not in node or b not in node:
            continue
        pen = 1 + int(5 * v / total) if total else 1
        lines.append(f'N{node[a]} -> N{node[b]} [label=" {v} {unit}" weight={v} penwidth={pen}]')
    lines.append("}")
    return "\n".join(lines) + "\n"
