"""Module methods named ``Class > method`` from the PyTorch profiler's module frames."""

from __future__ import annotations

from aiflame.model import FrameKind, ProfileBuilder
from aiflame.sources import load
from aiflame.transforms.pynames import module_methods


def test_method_under_module_frame_gets_its_class():
    b = ProfileBuilder()
    py = FrameKind.PYTHON
    mod = b.frame("nn.Module: BertLayer_3", py)
    glue = b.frame("_call_impl (torch/nn/modules/module.py:1743)", py)
    fwd = b.frame("forward (bert.py:651)", py)
    helper = b.frame("helper (bert.py:12)", py)
    op = b.frame("aten::mm", FrameKind.CPP)
    b.add(b.stack([mod, glue, fwd, helper, op]), 5)
    b.add(b.stack([fwd]), 2)  # not under a module: unchanged
    p = module_methods(b.build())
    names = sorted(";".join(p.stack_names(s)) for s, _ in p.iter_stack_values(0))
    assert names == [
        "forward (bert.py:651)",
        "nn.Module: BertLayer_3;_call_impl (torch/nn/modules/module.py:1743);"
        "BertLayer > forward (bert.py:651);helper (bert.py:12);aten::mm",
    ]
    assert p.totals().tolist() == [7.0]


def test_real_trace_layers_read_as_classes(data_dir):
    p = load(str(data_dir / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"))
    names = {p.frames.name_of(f) for f in set(p.stacks.frame)}
    assert "BertLayer > forward (transformers/models/bert/modeling_bert.py:573)" in names
    assert (
        "BertSdpaSelfAttention > forward (transformers/models/bert/modeling_bert.py:364)" in names
    )
    raw = load(
        str(data_dir / "kineto/tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"),
        python_names="raw",
    )
    assert not any(" > forward" in raw.frames.name_of(f) for f in set(raw.stacks.frame))
