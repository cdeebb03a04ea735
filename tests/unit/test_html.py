"""The HTML flame graph's embedded data: decoded back, it must hold every node of the call
tree with the right values, in DFS preorder with children sorted by name."""

from __future__ import annotations

import random
import re
from collections import defaultdict

import numpy as np
import pytest

from aiflame.model import CallTree, FrameKind, ProfileBuilder, SampleType
from aiflame.model.strings import natural_key
from aiflame.render import flamedata
from aiflame.render.html import SCRIPTS, extract_data, render_html, script_json
from aiflame.sources.folded import importer as folded
from aiflame.sources.inputs import Input
from aiflame.sources.kineto import importer as kineto

IPERF = "html/perf-iperf-stacks-pidtid-01-collapsed-all.txt"


def decoded(page: str) -> tuple[dict, dict]:
    header, payload = extract_data(page)
    return header, flamedata.unpack(header, payload)


def node_paths(header: dict, data: dict) -> list[tuple[str, ...]]:
    """The name path (root excluded) of every decoded node, in page order."""
    strings, fname = data["strings"], data["frame_name"]
    root = header["rootFrame"]
    paths: list[tuple[str, ...]] = []
    stack: list[str] = []
    for f, d in zip(data["frame"].tolist(), data["depth"].tolist(), strict=True):
        del stack[max(d - 1, 0) :]
        if f != root:
            stack.append(strings[fname[f]])
        paths.append(tuple(stack))
    return paths


def decoded_totals(data: dict, t: int) -> np.ndarray:
    depth = data["depth"]
    total = data["self"][t].copy()
    parent = np.full(len(depth), -1)
    last: dict[int, int] = {}
    for i, d in enumerate(depth.tolist()):
        if d:
            parent[i] = last[d - 1]
        last[d] = i
    for i in range(len(depth) - 1, 0, -1):
        total[parent[i]] += total[i]
    return total


def expected_totals(profile, t: int = 0) -> dict[tuple[str, ...], float]:
    tree = CallTree.from_profile(profile)
    out: dict[tuple[str, ...], float] = {}
    for node in range(len(tree)):
        if tree.total_value[node].any():
            out[tuple(profile.stack_names(node))] = float(tree.total_value[node, t])
    return out


@pytest.fixture(scope="module")
def iperf(data_dir):
    profile = folded.load(Input(str(data_dir / IPERF)))
    profile.meta["source"] = str(data_dir / IPERF)
    return profile


def test_page_holds_every_node_with_its_total(iperf):
    page = render_html(iperf)
    header, data = decoded(page)
    expected = expected_totals(iperf)
    paths = node_paths(header, data)
    assert header["nodes"] == len(expected) + 1 == len(paths)
    totals = decoded_totals(data, 0)
    got = {p: float(v) for p, v in zip(paths[1:], totals[1:], strict=True)}
    assert got == expected
    assert totals[0] == sum(v for p, v in expected.items() if len(p) == 1) == 200
    assert header["types"][0]["total"] == 200


def natural_paths(path: tuple[str, ...]) -> list[str]:
    return [natural_key(name) for name in path]


def test_nodes_are_in_preorder_with_children_sorted_by_name(iperf):
    header, data = decoded(render_html(iperf))
    paths = node_paths(header, data)
    # Preorder with name-sorted children is exactly the lexicographic order of the paths
    # (names compared with their numbers as numbers).
    assert paths == sorted(paths, key=natural_paths)
    assert len(set(paths)) == len(paths)


def test_numbers_in_names_sort_as_numbers():
    b = ProfileBuilder([SampleType("cpu", "count")])
    root = b.frame("model", FrameKind.PYTHON)
    names = [f"Layer_{n}" for n in (10, 2, 0, 1, 21, 3)] + ["Layer", "Layer_1a", "layer_0"]
    for name in names:
        b.add(b.stack([root, b.frame(name, FrameKind.PYTHON)]), 1)
    header, data = decoded(render_html(b.build()))
    children = [p[-1] for p in node_paths(header, data) if len(p) == 2]
    assert children == [
        "Layer", "Layer_0", "Layer_1", "Layer_1a", "Layer_2", "Layer_3", "Layer_10", "Layer_21",
        "layer_0",
    ]  # fmt: skip


QWEN = "kineto/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
QWEN_MODEL = "Qwen2Model > forward (transformers/models/qwen2/modeling_qwen2.py:503)"


def test_transformer_page_has_one_tower_per_module_class(data_dir):
    profile = kineto.load(Input(str(data_dir / QWEN)))
    header, data = decoded(render_html(profile))
    paths = node_paths(header, data)
    assert not [s for s in data["strings"] if re.match(r"nn\.Module: .*_\d+$", s)]
    under_model = [p[-1] for p in paths if len(p) >= 2 and p[-2] == QWEN_MODEL]
    assert (
        under_model.count(
            "Qwen2DecoderLayer > forward (transformers/models/qwen2/modeling_qwen2.py:243)"
        )
        == 1
    )
    assert len(under_model) < 24  # not 24 layers side by side, and their attentions, MLPs...


