"""iaprof outputs (synthetic: one made-up run written in iaprof's four grammars; see
tests/data/gpu_instructions/PROVENANCE.md): folded with the count after a space or after a
``;``, the record stream with kernel/eustall lines, and the older one with ``e`` lines."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from aiflame.errors import InputError
from aiflame.model import FrameKind, gpu
from aiflame.sources import load

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions" / "iaprof"
FILES = ["stackcollapse.folded", "flame.folded", "record.tsv", "record-stream-e.tsv"]


def expected() -> Counter:
    """(kernel, offset, stall) -> count, read from the space-separated folded file."""
    out = Counter()
    for line in (DATA / "stackcollapse.folded").read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        parts = stack.split(";")
        out[(parts[-4][:-4], int(parts[-1][:-4], 16), parts[-2][:-4])] += int(count)
    return out


def got(profile) -> Counter:
    out = Counter()
    for s in range(len(profile)):
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        kernel, inst, stall = frames[-3:]
        assert (kernel.kind, inst.kind, stall.kind) == (
            FrameKind.GPU_KERNEL,
            FrameKind.GPU_INSTRUCTION,
            FrameKind.GPU_STALL,
        )
        assert frames[-4].kind == FrameKind.DELIMITER
        out[(kernel.name, inst.address, stall.name)] += profile.values[s, 0]
    return out


@pytest.mark.parametrize("name", FILES)
def test_every_grammar_gives_the_same_samples(name):
    profile = load(str(DATA / name))
    assert profile.meta["format"] == "iaprof"
    assert got(profile) == expected()
    assert profile.totals()[0] == 1427


def test_cpu_frames_kinds_and_stall_classes():
    profile = load(str(DATA / "flame.folded"))
    by_name = {}
    for s in range(len(profile)):
        for f in profile.stack_frames(int(profile.sample_stack[s])):
            by_name[f.name] = f.kind
        lab = profile.labels_of(s)
        assert lab[gpu.STALL_CLASS_LABEL] == gpu.stall_class(lab[gpu.STALL_LABEL])
    assert by_name["python (4242)"] == FrameKind.LABEL
    assert by_name["xe_exec_ioctl"] == FrameKind.KERNEL  # the _[k] annotation
    assert by_name["at::native::matmul"] == FrameKind.CPP
    assert by_name["+0x310"] == FrameKind.GPU_INSTRUCTION  # "[failed decode]": offset only
    assert (
        "dpas.8x8 (8|M0) r32:f r32:f r10:bf r18.0:bf {Atomic,Compacted,$1.dst} @ +0x1b0" in by_name
    )
    assert gpu.stall_class("sbid") == gpu.MEMORY and gpu.stall_class("active") == gpu.ISSUED


def test_bad_lines_are_one_clear_error(tmp_path):
    bad = tmp_path / "x.folded"
    bad.write_text("python;1;main;-;k_[G];k_[G];mov_[g];active_[g];0x10_[g] many\n")
    with pytest.raises(InputError, match="line 1"):
        load(str(bad))
