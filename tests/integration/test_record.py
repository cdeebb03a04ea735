"""``aiflame record`` on real programs: py-spy sampling, exit codes, signals, processes, torch.

Every test launches real interpreters and samples them for a second or two.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from aiflame.model import FrameKind, Profile
from aiflame.sources import load

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="py-spy attaching needs Linux /proc and ptrace"
)

# These tests check py-spy's streams; as root, record would use eBPF for cpu-samples
# (tests/ebpf/test_record_ebpf.py checks that mode).
NO_EBPF = ("--no-ebpf",)

BUSY = """
import sys, time
def busy_function(seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        sum(i * i for i in range(1000))
"""


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def aiflame(*args: str, cwd: Path | None = None, timeout: float = 120, **kw):
    return subprocess.run(
        [sys.executable, "-m", "aiflame", "record", *NO_EBPF, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        **kw,
    )


def values_by(profile: Profile, metric: str, key) -> Counter:  # type: ignore[no-untyped-def]
    col = profile.type_index(metric)
    out: Counter = Counter()
    for i in range(len(profile)):
        v = profile.values[i, col]
        if v:
            out[key(profile.stack_frames(int(profile.sample_stack[i])), profile.labels_of(i))] += v
    return out


def has_frame(profile: Profile, metric: str, pred) -> bool:  # type: ignore[no-untyped-def]
    return values_by(profile, metric, lambda frames, _: any(pred(f) for f in frames))[True] > 0


def test_pure_python_program_same_output_and_default_files(tmp_path):
    prog = script(
        tmp_path,
        "plain.py",
        BUSY
        + """
print("result", sum(range(10)), sys.argv[1:])
busy_function(4.0)  # long beside start-up: py-spy --native attaches in seconds when loaded
print("done")
""",
    )
    plain = subprocess.run([sys.executable, str(prog), "--x"], capture_output=True, text=True)
    rec = aiflame("--", sys.executable, str(prog), "--x", cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == plain.stdout == "result 45 ['--x']\ndone\n"
    html = sorted(tmp_path.glob("aiflame-plain-*.html"))
    pprof = sorted(tmp_path.glob("aiflame-plain-*.pb.gz"))
    assert len(html) == len(pprof) == 1
    assert f"aiflame: wrote {html[0].name}" in rec.stderr
    assert f"aiflame: wrote {pprof[0].name}" in rec.stderr
    assert "top stacks by self cpu-samples" in rec.stderr and "busy_function" in rec.stderr
    assert "\r" not in rec.stderr and "recording" not in rec.stderr  # no status line: not a tty
    profile = load(str(pprof[0]))
    names = [t.name for t in profile.sample_types]
    assert names[:2] == ["cpu-samples", "native-samples"] and "gpu-time" not in names
    busy = values_by(
        profile, "cpu-samples", lambda fr, _: any(f.name.startswith("busy_function (") for f in fr)
    )
    assert busy[True] > 0.5 * sum(busy.values())  # most CPU time is in the busy loop
    assert has_frame(profile, "cpu-samples", lambda f: f.file.endswith("plain.py") and f.line > 0)


def test_live_status_line_on_a_terminal(tmp_path):
    import pty

    prog = script(tmp_path, "tty.py", BUSY + "busy_function(2)\n")
    try:
        master, slave = pty.openpty()
    except OSError as e:  # a container or chroot without /dev/pts
        pytest.skip(f"needs a pseudo-terminal, and this machine gives none ({e})")
    cmd = [sys.executable, "-m", "aiflame", "record", *NO_EBPF, "-o", str(tmp_path / "t.folded")]
    proc = subprocess.Popen(
        [*cmd, "--", sys.executable, str(prog)],
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    err = b"".join(chunks).decode(errors="replace")
    assert "\r\x1b[Krecording" in err and "samples" in err and "1 process" in err


def test_exit_code_passes_through_after_writing_the_profile(tmp_path):
    prog = script(tmp_path, "three.py", BUSY + "busy_function(1.0)\nsys.exit(3)\n")
    out = tmp_path / "three.folded"
    rec = aiflame("-o", str(out), "--", sys.executable, str(prog))
    assert rec.returncode == 3, rec.stderr
    assert "busy_function" in out.read_text()


def test_killed_program_still_yields_a_profile(tmp_path):
    prog = script(
        tmp_path, "killed.py", BUSY + "import os\nbusy_function(1.0)\nos.kill(os.getpid(), 9)\n"
    )
    out = tmp_path / "killed.folded"
    rec = aiflame("-o", str(out), "--", sys.executable, str(prog))
    assert rec.returncode == 128 + 9, rec.stderr
    assert "busy_function" in out.read_text()


def test_ctrl_c_writes_the_profile(tmp_path):
    prog = script(tmp_path, "forever.py", BUSY + "busy_function(60)\n")
    out = tmp_path / "forever.folded"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiflame",
            "record",
            *NO_EBPF,
            "-o",
            str(out),
            "--",
            sys.executable,
            str(prog),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as in a terminal
    )
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "busy_function" in out.read_text()


def test_attach_to_a_running_pid(tmp_path):
    prog = script(tmp_path, "server.py", BUSY + "print('up', flush=True)\nbusy_function(30)\n")
    target = subprocess.Popen([sys.executable, str(prog)], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline() == "up\n"
        out = tmp_path / "pid.pb.gz"
        rec = aiflame("--pid", str(target.pid), "-d", "2", "-o", str(out))
        assert rec.returncode == 0, rec.stderr
        assert target.poll() is None  # recording does not stop the program
    finally:
        target.kill()
        target.wait()
    profile = load(str(out))
    pids = values_by(profile, "cpu-samples", lambda _, labels: labels.get("pid"))
    assert set(pids) == {str(target.pid)}
    assert has_frame(profile, "cpu-samples", lambda f: f.name.startswith("busy_function ("))


def test_subprocesses_are_followed_with_their_pid(tmp_path):
    child = script(tmp_path, "child.py", BUSY + "busy_function(2)\n")
    parent = script(
        tmp_path,
        "parent.py",
        f"""
        import subprocess, sys
        subprocess.run([sys.executable, {str(child)!r}], check=True)
        print("parent done")
        """,
    )
    out = tmp_path / "tree.pb.gz"
    rec = aiflame("--subprocesses", "-o", str(out), "--", sys.executable, str(parent))
    assert rec.returncode == 0 and rec.stdout == "parent done\n", rec.stderr
    profile = load(str(out))
    busy_pids = values_by(
        profile,
        "cpu-samples",
        lambda fr, labels: (
            labels["pid"] if any(f.name.startswith("busy_function (") for f in fr) else None
        ),
    )
    pids = {p for p in busy_pids if p is not None}
    assert len(pids) == 1  # the child, not the parent
    assert has_frame(
        profile, "cpu-samples", lambda f: f.kind == FrameKind.LABEL and "child.py" in f.name
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--pid", "99999999"], "no process with PID 99999999"),
        (["--", "no-such-python-here", "x.py"], "no-such-python-here: command not found"),
        (["-o", "out.png", "--", "python", "x.py"], "cannot tell the output format"),
        ([], "nothing to record"),
        (["-m", "bogus", "--", "python", "x.py"], "--metric bogus: record writes cpu-samples"),
        # without eBPF only Python is sampled: what was tried is said, and no file written
        (["-o", "out.folded", "--", "sleep", "0.2"], "(sleep) ran no Python interpreter"),
    ],
)
def test_errors_are_one_line(tmp_path, args, fragment):
    rec = aiflame(*args, cwd=tmp_path)
    lines = [ln for ln in rec.stderr.splitlines() if ln.strip()]
    assert rec.returncode == 1 and len(lines) == 1, rec.stderr
    assert lines[0].startswith("aiflame: error: ") and fragment in lines[0]
    assert not (tmp_path / "out.folded").exists()


def test_attaching_to_a_non_python_process_is_one_line(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        rec = aiflame("--pid", str(sleeper.pid), "-d", "2")
    finally:
        sleeper.kill()
        sleeper.wait()
    lines = [ln for ln in rec.stderr.splitlines() if ln.strip()]
    assert rec.returncode == 1 and len(lines) == 1, rec.stderr
    assert "(sleep) ran no Python interpreter, which py-spy needs" in lines[0]
    assert "the eBPF sampler, which samples any program, was turned off (--no-ebpf)" in lines[0]


TRAIN = """
import sys, time
import torch
import torch.nn as nn

def make_model():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )

