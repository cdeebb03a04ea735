"""``aiflame record`` with the eBPF sampler: a Python program, a C program, the whole system."""

from __future__ import annotations

import glob
import os
import re
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aiflame.collectors.ebpf.cpu_profile import truncated_stacks
from aiflame.model import FrameKind
from aiflame.sources import load

pytestmark = pytest.mark.usefixtures("ebpf")

BUSY = """
import time
def busy_function(seconds):
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        sum(i * i for i in range(1000))
busy_function(0.6)
"""


def record(
    *args: str, cwd: Path | None = None, python: str = sys.executable, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "aiflame", "record", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env,
    )


@pytest.fixture(scope="module")
def without_py_spy(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """An interpreter (a venv of this one, with its packages) and an environment where
    py-spy cannot be found, as after an install that left it out."""
    venv = tmp_path_factory.mktemp("no-py-spy") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        check=True,
    )
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    path = os.pathsep.join(d for d in dirs if d and not os.path.exists(os.path.join(d, "py-spy")))
    python = str(venv / "bin" / "python")
    # this interpreter's packages (aiflame, its dependencies), should it be a venv itself
    (site_dir,) = venv.glob("lib/python*/site-packages")
    adds = [f"import site; site.addsitedir({d!r})" for d in site.getsitepackages()]
    (site_dir / "outer.pth").write_text("\n".join(adds) + "\n")
    env = {**os.environ, "PATH": path}
    check = [python, "-c", "from aiflame.collectors.pyspy import find_pyspy; find_pyspy()"]
    assert (
        "py-spy is not installed"
        in subprocess.run(check, capture_output=True, env=env, text=True).stderr
    )
    return python, env


def test_python_program_python_frames_walked_in_the_kernel(tmp_path):
    prog = tmp_path / "busy.py"
    prog.write_text(textwrap.dedent(BUSY))
    out = tmp_path / "busy.pb.gz"
    rec = record("--ebpf", "-o", str(out), "--", sys.executable, str(prog))
    assert rec.returncode == 0, rec.stderr
    profile = load(str(out))
    # one metric: Python, native and kernel frames in one stack; no py-spy process
    assert [t.name for t in profile.sample_types] == ["cpu-samples"]
    total = profile.totals()[0]
    assert total >= 30, rec.stderr  # 0.6 s at 99 Hz
    in_busy = 0.0
    for stack, value in profile.iter_stack_values(0):
        frames = profile.stack_frames(stack)
        python = [f.name for f in frames if f.kind == FrameKind.PYTHON]
        if "busy_function (busy.py:3)" in python:
            assert python[:2] == ["<module> (busy.py:1)", "busy_function (busy.py:3)"], python
            in_busy += value
    # the rest: the interpreter starting and exiting
    assert in_busy >= 0.7 * total, (in_busy, total, rec.stderr)
    assert "top stacks by self cpu-samples" in rec.stderr and "busy_function" in rec.stderr
    assert "python-samples" not in rec.stderr
    info = subprocess.run(
        [sys.executable, "-m", "aiflame", "info", str(out)], capture_output=True, text=True
    )
    assert "python:      walked in the kernel in 1 process" in info.stdout, info.stdout


def test_py_spy_flag_keeps_python_samples_beside(tmp_path):
    prog = tmp_path / "busy.py"
    prog.write_text(textwrap.dedent(BUSY))
    out = tmp_path / "busy.pb.gz"
    rec = record("--ebpf", "--py-spy", "-o", str(out), "--", sys.executable, str(prog))
    assert rec.returncode == 0, rec.stderr
    profile = load(str(out))
    names = [t.name for t in profile.sample_types]
    assert names[:2] == ["cpu-samples", "python-samples"] and "native-samples" not in names
    # The page opens on eBPF's samples, unless most of its user stacks are cut short (this
    # interpreter was built without frame pointers): then on py-spy's Python stacks.
    truncated, total = truncated_stacks(profile.meta)
    default = "python-samples" if truncated / total >= 0.5 else "cpu-samples"
    assert profile.sample_types[profile.type_index(None)].name == default
    totals = dict(zip(names, profile.totals(), strict=True))
    assert totals["cpu-samples"] >= 30 and totals["python-samples"] >= 30  # 0.6 s at 99 Hz
    python = profile.type_index("python-samples")
    assert any(
        f.name.startswith("busy_function")
        for s, _ in profile.iter_stack_values(python)
        for f in profile.stack_frames(s)
    )
    assert "top stacks by self python-samples" in rec.stderr and "busy_function" in rec.stderr


