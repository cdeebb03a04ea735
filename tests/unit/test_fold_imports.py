"""Python's import machinery folded: each run of importlib's frames is one ``[import]``
frame, on real recordings (Austin, py-spy) and in ``aiflame record``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aiflame.model import FrameKind
from aiflame.render.folded import render_folded
from aiflame.sources import load
from aiflame.transforms.imports import IMPORT_FRAME, fold_imports, is_machinery

DATA = Path(__file__).parents[1] / "data"
RECORDINGS = [
    DATA / "austin" / "austin2_wall.austin",
    DATA / "speedscope/py_spy/pyspy.speedscope.json",
]


def names_of(profile) -> set[str]:
    """Each frame as "name file" (py-spy's frames have their file apart)."""
    frames = [profile.frames.get(f) for f in profile.stacks.frames_array().tolist()]
    return {f"{f.name} {f.file}".strip() for f in frames}


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_runs_of_machinery_frames_become_one_frame(path):
    profile = load(str(path))
    assert any("importlib._bootstrap" in n for n in names_of(profile))
    folded = fold_imports(profile)
    assert folded.totals().tolist() == profile.totals().tolist()
    assert not any("importlib._bootstrap" in n for n in names_of(folded))
    assert IMPORT_FRAME in names_of(folded)

    # the same samples once every run of machinery frames is read as one [import]
    def runs_as_one(p) -> list[tuple[tuple[str, ...], float]]:
        out = []
        for i in range(len(p)):
            names: list[str] = []
            for f in p.stack_frames(int(p.sample_stack[i])):
                name = IMPORT_FRAME if is_machinery(f.name, f.file) else f.name
                if not (name == IMPORT_FRAME and names and names[-1] == IMPORT_FRAME):
                    names.append(name)
            out.append((tuple(names), float(p.values[i].sum())))
        return sorted(out)

    assert runs_as_one(folded) == runs_as_one(profile)
    assert render_folded(fold_imports(folded)) == render_folded(folded)  # idempotent


def test_what_is_machinery():
    assert is_machinery("_find_and_load (<frozen importlib._bootstrap>:1165)", "")
    assert is_machinery("exec_module", "<frozen importlib._bootstrap_external>")
    assert is_machinery("_gcd_import", "/usr/lib/pypy3/lib-python/3/importlib/_bootstrap.py")
    assert not is_machinery("import_module (importlib/__init__.py:126)", "")  # the program's call
    assert not is_machinery(IMPORT_FRAME, "")


@pytest.mark.slow
def test_record_folds_imports_unless_asked(tmp_path):
    prog = tmp_path / "imports.py"
    # a module that works while it is imported: the import machinery is on the stack for
    # a tenth of a second or more, however late the sampler starts on a loaded machine
    (tmp_path / "heavy_module.py").write_text("total = sum(i * i for i in range(3_000_000))\n")
    prog.write_text(
        textwrap.dedent(
            """
            import json, email.parser, http.client, xml.dom.minidom, decimal, unittest
            import heavy_module
            def work():
                s = 0
                for i in range(4_000_000):
                    s += i * i
                return s
            work()
            """
        )
    )
    for extra, folded in (((), True), (("--import-frames",), False)):
        out = tmp_path / f"p{len(extra)}.pb.gz"
        rec = subprocess.run(
            [sys.executable, "-m", "aiflame", "record", "--no-ebpf", "-r", "499", *extra,
             "-o", str(out), "--", sys.executable, str(prog)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
        profile = load(str(out))
        python = {
            profile.frames.name_of(f)
            for f in profile.stacks.frames_array().tolist()
            if profile.frames.kind[f] == FrameKind.PYTHON
        }
        machinery = [n for n in python if "importlib._bootstrap" in n]
        if folded:
            assert IMPORT_FRAME in python and not machinery, sorted(python)[:20]
        else:
            assert machinery and IMPORT_FRAME not in python
