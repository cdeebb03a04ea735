"""Comparing GPU traces at the level of Python functions and ops (transforms.cut)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aiflame.model import FrameKind
from aiflame.sources import load
from aiflame.transforms.cut import GPU_SIDE, cut_at_kinds, has_kinds, without_line

TRACES = "kineto/tracelens/{}/gaunernst_bert-small-uncased__1016001.json.gz"


@pytest.fixture(scope="module")
def h100(data_dir):
    return load(str(data_dir / TRACES.format("h100")))


def test_without_line():
    assert without_line("forward (transformers/bert.py:1306)") == "forward (transformers/bert.py)"
    assert without_line("aten::mm") == "aten::mm"


def test_cut_keeps_totals_and_drops_gpu_frames(h100):
    cut = cut_at_kinds(h100)
    assert has_kinds(h100, GPU_SIDE)
    assert not has_kinds(cut, GPU_SIDE)
    assert cut.totals().tolist() == h100.totals().tolist()
    # every GPU-time stack now ends in the op that launched the kernel
    col = cut.type_index("gpu-time")
    leaves = {cut.frames.get(cut.stacks.frame[s]).kind for s, v in cut.iter_stack_values(col) if v}
    assert leaves <= {FrameKind.CPP, FrameKind.PYTHON, FrameKind.LABEL}


def test_h100_and_mi300_line_up_at_op_level(data_dir, tmp_path):
    out = tmp_path / "diff.folded"
    args = [str(data_dir / TRACES.format(g)) for g in ("h100", "mi300")]
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "diff", *args, "-o", str(out)],
        capture_output=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr.decode()
    rows = [line.rsplit(" ", 2) for line in out.read_text().splitlines()]
    assert len(rows) > 15  # the 4 layers' instances merged: one stack per op and place
    # same model, same ops: every op-level stack exists on both GPUs
    assert all(float(b) > 0 and float(t) > 0 for _, b, t in rows)
    assert all(not stack.endswith(("-", "cudaLaunchKernel")) for stack, _, _ in rows)
    each = [sys.executable, "-m", "aiflame", "diff", *args, "-o", str(out), "--module-instances"]
    r = subprocess.run(each, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    rows = [line.rsplit(" ", 2) for line in out.read_text().splitlines()]
    assert len(rows) > 50 and all(float(b) > 0 and float(t) > 0 for _, b, t in rows)
    # at full level the kernels (and torch's line numbers) differ: nothing matches
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "diff", *args, "-o", str(out), "--level", "full"],
        capture_output=True,
        timeout=120,
    )
    rows = [line.rsplit(" ", 2) for line in out.read_text().splitlines()]
    assert not any(float(b) > 0 and float(t) > 0 for _, b, t in rows)