def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()

torch.manual_seed(0)
model = make_model()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
t0, steps = time.time(), 0
while time.time() - t0 < 3:
    train_step(model, opt, x, y)
    steps += 1
print("trained", steps > 0)
"""


@pytest.mark.slow
def test_pytorch_training_loop_python_ops_and_jit_kernels(tmp_path):
    pytest.importorskip("torch", reason="needs PyTorch (pip install torch; the CPU wheel will do)")
    prog = script(tmp_path, "train.py", TRAIN)
    out = tmp_path / "train.pb.gz"
    env = dict(os.environ, OMP_NUM_THREADS="1")  # oneDNN kernels run on the sampled thread
    rec = aiflame(
        "--native-rate",
        "10",
        "--gpu-window",
        "2",
        "-o",
        str(out),
        "--",
        sys.executable,
        str(prog),
        env=env,
        timeout=300,
    )
    assert rec.returncode == 0 and rec.stdout == "trained True\n", rec.stderr
    assert "USDT" not in rec.stderr  # the profiler's own log lines are kept out
    profile = load(str(out))
    names = {t.name for t in profile.sample_types}
    assert {"cpu-samples", "native-samples", "wall-time"} <= names
    # no metric without data: a CPU-only run has no gpu-time to offer
    assert "gpu-time" not in names and "kernel-count" not in names
    assert all(profile.totals() > 0)
    # aiflame's bootstrap (its import hook, window start/stop, timer thread) is left out
    for metric in names:
        assert not has_frame(profile, metric, lambda f: "sitecustomize" in f.file + f.name)
    # the script's Python functions, from py-spy (beside eBPF's native stacks, as root)
    py = "python-samples" if "python-samples" in names else "cpu-samples"
    sampled = values_by(
        profile, py, lambda fr, _: next((f for f in fr if "train_step" in f.name), None)
    )
    traced = values_by(
        profile, "wall-time", lambda fr, _: next((f for f in fr if "train_step" in f.name), None)
    )
    # PyTorch operators under the Python that called them, from the profiler window
    assert has_frame(profile, "wall-time", lambda f: f.name.startswith("aten::conv"))
    # ... and both name the function alike, so that switching metrics shows one tree
    step = {f for f in sampled if f} | {f for f in traced if f}
    assert len(step) == 1, step
    (frame,) = step
    line = prog.read_text().split("\n").index("def train_step(model, opt, x, y):") + 1
    assert frame.name == f"train_step (train.py:{line})"
    assert frame.file == str(prog) and frame.line == line
    # oneDNN JIT kernels named from the perf map, inside native stacks
    jit = values_by(
        profile,
        "native-samples",
        lambda fr, _: next((f.name for f in fr if f.kind == FrameKind.JIT), None),
    )
    jit_names = {n for n in jit if n}
    assert any(n.startswith("jit_") and "conv" in n for n in jit_names), jit_names
    assert not has_frame(profile, "native-samples", lambda f: f.name.startswith("0x"))
    states = values_by(profile, "native-samples", lambda _, labels: labels.get("state"))
    assert states["active"] > 0
