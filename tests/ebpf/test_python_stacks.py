"""Python stacks walked by the BPF program, on real interpreters of each version (3.8-3.15:
tests/pythons.py finds them, in chroots where CI installed them).

The program below runs known functions in two threads (a class method calling a function
in the main thread, another function in a second thread) and one that calls into zlib (C
code outside the interpreter). Every sample of a thread must show that thread's Python
stack, outermost call first, named per function as the PyTorch profiler names them; the
zlib samples must go on from the Python frames into native frames outside the interpreter.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from test_cpu_sampling import sample

import pythons
from aiflame.collectors.ebpf.cpu_profile import build_profile
from aiflame.collectors.ebpf.pyruntime import find_python
from aiflame.collectors.ebpf.sampler import (
    CpuSampler,
    RawProfile,
    SamplerOptions,
)
from aiflame.collectors.procs import cpu_seconds
from aiflame.model import FrameKind, Profile
from aiflame.symbolize.process import SymbolResolver
from aiflame.symbolize.pyframes import PythonNaming
from pythons import Interpreter

pytestmark = pytest.mark.usefixtures("ebpf")

PROGRAM = """
import threading
import time
import zlib


class Model:
    def forward(self, seconds):
        return spin(seconds)


def spin(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        sum(i * i for i in range(200))


def background(seconds):
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        sorted(range(300), key=lambda i: -i)


def squeeze(seconds):
    data = bytes(range(256)) * 4096
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        zlib.compress(data, 9)


def main():
    worker = threading.Thread(target=background, args=(0.5,), name="bg")
    worker.start()
    Model().forward(0.5)
    squeeze(0.5)
    worker.join()


main()
"""


def named(func: str, owner: str = "") -> str:
    """How the frame of ``def func`` in PROGRAM is named (the line of its ``def``)."""
    lines = textwrap.dedent(PROGRAM).split("\n")
    line = next(i for i, x in enumerate(lines) if x.strip().startswith(f"def {func}("))
    shown = f"{owner} > {func}" if owner else func
    return f"{shown} (threads.py:{line + 1})"


MODULE = "<module> (threads.py:1)"


def python_frames(profile: Profile, stack: int) -> list[str]:
    return [f.name for f in profile.stack_frames(stack) if f.kind == FrameKind.PYTHON]


def sample_program(python: Interpreter) -> tuple[Profile, RawProfile]:
    """PROGRAM run by ``python`` and sampled, its Python frames walked in the kernel."""
    with python.workdir() as (here, inside):
        (here / "threads.py").write_text(textwrap.dedent(PROGRAM))
        raw, pid = sample(python.argv(f"{inside}/threads.py"), freq=499)
        assert raw.python_modules.get(pid), raw.python_unsupported
        naming = PythonNaming([inside])
        profile, _ = build_profile(raw, SymbolResolver(), naming=naming)
    return profile, raw


@pytest.mark.parametrize("python", pythons.params())
def test_each_thread_gets_its_python_stack(python):
    profile, _ = sample_program(pythons.need(python))

    by_leaf: Counter = Counter()
    total = 0.0
    for stack, value in profile.iter_stack_values(0):
        py = python_frames(profile, stack)
        total += value
        if named("main") in py:  # the main thread, once the program runs
            assert py[:2] == [MODULE, named("main")], py
            if named("forward", "Model") in py:
                assert py[2:4] == [named("forward", "Model"), named("spin")], py
                by_leaf["forward"] += value
            if named("squeeze") in py:
                by_leaf["squeeze"] += value
        if named("background") in py:  # the second thread: its own stack only
            assert named("main") not in py and MODULE not in py, py
            assert not {named("spin"), named("squeeze")} & set(py), py
            by_leaf["background"] += value
    # 0.5 s of CPU each at 499 Hz (two cores: the threads share them), with room for noise
    for name in ("forward", "background", "squeeze"):
        assert by_leaf[name] >= 0.5 * 0.5 * 499 * 0.6, (name, by_leaf, total)
    assert sum(by_leaf.values()) >= 0.8 * total, (by_leaf, total)


def test_native_frames_follow_the_python_frames(tmp_path):
    prog = tmp_path / "threads.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    raw, pid = sample([sys.executable, str(prog)], freq=499)
    profile, _ = build_profile(raw, SymbolResolver(), naming=PythonNaming([str(tmp_path)]))
    interpreter = Path(raw.python_modules[pid]).name
    in_zlib = 0.0
    for stack, value in profile.iter_stack_values(0):
        frames = profile.stack_frames(stack)
        names = [f.name for f in frames]
        if named("squeeze") not in names:
            continue
        after = frames[names.index(named("squeeze")) + 1 :]
        native = [f for f in after if f.kind not in (FrameKind.PYTHON, FrameKind.KERNEL)]
        # what the Python code called, never the interpreter's own frames
        assert all(f.module != interpreter for f in native), [(f.name, f.module) for f in after]
        if any("libz" in f.module or "zlib" in f.module for f in native):
            in_zlib += value
    assert in_zlib >= 0.5 * 0.5 * 499 * 0.5, in_zlib


def test_interpreter_found_in_this_process():
    python = find_python(os.getpid())
    assert python.version == sys.version_info[:2]
    assert os.path.realpath(python.module) in {
        os.path.realpath(sys.executable),
        *(os.path.realpath(p) for p in glob.glob(f"{sys.base_prefix}/lib/libpython3*.so*")),
    }


@pytest.mark.parametrize("python", pythons.params())
def test_gil_label_held_in_python_released_in_zlib(python):
    """zlib.compress lets go of the GIL around deflate(); pure Python code holds it."""
    profile, _ = sample_program(pythons.need(python))
    gil: dict[str, Counter] = {"spin": Counter(), "zlib": Counter()}
    for i, stack in enumerate(profile.sample_stack):
        frames = profile.stack_frames(int(stack))
        state = dict(profile.label_sets[profile.sample_labels[i]]).get("gil", "none")
        value = float(profile.values[i, 0])
        if frames and frames[-1].name.startswith(named("spin")):  # in the Python loop itself
            gil["spin"][state] += value
        elif any("libz" in f.module for f in frames):
            gil["zlib"][state] += value
    for where, held in (("spin", "held"), ("zlib", "released")):
        counts = gil[where]
        assert counts[held] >= 0.9 * sum(counts.values()) > 0, (where, counts)


def test_a_kernel_without_the_walk_still_samples(monkeypatch, tmp_path):
    """Where the Python walk does not load (no bpf_loop before Linux 5.17), the sampler
    loads the program without it, says so, and record's Python stacks come from py-spy."""
    from aiflame.collectors.ebpf.libbpf import BpfError
    from aiflame.collectors.ebpf.recording import EbpfRecorder
    from aiflame.collectors.ebpf.sampler import CpuSampler

    real_load = CpuSampler._load

    def old_kernel(self: CpuSampler, python: bool) -> None:
        if python:
            raise BpfError("load profile: Invalid argument (unknown func bpf_loop#181)")
        real_load(self, python)

    monkeypatch.setattr(CpuSampler, "_load", old_kernel)
    prog = tmp_path / "threads.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    raw, _ = sample([sys.executable, str(prog)], freq=199)
    assert raw.stats["samples"] >= 100 and raw.stats["python_stacks"] == 0
    assert not raw.python_frames and not raw.python_modules
    rec = EbpfRecorder(cuda=False)
    rec.start()
    try:
        assert rec.sampler.python_unavailable and not rec.walks_python(os.getpid())
    finally:
        rec.close()


def test_a_program_in_its_own_pid_namespace(tmp_path):
    """In a container the interpreter knows its threads by their ids in the container's PID
    namespace, not the host's: the walk matches those."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare (util-linux) here")
    prog = tmp_path / "threads.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    argv = [unshare, "--pid", "--fork", "--mount-proc", sys.executable, str(prog)]
    raw, _ = sample(argv, freq=499, follow_children=True)
    profile, _ = build_profile(raw, SymbolResolver(), naming=PythonNaming([str(tmp_path)]))
    in_spin = total = 0.0
    for stack, value in profile.iter_stack_values(0):
        py = python_frames(profile, stack)
        total += value
        if named("spin") in py:
            assert py[:4] == [MODULE, named("main"), named("forward", "Model"), named("spin")]
            in_spin += value
    assert in_spin >= 0.5 * 0.5 * 499 * 0.6, (in_spin, total, raw.stats)


def test_an_interpreter_described_at_its_second_look(tmp_path):
    """The agent's way (``python_at_second_look``): a new process's interpreter is
    described only if it still runs at its second look (its maps read again
    ``second_look_s`` after its first sample): most processes a
    busy host starts have ended by then, and describing them was most of what a new
    process cost. A program that runs on has its Python stacks walked from its second
    look; one that ends before is never described."""
    (tmp_path / "threads.py").write_text(textwrap.dedent(PROGRAM))
    (tmp_path / "short.py").write_text(
        "import time\nt = time.time()\nwhile time.time() - t < 0.05:\n    pass\n"
    )
    # 0.6 s: the short program (0.08 s of CPU) has ended by then on a loaded machine too
    options = SamplerOptions(freq=499, pids=None, python_search_s=0.1, code_maps_only=True,
                             python_at_second_look=True, second_look_s=0.6)  # fmt: skip
    sampler = CpuSampler(options)  # every process, as the agent samples
    sampler.start()
    try:
        sampler.poll(10)  # (the first search, of nothing yet)
        pids = []
        # the long program's CPU time when it was described (read as soon as the sampler
        # has done it: on a loaded machine a clock says little of how much it had run)
        cpu_before_second_look = 0.0
        waiting = False  # seen undescribed (sampled, its second look to come)
        for program in ("short.py", "threads.py"):
            proc = subprocess.Popen([sys.executable, str(tmp_path / program)])
            pids.append(proc.pid)
            while proc.poll() is None:
                sampler.poll(20)
                if program != "threads.py" or cpu_before_second_look:
                    continue
                if proc.pid in sampler._undescribed:
                    waiting = True
                elif waiting:
                    cpu_before_second_look = cpu_seconds(proc.pid) or 0.0
        raw = sampler.stop()
    finally:
        sampler.close()
    short, long = pids

    def samples(pid: int) -> tuple[int, int]:
        mine = [(k, c) for k, c in raw.counts if k.pid == pid]
        walked = sum(c for k, c in mine if raw.python_frames.get((pid, k.python_stack)))
        return walked, sum(c for _, c in mine) - walked

    assert samples(short)[1] >= 5 and short not in raw.python_modules  # sampled, not described
    assert raw.python_modules.get(long), raw.python_unsupported
    walked, not_walked = samples(long)
    assert walked >= 200  # 1.5 s of CPU at 499 Hz, less what it had at its second look
    # its samples before its second look are not walked: at 499 Hz about 499 per
    # CPU-second it had then (read a poll late: a share of it; described at its exec, it
    # is never undescribed and only the few of its start-up would not be walked)
    assert cpu_before_second_look > 0
    assert not_walked >= max(3, 0.3 * 499 * cpu_before_second_look), cpu_before_second_look