def test_transformer_page_keeps_instances_on_request_in_natural_order(data_dir):
    profile = kineto.load(Input(str(data_dir / QWEN)), module_instances=True)
    header, data = decoded(render_html(profile))
    paths = node_paths(header, data)
    model = "nn.Module: Qwen2Model_0"
    layers = [
        p[-1] for p in paths
        if len(p) >= 4 and p[-4] == model and p[-1].startswith("nn.Module: Qwen2DecoderLayer_")
    ]  # fmt: skip
    assert layers == [f"nn.Module: Qwen2DecoderLayer_{n}" for n in range(24)]


def test_frame_table_keeps_kinds_files_and_lines():
    b = ProfileBuilder([SampleType("cpu", "count")])
    f_py = b.frame("train.py:10 step", FrameKind.PYTHON, file="app/train.py", line=10)
    f_k = b.frame("do_syscall_64", FrameKind.KERNEL)
    f_gpu = b.frame("gemm_kernel", FrameKind.GPU_KERNEL, file="gemm.cu", line=77)
    b.add(b.stack([f_py, f_k]), 3)
    b.add(b.stack([f_py, f_gpu]), 4)
    header, data = decoded(render_html(b.build()))
    strings = data["strings"]
    by_name = {
        strings[n]: (FrameKind(k), strings[f], ln)
        for n, k, f, ln in zip(
            data["frame_name"],
            data["frame_kind"],
            data["frame_file"],
            data["frame_line"],
            strict=True,
        )
    }
    assert by_name == {
        "train.py:10 step": (FrameKind.PYTHON, "app/train.py", 10),
        "do_syscall_64": (FrameKind.KERNEL, "", 0),
        "gemm_kernel": (FrameKind.GPU_KERNEL, "gemm.cu", 77),
    }
    assert header["kinds"][str(int(FrameKind.GPU_KERNEL))] == "gpu-kernel"


def test_every_sample_type_travels_and_metric_picks_the_first_shown():
    b = ProfileBuilder([SampleType("cpu", "count"), SampleType("wall", "nanoseconds")])
    a, c = b.frame("a"), b.frame("c")
    b.add(b.stack([a]), [1, 2.5e9])
    b.add(b.stack([a, c]), [5, 0.25])  # a fractional value: stored as float64
    p = b.build()
    header, data = decoded(render_html(p, metric="wall"))
    assert header["metric"] == 1
    assert [t["name"] for t in header["types"]] == ["cpu", "wall"]
    assert [t["unit"] for t in header["types"]] == ["count", "nanoseconds"]
    assert decoded_totals(data, 0)[0] == 6
    assert decoded_totals(data, 1)[0] == 2.5e9 + 0.25
    with pytest.raises(KeyError):
        render_html(p, metric="nope")


def test_diff_meta_reaches_the_page():
    b = ProfileBuilder([SampleType("base", "count"), SampleType("test", "count")])
    b.add(b.stack([b.frame("main"), b.frame("grow")]), [1, 9])
    p = b.build()
    p.meta["diff"] = {"base": 0, "test": 1, "normalized": True}
    header, _ = decoded(render_html(p))
    assert header["diff"] == {"base": 0, "test": 1, "normalized": True}
    assert header["metric"] == 1  # widths follow the test column
    p.meta["diff"] = {"base": 0, "test": 5}  # out of range: not a diff page
    assert decoded(render_html(p))[0]["diff"] is None


def test_hostile_names_cannot_break_out_of_the_page():
    evil = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    b = ProfileBuilder()
    b.add(b.stack([b.frame(evil), b.frame("x\u2028y")]), 1)
    page = render_html(b.build(), title=evil, subtitle="<b>bold</b>")
    # Only our own tags: the header, the data, the memory data and the inlined scripts.
    assert page.count("<script") == 3 + len(SCRIPTS)
    assert "<img" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page  # title, escaped
    assert "&lt;b&gt;bold&lt;/b&gt;" in page
    header, data = decoded(page)
    assert header["title"] == evil
    assert evil in data["strings"] and "x\u2028y" in data["strings"]


def test_an_empty_profile_still_makes_a_page():
    header, data = decoded(render_html(ProfileBuilder().build()))
    assert header["nodes"] == 1  # the root alone
    assert data["strings"] == [""]


