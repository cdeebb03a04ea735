"""HPCToolkit database importer, on HPCToolkit's own recording of a CUDA program with CUPTI
PC sampling (loops.cu on an sm_80 GPU; see tests/data/gpu_instructions/PROVENANCE.md).

The expected totals are the ones HPCToolkit's reader (hpctesttool) gives for the summary
profile, listed in the PROVENANCE: they are not computed by the importer under test. The
database is read from a copy without its measurement directory beside it (the samples then
stop at the line); test_gpu_hpcrun.py reads both.
"""

from __future__ import annotations

import gzip
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli.main import main
from aiflame.errors import InputError
from aiflame.model import FrameKind, gpu
from aiflame.sources import load

DATA = Path(__file__).parents[1] / "data" / "gpu_instructions" / "hpctoolkit"
SOURCE_DB = DATA / "loops-cuda-nvidiapc-t.d"


@pytest.fixture(scope="module")
def db_alone(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("alone") / "loops.d"
    d.mkdir()
    for name in ("meta.db", "profile.db"):
        shutil.copy(SOURCE_DB / name, d / name)
    return d


PERIOD = 4096  # GSAMP:PER (cyc)
# Summary-profile totals (values weighted by the period), from the PROVENANCE.
STALL_TOTALS = {"STL_IDEP": 1_881_944_064, "STL_GMEM": 146_333_696, "STL_IFET": 25_665_536}
ANY_STALL = 2_056_265_728
ALL_SAMPLES = 657_063  # GSAMP:TOT


@pytest.fixture(scope="module")
def profile(db_alone):
    return load(str(db_alone))


def pc_samples(profile) -> list[int]:
    """The samples that are GPU PC samples (others carry GPU time or kernel counts)."""
    return np.flatnonzero(profile.values[:, profile.type_index("gpu-samples")]).tolist()


def per_reason(profile) -> dict[str, float]:
    col = profile.type_index("gpu-samples")
    out: dict[str, float] = defaultdict(float)
    for s in pc_samples(profile):
        out[profile.labels_of(s)[gpu.STALL_LABEL]] += profile.values[s, col]
    return out


def test_totals_equal_hpctoolkits(profile):
    col = profile.type_index("gpu-samples")
    assert profile.values[:, col].sum() == pytest.approx(ALL_SAMPLES)
    reasons = per_reason(profile)
    for name, weighted in STALL_TOTALS.items():
        assert reasons[name] * PERIOD == pytest.approx(weighted), name
    stalled = sum(v for k, v in reasons.items() if k != "STL_NONE")
    assert stalled * PERIOD == pytest.approx(ANY_STALL)
    assert profile.meta[gpu.META_PERIOD] == PERIOD
    assert profile.meta[gpu.META_PERIOD_UNIT] == "cycles"
    assert profile.totals()[profile.type_index("kernel-count")] == 100
    # GKER (sec) of the 100 launches
    assert profile.totals()[profile.type_index("gpu-time")] == pytest.approx(21_072_862, rel=1e-6)


def test_host_stack_above_the_kernel(profile):
    stacks = {tuple(profile.stack_names(int(s))) for s in np.unique(profile.sample_stack)}
    host = (
        "main",
        "kernmain",
        "__device_stub__Z8kernmainv()",
        "cudaLaunchKernel<char>",
        "cudaLaunchKernel",
        "-",
        "kernmain()",
    )
    assert all(s[: len(host)] == host for s in stacks)
    frames = profile.stack_frames(int(profile.sample_stack[0]))
    kinds = [f.kind for f in frames[: len(host)]]
    assert kinds[4] == FrameKind.RUNTIME
    assert kinds[5] == FrameKind.DELIMITER
    assert kinds[6] == FrameKind.GPU_KERNEL


def test_lines_inline_levels_and_stall_leaves(profile):
    col = profile.type_index("gpu-samples")
    by_line: dict[tuple[str, ...], float] = defaultdict(float)
    for s in pc_samples(profile):
        frames = profile.stack_frames(int(profile.sample_stack[s]))
        assert frames[-1].kind == FrameKind.GPU_STALL
        assert frames[-1].name == profile.labels_of(s)[gpu.STALL_LABEL]
        source = tuple(f.name for f in frames if f.kind == FrameKind.GPU_SOURCE)
        by_line[source] += profile.values[s, col]
    # func2 is inlined at line 31 inside the loop at line 21: two line levels, outer first.
    hot = max(by_line, key=by_line.__getitem__)
    assert hot == ("loop at loops.cu:21", "loops.cu:31", "loops.cu:16")
    assert by_line[hot] * PERIOD == pytest.approx(2_212_974_592)  # GINS of that context
    line = next(f for f in profile.stack_frames(int(profile.sample_stack[0])) if f.line)
    assert line.file.endswith("loops.cu")


def test_stall_classes(profile):
    classes = {
        profile.labels_of(s)[gpu.STALL_LABEL]: profile.labels_of(s)[gpu.STALL_CLASS_LABEL]
        for s in pc_samples(profile)
    }
    assert classes["STL_GMEM"] == gpu.MEMORY
    assert classes["STL_IDEP"] == gpu.SHORT_DEPENDENCY
    assert classes["STL_IFET"] == gpu.FRONT_END
    assert classes["STL_NONE"] == gpu.ISSUED


def test_database_file_and_gzip_copies(tmp_path, profile, db_alone):
    assert len(load(str(db_alone / "meta.db"))) == len(profile)
    gz = tmp_path / "db"
    gz.mkdir()
    for name in ("meta.db", "profile.db"):
        with open(SOURCE_DB / name, "rb") as src, gzip.open(gz / (name + ".gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
    again = load(str(gz))
    assert again.totals() == pytest.approx(profile.totals())


def test_bad_databases_are_one_clear_error(tmp_path, capsys):
    (tmp_path / "only").mkdir()
    shutil.copy(SOURCE_DB / "meta.db", tmp_path / "only" / "meta.db")
    with pytest.raises(InputError, match=r"without profile\.db"):
        load(str(tmp_path / "only"))
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "meta.db").write_bytes((SOURCE_DB / "meta.db").read_bytes()[:3000])
    shutil.copy(SOURCE_DB / "profile.db", cut / "profile.db")
    out = tmp_path / "x.html"
    assert main(["flamegraph", str(cut), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "meta.db" in err and "Traceback" not in err
    assert not out.exists()


def test_flamegraph_of_the_database(tmp_path):
    out = tmp_path / "hpc.html"
    assert main(["flamegraph", str(SOURCE_DB), "-o", str(out)]) == 0
    assert out.stat().st_size > 1000


# -- names hpcstruct left mangled --------------------------------------------------------------


def test_mangled_function_names_are_demangled_and_only_kernels_are_kernels(tmp_path, capsys):
    """hpcstruct writes a function's mangled name where it could not demangle it: the
    database's function table then holds `_Z...` names. They read as C++ in the graph and
    in analyze, whose kernels are the launched ones only."""
    db = tmp_path / "mangled.d"
    shutil.copytree(SOURCE_DB, db)
    meta = db / "meta.db"
    data = meta.read_bytes()
    assert data.count(b"kernmain()\x00") == 1
    # the same length in the string table: `_Z6kernmav` is the mangled kernma()
    meta.write_bytes(data.replace(b"kernmain()\x00", b"_Z6kernmav\x00"))
    p = load(str(db))
    names = {f.name for s in np.unique(p.sample_stack) for f in p.stack_frames(int(s))}
    assert "kernma()" in names and not [n for n in names if n.startswith("_Z")]
    assert main(["analyze", str(db)]) == 0
    report = capsys.readouterr().out
    assert "kernma()  657,063 samples (100%)" in report and "_Z6kernmav" not in report