def test_python_program_needs_no_py_spy(without_py_spy, tmp_path):
    python, env = without_py_spy
    prog = tmp_path / "busy.py"
    prog.write_text(textwrap.dedent(BUSY))
    out = tmp_path / "busy.pb.gz"
    rec = record("--ebpf", "-o", str(out), "--", python, str(prog), python=python, env=env)
    assert rec.returncode == 0, rec.stderr
    assert "py-spy" not in rec.stderr
    profile = load(str(out))
    assert [t.name for t in profile.sample_types] == ["cpu-samples"]
    python_frames = {
        f.name for s, _ in profile.iter_stack_values(0) for f in profile.stack_frames(s)
    }
    assert "busy_function (busy.py:3)" in python_frames


def test_asking_for_py_spy_without_it_is_an_error_before_the_program_runs(without_py_spy, tmp_path):
    python, env = without_py_spy
    marker = tmp_path / "ran"
    argv = ["--ebpf", "--py-spy", "-o", str(tmp_path / "x.folded"), "--", "touch", str(marker)]
    rec = record(*argv, python=python, env=env)
    assert rec.returncode == 1 and not marker.exists()
    assert rec.stderr.strip().startswith("aiflame: error: py-spy is not installed"), rec.stderr


def test_an_interpreter_ebpf_cannot_walk_without_py_spy_one_note(without_py_spy, tmp_path):
    """CPython 3.7: the BPF program does not walk its frames, py-spy would add them."""
    pyenv = glob.glob(os.path.expanduser("~/.pyenv/versions/3.7.*/bin/python3.7"))
    old = next(iter(sorted(pyenv) + glob.glob("/usr/bin/python3.7")), None)  # no pyenv shim
    if old is None:
        pytest.skip("needs a Python 3.7 (pyenv install 3.7), which the kernel walk does not read")
    python, env = without_py_spy
    prog = tmp_path / "busy.py"
    prog.write_text(textwrap.dedent(BUSY))
    out = tmp_path / "busy.folded"
    rec = record("--ebpf", "-o", str(out), "--", old, str(prog), python=python, env=env)
    assert rec.returncode == 0, rec.stderr
    assert "no Python stacks beside eBPF's: py-spy is not installed" in rec.stderr
    assert "_PyEval_EvalFrameDefault" in out.read_text()  # the interpreter's native frames


def test_c_program_needs_no_python(hot, tmp_path):
    """A C program is not a Python program: nothing is said about Python, no py-spy runs."""
    out = tmp_path / "hot.folded"
    rec = record("--ebpf", "-o", str(out), "--", str(hot), "0.5")
    assert rec.returncode == 0, rec.stderr
    text = out.read_text()
    assert "main;hot_a;spin" in text
    assert "Python" not in rec.stderr and "py-spy" not in rec.stderr, rec.stderr
    info = subprocess.run(
        [sys.executable, "-m", "aiflame", "info", str(out)], capture_output=True, text=True
    )
    assert info.returncode == 0


def test_attaching_to_a_c_program_says_nothing_of_python(hot, tmp_path):
    busy = subprocess.Popen([str(hot), "3"])
    try:
        out = tmp_path / "hot.folded"
        rec = record("--pid", str(busy.pid), "-d", "1", "-o", str(out))
    finally:
        busy.kill()
        busy.wait()
    assert rec.returncode == 0, rec.stderr
    assert "spin" in out.read_text()
    assert "Python" not in rec.stderr and "py-spy" not in rec.stderr, rec.stderr