def test_script_json_escapes_markup():
    text = script_json({"a": "</script><!-- & \u2028"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text


def test_page_is_self_contained(iperf):
    page = render_html(iperf)
    # No URL the browser could fetch: no src/href attributes, no imports, no url(...).
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "url(" not in page and "import(" not in page and "@import" not in page
    assert "http://" not in page and "https://" not in page


def test_default_title_and_subtitle(iperf):
    page = render_html(iperf, subtitle="run 3")
    assert "<title>Flame graph of perf-iperf-stacks-pidtid-01-collapsed-all</title>" in page
    assert "run 3" in page


# -- encodings ------------------------------------------------------------------------------


def test_varints_and_planes_round_trip():
    values = np.array([0, 1, 127, 128, 300, 2**31, 2**40 + 5, 2**53 - 1], dtype=np.uint64)
    data = flamedata.varints(values)
    assert flamedata._read_varints(data, len(values))[0] == values.tolist()
    ints = np.array([0, 255, 256, 70000, 2**32 - 1])
    width = flamedata.byte_width(int(ints.max()))
    assert width == 4
    raw = flamedata.planes(ints, width)
    assert len(raw) == 4 * len(ints)
    back = sum(
        np.frombuffer(raw, np.uint8, len(ints), j * len(ints)).astype(np.int64) << (8 * j)
        for j in range(width)
    )
    assert back.tolist() == ints.tolist()


def _dfs_preorder(parent: list[int], key: list[int]) -> list[int]:
    children = defaultdict(list)
    for i, p in enumerate(parent):
        children[p].append(i)
    out: list[int] = []
    stack = sorted(children[-1], key=lambda c: (key[c], c), reverse=True)
    while stack:
        v = stack.pop()
        out.append(v)
        stack.extend(sorted(children[v], key=lambda c: (key[c], c), reverse=True))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_vectorised_preorder_matches_a_plain_dfs(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 400)
    # Mostly one tree, with a few extra roots (parent -1).
    parent = [-1] + [
        rng.randrange(-1, i) if rng.random() < 0.05 else rng.randrange(i) for i in range(1, n)
    ]
    key = [rng.randrange(8) for _ in range(n)]
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        depth[i] = depth[parent[i]] + 1 if parent[i] >= 0 else 0
    got = flamedata.preorder(np.asarray(parent), depth, np.asarray(key))
    if got is None:  # already in order
        got = np.arange(n)
    assert got.tolist() == _dfs_preorder(parent, key)
    # Renumbered in that preorder, the tree is recognised as ordered and left alone.
    new_id = np.empty(n, dtype=np.int64)
    new_id[got] = np.arange(n)
    parent2 = np.where(np.asarray(parent)[got] >= 0, new_id[np.asarray(parent)[got]], -1)
    key2, depth2 = np.asarray(key)[got], depth[got]
    unique_keys = len(set(zip(parent2.tolist(), key2.tolist(), strict=True))) == n
    assert flamedata.is_sorted_preorder(parent2, depth2, key2) == unique_keys
    again = flamedata.preorder(parent2, depth2, key2)
    assert (again is None) == unique_keys
    if again is not None:
        assert again.tolist() == _dfs_preorder(parent2.tolist(), key2.tolist())


@pytest.mark.parametrize("seed", range(12))
def test_a_preorder_with_a_few_siblings_out_of_order_is_rearranged_locally(seed, monkeypatch):
    """Ids already in preorder, a new key that puts some siblings out of order (names now
    compared as numbers): the local rearrangement and the full one agree with a plain DFS."""
    rng = random.Random(seed)
    n = rng.randrange(2, 500)
    parent = [-1] + [
        rng.randrange(-1, i) if rng.random() < 0.05 else rng.randrange(max(0, i - 30), i)
        for i in range(1, n)
    ]
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        depth[i] = depth[parent[i]] + 1 if parent[i] >= 0 else 0
    ordered = np.asarray(_dfs_preorder(parent, list(range(n))))
    new_id = np.empty(n, dtype=np.int64)
    new_id[ordered] = np.arange(n)
    par = np.asarray(parent)[ordered]
    parent2 = np.where(par >= 0, new_id[np.maximum(par, 0)], -1)
    depth2 = depth[ordered]
    key = np.arange(n)  # in order, but for a few swapped keys
    for _ in range(rng.randrange(1, 6)):
        a, b = rng.randrange(n), rng.randrange(n)
        key[a], key[b] = key[b], key[a]
    expected = _dfs_preorder(parent2.tolist(), key.tolist())
    misordered = flamedata.misordered_parents(parent2, depth2, key)
    assert misordered is not None
    local = flamedata.preorder(parent2, depth2, key)
    assert (np.arange(n) if local is None else local).tolist() == expected
    monkeypatch.setattr(flamedata, "LOCAL_REORDER_MAX", -1)  # the vectorised path
    full = flamedata.preorder(parent2, depth2, key)
    assert (np.arange(n) if full is None else full).tolist() == expected


def test_an_order_that_skips_back_up_is_not_a_preorder():
    # A, B (child of A), C, D (child of B): D is cut off from B's subtree by C.
    parent, depth, key = np.array([-1, 0, -1, 1]), np.array([0, 1, 0, 2]), np.array([0, 1, 2, 3])
    assert not flamedata.is_sorted_preorder(parent, depth, key)
    assert flamedata.preorder(parent, depth, key).tolist() == [0, 1, 3, 2]
