"""CUPTI PC Sampling Utility dumps: files written by NVIDIA's own writer
(``CuptiUtilPutPcSampData``), read back by aiflame's reader and importer.

Two kinds of content: records at real offsets of a real cubin (sm_121, counts made up), so
that every sample can be checked under its SASS and source line; and the real per-PC,
per-reason counts of a real Nsight Compute report (A40), so that the counting rule is
checked on real numbers (``*_not_issued`` included in the file, not in the totals).
"""

from __future__ import annotations

import gzip
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest
from cupti_dumps import Buf, Rec, find_util, reason_table, write_dump

from aiflame.errors import InputError
from aiflame.model import FrameKind, gpu
from aiflame.sources import load
from aiflame.sources.gpu_samples.cupti_pc_file import read_dump
from aiflame.symbolize import cubin as cb

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions"
TOY_CUBIN = DATA / "parcagpu" / "pc_sample_toy.cubin"
TOY_CRC = 0x3AE994C7
NCU_REPORT = DATA / "nsight_compute" / "indexspaces-bb-a40.ncu-rep.gz"

pytestmark = pytest.mark.skipif(find_util() is None, reason="libpcsamplingutil not installed")
REASONS = reason_table()
INDEX = {name.removeprefix("smsp__pcsamp_warps_issue_stalled_"): i for i, name in REASONS.items()}


def test_reader_reads_what_nvidias_writer_wrote(tmp_path):
    rng = random.Random(7)
    buffers = []
    for b in range(3):
        recs = [
            Rec(
                crc=rng.getrandbits(40),
                function=rng.choice(["_Z1av", "_Z1bPf", "kernel_x"]),
                offset=16 * rng.randrange(10_000),
                stalls=[(i, rng.randrange(1, 1000)) for i in rng.sample(sorted(REASONS), 4)],
                correlation=rng.randrange(1 << 20),
                function_index=rng.randrange(5),
            )
            for _ in range(rng.randrange(1, 40))
        ]
        buffers.append(Buf(recs, dropped=b, range_id=b + 10))
    path = tmp_path / "pcsampling.dat"
    write_dump(str(path), buffers, REASONS, period=12)
    got = read_dump(path.read_bytes())
    assert len(got) == 3
    assert got[0].reason_names == REASONS
    for want, have in zip(buffers, got, strict=True):
        assert have.sampling_period == 12 and have.collection_mode == 2
        assert have.dropped_samples == want.dropped and have.range_id == want.range_id
        assert len(have.records) == len(want.records)
        for w, h in zip(want.records, have.records, strict=True):
            assert (h.cubin_crc, h.function_name, h.pc_offset) == (w.crc, w.function, w.offset)
            assert (h.correlation_id, h.function_index) == (w.correlation, w.function_index)
            assert h.stalls == list(w.stalls)


TOY_RECORDS = [  # (function, offset, {reason: samples}); offsets are the cubin's
    ("_Z10hash_churnPjiy", 0x10, {"long_scoreboard": 40, "long_scoreboard_not_issued": 38}),
    ("_Z10hash_churnPjiy", 0x1F0, {"wait": 7, "selected": 3, "wait_not_issued": 7}),
    ("_Z12shmem_bouncePfiy", 0x40, {"barrier": 11, "short_scoreboard": 5}),
    ("_Z12shmem_bouncePfiy", 0x0, {"no_instructions": 2}),
]


def toy_dump(folder: Path, with_cubin: bool = True) -> Path:
    recs = [
        Rec(TOY_CRC, fn, off, [(INDEX[r], n) for r, n in stalls.items()], correlation=5)
        for fn, off, stalls in TOY_RECORDS
    ]
    path = folder / "pcsampling.dat"
    write_dump(str(path), [Buf(recs[:2]), Buf(recs[2:])], REASONS)
    if with_cubin:
        shutil.copy(TOY_CUBIN, folder / "1.cubin")  # as pc_sampling_continuous names them
    return path


