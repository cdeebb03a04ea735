"""Kernel names that stay distinct: ``--kernel-names short`` and the terminal tables, on the
real traces of tests/data (PyTorch profiler traces of NVIDIA and AMD GPUs, Nsight Systems
exports)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiflame.analysis.report import analyze
from aiflame.model import FrameKind, Profile
from aiflame.render.analyze_terminal import render_text
from aiflame.render.elide import distinct_labels, elide_middle, table_labels
from aiflame.sources import load
from aiflame.sources.registry import load_trace
from aiflame.symbolize.cxxnames import distinct_short_names, short_kernel_name

DATA = Path(__file__).resolve().parents[1] / "data"
KINETO = sorted(p for p in (DATA / "kineto").rglob("*.json.gz"))
NSYS = [
    DATA / "nsys" / "cloverleaf" / "perlmutter-cloverleaf-cuda.sqlite",
    DATA / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
]
TRACES = KINETO + NSYS
SAMPLED = DATA / "kineto" / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
CLOVER = NSYS[0]


def kernel_names(profile: Profile) -> set[str]:
    return {
        profile.frames.get(i).name
        for i in range(len(profile.frames))
        if profile.frames.get(i).kind == FrameKind.GPU_KERNEL
    }


def short_and_full(path: Path) -> tuple[set[str], set[str]]:
    return kernel_names(load(str(path), kernel_names="short")), kernel_names(load(str(path)))


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_short_names_keep_every_kernel_of_a_trace_apart(path: Path):
    short, full = short_and_full(path)
    assert len(short) == len(full)
    assert not any(n.startswith("void ") for n in short)
    # shorter wherever the full name has template arguments or parameters to fold
    assert sum(map(len, short)) <= sum(map(len, full))


def test_cloverleaf_lambdas_keep_the_function_that_defines_them():
    short, full = short_and_full(CLOVER)
    assert len([n for n in full if not n.startswith("[")]) == 102  # and memcpy, memset
    assert "clover::par_ranged2d_kernel<PdV_kernel::[lambda(int, int) (instance 2)]>" in short
    assert "clover::par_ranged1d_kernel<update_halo_kernel::[lambda(int) (instance 17)]>" in short
    assert "clover::par_reduce_kernel<calc_dt_kernel::[lambda(int) (instance 1)]>" in short
    assert not any(n == "par_ranged2d_kernel" for n in short)  # nsys's shortName


def test_pytorch_elementwise_kernels_keep_their_functor():
    short, _ = short_and_full(SAMPLED)
    for name in (
        "at::native::elementwise_kernel<…, BinaryFunctor<…, MulFunctor<float>>>",
        "at::native::elementwise_kernel<…, BinaryFunctor<…, DivFunctor<float>>>",
        "at::native::vectorized_elementwise_kernel<4, FillFunctor<float>, 1>",
        "at::native::vectorized_elementwise_kernel<4, FillFunctor<long>, 1>",
        "at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda::…::{lambda(float)#1}, "
        "2, 1, …, LoadWithCast<1>, StoreWithCast<1>>",
        "at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<…>, …, float, …>>",
        "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align4>",
    ):
        assert name in short, name
    assert "at::native::elementwise_kernel<…>" not in short


def test_a_kernel_alone_of_its_kind_stays_folded():
    names = [
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
        "MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp"
        "<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)",
        "ampere_sgemm_128x64_tn",
    ]
    assert distinct_short_names(names) == {
        names[0]: "at::native::reduce_kernel<…>",
        names[1]: "ampere_sgemm_128x64_tn",
    }
    assert short_kernel_name(names[0]) == "at::native::reduce_kernel<…>"


def test_kernels_differing_in_their_parameters_only_stay_whole():
    names = ["void scale(float*, int)", "void scale(double*, int)", "void scale(float*,  int)"]
    got = distinct_short_names(names)
    assert got[names[0]] == names[0] and got[names[1]] == names[1]
    assert got[names[2]] == names[2]  # another spelling of names[0]: still its own, whole


def test_unbalanced_names_are_left_as_they_were():
    names = ["Memcpy DtoH (Device -> Pinned)", "weird<kernel(int", "weird<kernel(float"]
    got = distinct_short_names(names)
    assert got[names[0]] == names[0]
    assert got[names[1]] != got[names[2]]


# -- terminal tables ------------------------------------------------------------------------


def table_rows(text: str, title: str) -> list[str]:
    """The printed rows of one table of ``aiflame analyze``'s terminal report."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title))
    rows = []
    for line in lines[start + 3 :]:  # title, header, rule
        m = re.match(r"^(.*?)\s+[\d.,]+ (?:s|ms|us|ns)\s+[\d,]+\s", line)
        if not m:
            break
        rows.append(m.group(1))
    return rows


@pytest.mark.parametrize("path", TRACES, ids=[p.name for p in TRACES])
def test_terminal_tables_print_different_names_differently(path: Path):
    report = analyze([load_trace(str(path))], top=30)
    text = render_text(report, 30, width=100)
    (rank,) = report.ranks
    for title, key in (("Top kernels by GPU time", "top_kernels"), ("Top ops", "top_ops")):
        names = [row.name for row in getattr(rank, key)][:30]
        if not names:
            continue
        printed = table_rows(text, title)
        assert len(printed) == len(names), (title, printed)
        assert len(set(printed)) == len(set(names)), (title, printed)
        assert all(len(p) <= 54 for p in printed)  # the name column of a 100-column report
        for name, label in zip(names, printed, strict=True):
            if len(name) <= 54:
                assert label == name  # what fits is printed as it is


def test_elementwise_kernels_that_cutting_at_the_end_merged_read_apart():
    report = analyze([load_trace(str(SAMPLED))], top=1000)
    names = [r.name for r in report.ranks[0].top_kernels]
    elementwise = [n for n in names if n.startswith("void at::native::elementwise_kernel<128, ")]
    assert len(elementwise) >= 10
    assert len({n[:53] + "…" for n in elementwise}) == 1  # cut at the end: one label for all
    labels = table_labels(elementwise, 54)
    assert len(set(labels)) == len(elementwise)
    assert {"MulFunctor", "DivFunctor", "CUDAFunctor_add", "AUnaryFunctor"} <= {
        word for label in labels for word in re.findall(r"\w+", label)
    }


def test_middle_elision_keeps_both_ends():
    name = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align4>(Params)"
    label = elide_middle(name, 40)
    assert label.startswith("void cutlass::Kernel<") and label.endswith("4>(Params)")
    assert len(label) == 40 and label.count("…") == 1 and elide_middle("short", 40) == "short"
    names = [name, name.replace("32x4_nn", "32x4_tn")]
    assert len(set(distinct_labels(names, 30))) == 2
