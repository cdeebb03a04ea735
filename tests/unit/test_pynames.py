"""Module methods named ``Class > method`` from the PyTorch profiler's module frames, module
instances merged, profiler steps merged."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter

import numpy as np
import pytest

from aiflame.model import CallTree, FrameKind, ProfileBuilder
from aiflame.sources import load
from aiflame.transforms.pynames import MERGED_STEP, merge_steps, module_methods

QWEN = "kineto/tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT = "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
STEP6 = "resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
PY = FrameKind.PYTHON
GLUE = "_call_impl (torch/nn/modules/module.py:1743)"


def stacks_of(profile, t: int = 0) -> dict[str, float]:
    return {";".join(profile.stack_names(s)): v for s, v in profile.iter_stack_values(t)}


def layer_profile():
    """Two instances of BertLayer, each module frame -> glue -> forward -> aten::mm, with
    time of their own on the module frame and on the glue."""
    b = ProfileBuilder()
    fwd = b.frame("forward (bert.py:651)", PY, "bert.py", 651)
    op = b.frame("aten::mm", FrameKind.CPP)
    glue = b.frame(GLUE, PY, "torch/nn/modules/module.py", 1743)
    enc = b.frame("Encoder > forward (bert.py:10)", PY, "bert.py", 10)
    for n in (0, 1):
        mod = b.frame(f"nn.Module: BertLayer_{n}", PY)
        b.add(b.stack([enc, mod, glue, fwd, op]), 5)
        b.add(b.stack([enc, mod]), 1)  # the module call's own time
        b.add(b.stack([enc, mod, glue]), 2)
        # torch's call machinery calls a built-in before the method: not a method
        b.add(b.stack([enc, mod, glue, b.frame("_get_tracing_state", PY)]), 1)
    b.add(b.stack([fwd]), 7)  # not under a module: unchanged
    return b.build()


def test_instances_merge_into_the_method_named_by_its_class():
    p = module_methods(layer_profile())
    assert stacks_of(p) == {
        "Encoder > forward (bert.py:10);BertLayer > forward (bert.py:651);aten::mm": 10,
        # the module frame's and the glue's own time: the method's, not the caller's
        "Encoder > forward (bert.py:10);BertLayer > forward (bert.py:651)": 6,
        "Encoder > forward (bert.py:10);BertLayer > forward (bert.py:651);_get_tracing_state": 2,
        "forward (bert.py:651)": 7,
    }
    assert p.totals().tolist() == [25.0]


def test_module_instances_keep_every_recorded_frame():
    p = module_methods(layer_profile(), instances=True)
    got = stacks_of(p)
    assert len(got) == 9
    assert (
        got[
            "Encoder > forward (bert.py:10);nn.Module: BertLayer_1;"
            f"{GLUE};BertLayer > forward (bert.py:651);aten::mm"
        ]
        == 5
    )
    assert got["Encoder > forward (bert.py:10);nn.Module: BertLayer_0"] == 1
    assert (
        got[f"Encoder > forward (bert.py:10);nn.Module: BertLayer_0;{GLUE};_get_tracing_state"] == 1
    )
    assert p.totals().tolist() == [25.0]


def test_module_frame_stays_without_its_number_where_the_method_does_not_name_it():
    b = ProfileBuilder()
    # A method named from its source file: the class that defines it, a base class.
    inherited = b.frame("BertSelfAttention > forward (bert.py:300)", PY, "bert.py", 300)
    op = b.frame("aten::addmm", FrameKind.CPP)
    sdpa = b.frame("nn.Module: BertSdpaSelfAttention_3", PY)
    b.add(b.stack([sdpa, b.frame(GLUE, PY, "torch/nn/modules/module.py", 1743), inherited]), 4)
    b.add(b.stack([b.frame("nn.Module: Linear_12", PY), op]), 3)  # no Python method frame
    got = stacks_of(module_methods(b.build()))
    assert got == {
        f"nn.Module: BertSdpaSelfAttention;{GLUE};BertSelfAttention > forward (bert.py:300)": 4,
        "nn.Module: Linear;aten::addmm": 3,
    }


def test_merge_steps_adds_the_steps_up():
    b = ProfileBuilder()
    run = b.frame("run (train.py:3)", PY)
    mm = b.frame("aten::mm", FrameKind.CPP)
    for step, v in ((5, 2.0), (6, 3.0), (10, 4.0)):
        b.add(b.stack([run, b.frame(f"ProfilerStep#{step}", FrameKind.CPP), mm]), v)
    b.add(b.stack([run, b.frame("ProfilerStep#x", FrameKind.CPP)]), 1)  # not a step number
    got = stacks_of(merge_steps(b.build()))
    assert got == {
        f"run (train.py:3);{MERGED_STEP};aten::mm": 9.0,
        "run (train.py:3);ProfilerStep#x": 1.0,
    }


def raw_module_names(path) -> Counter[str]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return Counter(e["name"] for e in events if str(e.get("name", "")).startswith("nn.Module: "))


@pytest.fixture(scope="module")
def qwen(data_dir):
    path = str(data_dir / QWEN)
    return load(path), load(path, module_instances=True), raw_module_names(data_dir / QWEN)


def named_nodes(profile, name: str) -> list[int]:
    names = profile.strings.strings
    return [s for s, f in enumerate(profile.stacks.frame) if names[profile.frames.name[f]] == name]


def test_real_qwen_layers_merge_into_one_tower(qwen):
    merged, instances, raw = qwen
    # The trace itself: 24 decoder layers, each an nn.Module event of its own.
    layers = {n for n in raw if re.fullmatch(r"nn\.Module: Qwen2DecoderLayer_\d+", n)}
    assert len(layers) == 24
    frame_names = {merged.frames.name_of(f) for f in set(merged.stacks.frame)}
    assert not [n for n in frame_names if re.match(r"nn\.Module: \w+_\d+$", n)]
    layer = "Qwen2DecoderLayer > forward (transformers/models/qwen2/modeling_qwen2.py:243)"
    model = "Qwen2Model > forward (transformers/models/qwen2/modeling_qwen2.py:503)"
    tree, itree = CallTree.from_profile(merged), CallTree.from_profile(instances)
    nodes = named_nodes(merged, layer)
    assert len(nodes) == 1  # one tower, right under the model's forward
    parent = merged.stacks.parent[nodes[0]]
    assert merged.frames.name_of(merged.stacks.frame[parent]) == model
    # It holds exactly the 24 module calls: their GPU and CPU time, the module frames' and
    # the call machinery's own time with the forward's.
    inst = named_nodes(instances, layer)
    assert len(inst) == 24
    up = instances.stacks.parent
    calls = [up[up[n]] for n in inst]
    assert {instances.frames.name_of(instances.stacks.frame[c]) for c in calls} == layers
    for t in (0, 2):  # gpu-time, cpu-time
        assert tree.total_value[nodes[0], t] == pytest.approx(itree.total_value[calls, t].sum())
        own = sum(itree.self_value[[n, up[n], up[up[n]]], t].sum() for n in inst)
        assert tree.self_value[nodes[0], t] == pytest.approx(own)
    np.testing.assert_allclose(merged.totals(), instances.totals())
    # Every Linear of the 168 is one "Linear > forward" per place it is called from.
    assert sum(1 for n in raw if n.startswith("nn.Module: Linear_")) == 168
    linear = "Linear > forward (torch/nn/modules/linear.py:124)"
    assert len(named_nodes(merged, linear)) < 10 < len(named_nodes(instances, linear))


def test_raw_names_keep_the_profilers_frames(data_dir):
    raw = load(str(data_dir / BERT), python_names="raw")
    names = {raw.frames.name_of(f) for f in set(raw.stacks.frame)}
    assert not any(" > forward" in n for n in names)
    assert "nn.Module: BertLayer_3" in names


def test_real_bert_methods_read_as_classes(data_dir):
    p = load(str(data_dir / BERT))
    names = {p.frames.name_of(f) for f in set(p.stacks.frame)}
    assert "BertLayer > forward (transformers/models/bert/modeling_bert.py:573)" in names
    assert (
        "BertSdpaSelfAttention > forward (transformers/models/bert/modeling_bert.py:364)" in names
    )


def test_real_trace_steps_merge(data_dir):
    path = str(
        data_dir / "kineto/kineto_tb_plugin/resnet50_num_workers_4_worker0.step6.pt.trace.json.gz"
    )
    plain, merged = load(path), load(path, merge_steps=True)
    steps = {
        n
        for n in (plain.frames.name_of(f) for f in set(plain.stacks.frame))
        if n.startswith("ProfilerStep")
    }
    assert steps and all(re.fullmatch(r"ProfilerStep#\d+", s) for s in steps)
    got = {merged.frames.name_of(f) for f in set(merged.stacks.frame)}
    assert MERGED_STEP in got and not any(re.fullmatch(r"ProfilerStep#\d+", s) for s in got)
    np.testing.assert_allclose(merged.totals(), plain.totals())


def test_nested_module_frames_keep_their_own_calls():
    b = ProfileBuilder()
    glue = b.frame(GLUE, PY, "torch/nn/modules/module.py", 1743)
    seq_fwd = b.frame("forward (container.py:250)", PY, "container.py", 250)
    lin_fwd = b.frame("forward (linear.py:124)", PY, "linear.py", 124)
    outer, inner = b.frame("nn.Module: Sequential_0", PY), b.frame("nn.Module: Sequential_1", PY)
    lin = b.frame("nn.Module: Linear_3", PY)
    op = b.frame("aten::addmm", FrameKind.CPP)
    # A module frame right under another one, and a module of the same class in its method:
    # each call keeps its own node.
    b.add(b.stack([outer, lin, glue, lin_fwd, op]), 2)
    b.add(b.stack([outer, glue, seq_fwd, inner, glue, seq_fwd, op]), 3)
    got = stacks_of(module_methods(b.build()))
    assert got == {
        # the outer call's node is its method: what ran right under its module frame too
        "Sequential > forward (container.py:250);Linear > forward (linear.py:124);aten::addmm": 2,
        "Sequential > forward (container.py:250);Sequential > forward (container.py:250);"
        "aten::addmm": 3,
    }