def test_counting_rule_not_issued_is_not_added(tmp_path):
    profile = load(str(toy_dump(tmp_path, with_cubin=False)))
    assert profile.meta["format"] == "cupti-pc"
    expected = sum(
        n for _, _, s in TOY_RECORDS for r, n in s.items() if not r.endswith("_not_issued")
    )
    assert profile.totals()[0] == expected == 68
    assert profile.meta["cupti_total_samples"] == expected  # the buffers' totalSamples
    leaves = Counter()
    for s in range(len(profile)):
        leaves[profile.stack_names(int(profile.sample_stack[s]))[-1]] += profile.values[s, 0]
    assert "long_scoreboard_not_issued" not in leaves
    assert leaves["long_scoreboard"] == 40
    assert profile.meta[gpu.META_PERIOD] == 2**10
    names = {profile.stack_names(int(s))[1] for s in profile.sample_stack}
    assert "+0x1f0" in names  # no cubin: the instruction is its offset


needs_tools = pytest.mark.skipif(
    cb.find_nvdisasm() is None, reason="nvdisasm not installed (cubin symbolizer)"
)


@needs_tools
def test_samples_under_their_instruction_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "run"
    folder.mkdir()
    profile = load(str(toy_dump(folder)))
    got = {}
    for s in range(len(profile)):
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        kernel, *lines, inst, stall = frames
        assert kernel.kind == FrameKind.GPU_KERNEL and stall.kind == FrameKind.GPU_STALL
        assert inst.kind == FrameKind.GPU_INSTRUCTION
        got[(kernel.name, inst.address, stall.name)] = (lines[-1].line, inst.name)
        assert profile.labels_of(s)["correlation"] == "5"
    # lines from the PROVENANCE (cuptiGetSassToSourceCorrelation on this cubin)
    assert (
        got[("hash_churn(unsigned int*, int, unsigned long long)", 0x10, "long_scoreboard")][0]
        == 34
    )
    assert got[("hash_churn(unsigned int*, int, unsigned long long)", 0x1F0, "wait")][0] == 42
    shmem = "shmem_bounce(float*, int, unsigned long long)"
    assert got[(shmem, 0x40, "barrier")][0] == 51
    assert got[(shmem, 0x0, "no_instructions")] == (49, "LDC R1, c[0x0][0x37c] @ +0x0")


def ncu_records(tmp_path):
    """Per-PC, per-reason counts of the real report, as CUPTI records (CRC unknown: 0)."""
    ncu_report = pytest.importorskip("ncu_report")
    rep = tmp_path / "r.ncu-rep"
    rep.write_bytes(gzip.decompress(NCU_REPORT.read_bytes()))
    ctx = ncu_report.load_report(str(rep))
    rng = ctx.range_by_idx(0)
    out = []
    for a in range(rng.num_actions()):
        act = rng.action_by_idx(a)
        start = act.metric_by_name("launch__function_pcs").as_uint64()
        name = act.name(ncu_report.IAction.NameBase_MANGLED)
        per_pc: dict[int, list] = {}
        for reason, idx in INDEX.items():
            m = act.metric_by_name("smsp__pcsamp_warps_issue_stalled_" + reason)
            if m is None or not m.has_correlation_ids():
                continue
            ids = m.correlation_ids()
            for i in range(m.num_instances()):
                if m.as_uint64(i):
                    per_pc.setdefault(ids.as_uint64(i) - start, []).append((idx, m.as_uint64(i)))
        total = act.metric_by_name("smsp__pcsamp_sample_count").as_uint64()
        out.append((name, total, [Rec(0, name, off, st) for off, st in sorted(per_pc.items())]))
    return out


def test_real_counts_add_up_to_the_reports_totals(tmp_path):
    kernels = ncu_records(tmp_path)
    path = tmp_path / "pcsampling.dat"
    write_dump(str(path), [Buf(recs) for _, _, recs in kernels], REASONS, period=10)
    profile = load(str(path))
    per_kernel = Counter()
    for s in range(len(profile)):
        per_kernel[profile.stack_frames(int(profile.sample_stack[s]))[0].name] += profile.values[
            s, 0
        ]
    assert sorted(per_kernel.values()) == sorted(total for _, total, _ in kernels)
    assert sorted(t for _, t, _ in kernels) == [48_443, 956_805]


def test_truncated_dump_is_one_clear_error(tmp_path):
    path = toy_dump(tmp_path, with_cubin=False)
    cut = tmp_path / "cut.dat"
    cut.write_bytes(path.read_bytes()[:200])
    with pytest.raises(InputError, match=r"cut short|truncated"):
        load(str(cut))