def test_whole_system_for_a_duration(hot, tmp_path):
    busy = subprocess.Popen([str(hot), "3"])
    try:
        out = tmp_path / "all.pb.gz"
        rec = record("--all", "-d", "1", "-o", str(out))
    finally:
        busy.kill()
        busy.wait()
    assert rec.returncode == 0, rec.stderr
    profile = load(str(out))
    roots = {profile.stack_frames(s)[0].name for s, _ in profile.iter_stack_values(0)}
    assert f"hot 3 ({busy.pid})" in roots  # each stack under its process's command line
    info = subprocess.run(
        [sys.executable, "-m", "aiflame", "info", str(out)], capture_output=True, text=True
    )
    assert "truncated:" in info.stdout and "user stacks cut short" in info.stdout


def test_attaching_to_a_process_that_never_runs_says_so(tmp_path):
    waiting = subprocess.Popen(["sleep", "30"])
    try:
        out = tmp_path / "none.folded"
        rec = record("--ebpf", "--pid", str(waiting.pid), "-d", "0.5", "-o", str(out))
    finally:
        waiting.kill()
        waiting.wait()
    assert rec.returncode == 1 and not out.exists()
    assert re.fullmatch(
        rf"aiflame: error: nothing was sampled in process {waiting.pid} \(sleep\) in [\d.]+ s: "
        r"it did not run on a CPU \(a program it started is followed with --subprocesses\)",
        rec.stderr.strip(),
    ), rec.stderr


TRAIN = """
import time
import torch
import torch.nn as nn

model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8192, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
t0 = time.time()
while time.time() - t0 < 2.5:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def test_pytorch_program_without_aiflames_own_code_or_empty_metrics(tmp_path):
    pytest.importorskip("torch", reason="needs PyTorch (pip install torch; the CPU wheel will do)")
    from aiflame.render.html import extract_data

    prog = tmp_path / "train.py"
    prog.write_text(textwrap.dedent(TRAIN))
    # --import-frames keeps importlib's own frames, so that the depth of the deepest
    # imports below can be counted (by default they fold into one "[import]" frame)
    rec = record(
        "--ebpf",
        "--gpu-window",
        "1",
        "--import-frames",
        "--",
        sys.executable,
        str(prog),
        cwd=tmp_path,
    )
    assert rec.returncode == 0, rec.stderr
    (pprof,) = tmp_path.glob("aiflame-train-*.pb.gz")
    (page,) = tmp_path.glob("aiflame-train-*.html")
    profile = load(str(pprof))
    names = [t.name for t in profile.sample_types]
    # CPU-only: no gpu-time or kernel-count to offer, and nothing empty in the page either
    assert names == ["cpu-samples", "wall-time"], names
    assert all(profile.totals() > 0)
    header, _ = extract_data(page.read_text(encoding="utf-8"))
    assert [t["name"] for t in header["types"]] == names
    assert all(t["total"] > 0 for t in header["types"])
    assert header["types"][header["metric"]]["name"] == "cpu-samples"
    frames_of = {
        metric: [
            (profile.stack_frames(s), v)
            for s, v in profile.iter_stack_values(profile.type_index(metric))
        ]
        for metric in names
    }
    # The bootstrap's frames (import hook, window start/stop, timer thread) are left out...
    for metric, stacks in frames_of.items():
        for frames, _ in stacks:
            assert not any("sitecustomize" in f.file + f.name for f in frames), (metric, frames)
    # ... while the import of torch it wrapped stays under the program's own frames.
    imports = [
        frames
        for frames, _ in frames_of["cpu-samples"]
        if any(f.name.startswith("<module> (torch/__init__.py") for f in frames)
    ]
    rooted = [frames for frames in imports if frames[0].name == "<module> (train.py:1)"]
    assert rooted
    # (the others are torch's deepest nested imports, their outermost frames cut at the
    # walker's depth limit of 127 Python frames)
    for frames in imports:
        if frames not in rooted:
            assert sum(f.kind == FrameKind.PYTHON for f in frames) >= 120, frames[0]
    # The timer thread that waited for the window's end (47% of the window's time) is gone:
    # what is left of it is threading's own frames around the bootstrap's (microseconds).
    wall = frames_of["wall-time"]
    total = sum(v for _, v in wall)
    threads = sum(v for frames, v in wall if frames[0].name.startswith("_bootstrap (threading"))
    assert threads < 0.01 * total, (threads, total)
