"""The eBPF CPU sampler on a C program with known hot functions (built here with gcc).

hot.c spends 60 / 30 / 10 % of its CPU time in hot_a / hot_b / hot_c (each spinning on the
thread CPU clock), all called from main; the sampled shares must match within a few points.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import bpfstate
import pytest

from aiflame.collectors.ebpf.cpu_profile import START_FUNCTIONS, build_profile
from aiflame.collectors.ebpf.sampler import CpuSampler, RawProfile, SamplerOptions
from aiflame.model import FrameKind, Profile
from aiflame.symbolize.process import SymbolResolver

pytestmark = pytest.mark.usefixtures("ebpf")
TRUTH = {"hot_a": 0.60, "hot_b": 0.30, "hot_c": 0.10}
TOLERANCE = 0.05  # binomial noise at ~1000 samples is about 1.5 points


def sample(argv: list[str], freq: int = 499, **options: object) -> tuple[RawProfile, int]:
    """Launch ``argv`` and sample it (and its children) until it exits."""
    sampler = CpuSampler(SamplerOptions(freq=freq, pids=[], **options))  # type: ignore[arg-type]
    sampler.start()
    try:
        proc = subprocess.Popen(argv, preexec_fn=sampler.preexec)
        sampler.add_target(proc.pid)  # its maps (and a no-op for the map)
        while proc.poll() is None:
            sampler.poll(50)
        return sampler.stop(), proc.pid
    finally:
        sampler.close()


def shares(profile: Profile, names: list[str]) -> dict[str, float]:
    inclusive: Counter = Counter()
    total = 0.0
    for stack, value in profile.iter_stack_values(0):
        frames = set(profile.stack_names(stack))
        total += value
        for n in names:
            if n in frames:
                inclusive[n] += value
    return {n: inclusive[n] / total for n in names}


def test_hot_function_shares_and_stacks(hot):
    raw, pid = sample([str(hot), "1"], freq=997)
    profile, stats = build_profile(raw, SymbolResolver())
    assert raw.stats["samples"] >= 700  # 1 s of CPU at 997 Hz, give or take
    got = shares(profile, list(TRUTH))
    for name, truth in TRUTH.items():
        assert abs(got[name] - truth) <= TOLERANCE, (name, got)
    # main calls each hot function, which calls spin; stacks start at libc's start
    callers: Counter = Counter()
    in_main = 0.0
    for stack, value in profile.iter_stack_values(0):
        names = profile.stack_names(stack)
        if "main" not in names:
            continue  # the exec itself, the dynamic loader
        in_main += value
        # (libc's start code has no name where its debug symbols, libc6-dbg, are not installed)
        started = names[0] in START_FUNCTIONS or names[0].startswith("libc.so.6+0x")
        assert started and names[1] == "main", names
        if "spin" in names:
            i = names.index("spin")
            callers[tuple(names[i - 2 : i + 1])] += value
    assert {c[:2] for c in callers} == {("main", f) for f in TRUTH}
    # the program's own samples (after the exec: comm "hot") are in main; before it, the
    # forked test process (copy-on-write faults of a large parent, preexec) is not
    after_exec = sum(
        float(profile.values[i, 0])
        for i in range(len(profile))
        if profile.labels_of(i).get("comm") == "hot"
    )
    assert in_main >= 0.97 * after_exec, (in_main, after_exec, raw.stats["samples"])
    assert stats.truncated / stats.user_stacks <= 0.03  # only samples from before main
    assert stats.user_stacks >= raw.stats["samples"] - 5  # (none while it execs)
    kinds = {FrameKind(k) for k in profile.frames.kind}
    assert FrameKind.KERNEL in kinds  # clock_gettime's system calls
    labels = {tuple(sorted(profile.labels_of(i).items())) for i in range(len(profile))}
    assert {dict(ls)["pid"] for ls in labels} == {str(pid)}
    assert "hot" in {dict(ls)["comm"] for ls in labels}  # (and "python" before the exec)
    assert all("cgroup" in dict(ls) for ls in labels)
    # nothing lost; a user stack or two may be unreadable while the program execs
    assert raw.stats["user_stack_empty"] <= 3
    assert profile.meta["info:ebpf losses"] in (
        "none",
        f"lost {raw.stats['user_stack_empty']} unreadable user stacks",
    )
    assert raw.stats["counts_full"] == raw.stats["stacks_full"] == raw.stats["events_lost"] == 0


def test_children_are_followed_and_labelled(hot, tmp_path):
    script = f"{hot} 0.5 & {hot} 0.5; wait"
    raw, sh_pid = sample(["/bin/sh", "-c", script], freq=199, follow_children=True)
    pids = {k.pid for k, _ in raw.counts if k.comm == "hot"}
    assert len(pids) == 2 and sh_pid not in pids
    assert pids <= set(raw.maps)  # each child was snapshotted when first sampled
    profile, _ = build_profile(raw, SymbolResolver(), process_frames=True)
    roots = {profile.stack_frames(s)[0] for s, _ in profile.iter_stack_values(0)}
    assert all(r.kind == FrameKind.LABEL for r in roots)
    # each process under its command line and pid: `hot 0.5 (1234)`
    hot_roots = {r.name for r in roots if r.name.startswith("hot 0.5 (")}
    assert {int(r.rsplit("(", 1)[1].rstrip(")")) for r in hot_roots} == pids


def test_children_are_not_followed_unless_asked(hot):
    spin = "i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done"  # the shell's own CPU time
    raw, sh_pid = sample(["/bin/sh", "-c", f"{spin}; {hot} 0.3; {hot} 0.3"], freq=199)
    # sh forks the hot processes: only the shell itself (python before its exec) is a target
    assert {k.pid for k, _ in raw.counts} == {sh_pid}
    assert "hot" not in {k.comm for k, _ in raw.counts}


def test_nothing_left_attached_after_target_exit_or_error(hot, bpftool):
    held: set[tuple[str, int]] = set()
    sampler = CpuSampler(SamplerOptions(freq=99, pids=[]))
    sampler.start()
    proc = subprocess.Popen([str(hot), "0.2"])
    sampler.add_target(proc.pid)
    held |= bpfstate.bpf_fds()
    while proc.poll() is None:
        sampler.poll(50)
    assert sampler.stop().counts  # the target exited: stop() reads, then detaches
    assert {k for k, _ in held} == {"link", "prog", "map"}
    assert bpfstate.bpf_fds() == set()
    assert bpfstate.still_loaded(held) == set()
    sampler = CpuSampler(SamplerOptions(pids=[]))
    sampler.start()
    held = bpfstate.bpf_fds()
    assert len([k for k, _ in held if k == "link"]) >= 2  # a timer per CPU, exec tracepoint
    del sampler  # a sampler dropped without stop() still detaches
    assert bpfstate.bpf_fds() == set()
    assert bpfstate.still_loaded(held) == set()


def test_whole_system_sees_other_processes(hot):
    # not 99 Hz: hot's 10 ms cycle would alias with a 10.1 ms period and could miss hot_a
    sampler = CpuSampler(SamplerOptions(freq=997))
    sampler.start()
    try:
        proc = subprocess.Popen([str(hot), "0.5"])
        t0 = time.monotonic()
        while proc.poll() is None or time.monotonic() - t0 < 0.3:
            sampler.poll(50)
        raw = sampler.stop()
    finally:
        sampler.close()
    assert proc.pid in {k.pid for k, _ in raw.counts}
    assert proc.pid in raw.maps  # announced and snapshotted while it ran
    profile, _ = build_profile(raw, SymbolResolver(), process_frames=True)
    hot_stacks = [
        profile.stack_names(s)
        for s, _ in profile.iter_stack_values(0)
        if profile.stack_names(s)[0].endswith(f" ({proc.pid})")
    ]
    assert any("hot_a" in names for names in hot_stacks)


def _running_hot(parent: int) -> bool:
    """Whether a child of ``parent`` runs the hot program (exec'd, not just forked)."""
    for task in Path(f"/proc/{parent}/task").glob("*/children"):
        for child in task.read_text().split():
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "hot":
                    return True
            except OSError:
                continue
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_recording_leaves_nothing_attached(hot, bpftool, tmp_path, sig):
    out = tmp_path / "p.folded"
    # -r 997: hot's 10 ms cycle would alias with 99 Hz and could miss hot_a
    argv = [sys.executable, "-m", "aiflame", "record", "--ebpf", "-r", "997", "-o", str(out)]
    rec = subprocess.Popen(
        [*argv, "--", str(hot), "30"],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group, as in a terminal
    )
    deadline = time.monotonic() + 20
    held: set[tuple[str, int]] = set()
    while not any(k == "link" for k, _ in held) and time.monotonic() < deadline:
        time.sleep(0.1)
        held = bpfstate.bpf_fds(rec.pid)
    while not _running_hot(rec.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the program starts once every collector is loaded
    time.sleep(0.5)
    assert held, "the recording never attached"
    if sig == signal.SIGINT:
        os.killpg(rec.pid, sig)  # Ctrl-C reaches the whole group
    else:
        rec.send_signal(sig)  # aiflame passes SIGTERM on to the program
    _, err = rec.communicate(timeout=60)
    assert out.exists(), err
    assert "hot_a" in out.read_text()
    assert rec.returncode == 128 + sig, err  # the program's fate
    assert bpfstate.still_loaded(held) == set()


LOADS_LATER = """
import time
t = time.monotonic()
while time.monotonic() - t < 1.0:  # sampled, its maps read, before the library is loaded
    pass
import decimal  # loads the _decimal extension module
t = time.monotonic()
while time.monotonic() - t < 1.5:
    decimal.Decimal(7).sqrt() ** 3
print("done", flush=True)
time.sleep(30)  # cut while it runs
"""


def test_a_continuous_cut_reads_maps_again_for_code_mapped_since(tmp_path):
    """A continuous profiler cuts periods without reading every process's maps each time:
    only where a new stack points into code its last snapshot does not map (a library
    loaded since) are they read again, so that code is symbolized."""
    (tmp_path / "later.py").write_text(LOADS_LATER)
    options = SamplerOptions(freq=499, pids=[], code_maps_only=True, python_at_second_look=True,
                             python_search_s=0.5, max_snapshots=3)  # fmt: skip
    sampler = CpuSampler(options)
    sampler.start()
    resolver = SymbolResolver()
    try:
        proc = subprocess.Popen([sys.executable, str(tmp_path / "later.py")],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        sampler.add_target(proc.pid)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.8:
            sampler.poll(20)
        look = sampler.last_look(proc.pid, 5.0)  # (the agent's identities take it)
        assert look is not None and look.argv == [sys.executable, str(tmp_path / "later.py")]
        assert look.comm.startswith("python") and look.started > 0
        first = "".join(sampler.cut().maps[proc.pid])  # (the sampler's list: copied now)
        assert sampler.last_look(proc.pid, 5.0) is None  # kept until the cut
        ready = threading.Thread(target=proc.stdout.readline)  # type: ignore[union-attr]
        ready.start()
        while ready.is_alive() and time.monotonic() - t0 < 30:
            sampler.poll(20)
        second = sampler.cut()
    finally:
        sampler.close()
        proc.kill()
        proc.wait()
    assert "_decimal" not in first
    profile, _ = build_profile(second, resolver)
    modules = Counter()
    for stack, value in profile.iter_stack_values(0):
        for frame in profile.stack_frames(stack):
            if "_decimal" in frame.module:  # (not [unknown]: outside every known mapping)
                modules["_decimal"] += value
                break
        else:
            modules["other"] += value
    assert modules["_decimal"] >= 100, modules  # most of 1.5 s at 499 Hz
