"""The CUDA/HIP API probes on real uprobes.

* PyPI's real ``libcudart.so.12`` (nvidia-cuda-runtime-cu12): without a GPU every call
  fails, but the probes fire; exact counts, call-site stacks, kernel names, copy sizes and
  the failed allocations counted as failed, never as live bytes.
* A stand-in runtime and driver (cuda/fake_cudart.c, cuda/fake_cuda.c) whose calls
  succeed: the live-memory path end to end (addresses read at return, pairing, peak,
  timeline), nested runtime -> driver calls counted once, kernel names at module load.
  It checks aiflame's side exactly; what a real driver does is only checked on a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bpfstate
import pytest

import systools
from aiflame.collectors.ebpf.cuda import CudaOptions, CudaProbes
from aiflame.collectors.ebpf.cuda_apis import ApiClass
from aiflame.collectors.ebpf.cuda_session import CudaRecorder
from aiflame.symbolize.pyframes import PythonNaming

pytestmark = pytest.mark.usefixtures("ebpf")
HERE = Path(__file__).parent / "cuda"
MiB = 1 << 20
CFLAGS = ["-O1", "-g", "-Wall", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    systools.need("gcc")
    out = tmp_path_factory.mktemp("cuda")
    lib = [*CFLAGS, "-shared", "-fPIC"]
    steps = [
        [*lib, "-Wl,-soname,libcuda.so.1", "-o", "libcuda.so.1", HERE / "fake_cuda.c"],
        [*lib, "-o", "libcudart.so.12", HERE / "fake_cudart.c", "-L.", "-l:libcuda.so.1",
         "-Wl,-rpath,$ORIGIN"],
        [*CFLAGS, "-o", "memory_target", HERE / "memory_target.c", "-ldl"],
        [*CFLAGS, "-o", "target", HERE / "target.c", "-ldl"],
        [*lib, "-o", "libamdhip64.so.6", HERE / "fake_hip.c"],
        [*CFLAGS, "-o", "hip_target", HERE / "hip_target.c", "-ldl"],
        [*CFLAGS, "-o", "first_calls", HERE / "first_calls.c", "-ldl"],
    ]  # fmt: skip
    for step in steps:
        subprocess.run(["gcc", *map(str, step)], cwd=out, check=True)
    return out


@pytest.fixture(scope="module")
def libcudart() -> str:
    try:
        import nvidia.cuda_runtime as rt  # type: ignore[import-not-found]
    except ImportError:
        systools.unavailable("nvidia-cuda-runtime-cu12 is not installed (pip install '.[test]')")
    found = sorted(Path(next(iter(rt.__path__))).glob("lib/libcudart.so.*"))
    assert found
    return str(found[0])


def own_bpf_handles() -> dict[str, int]:
    """BPF links, programs, maps and perf events this process holds (by fd): exact, where
    the machine-wide lists also show what other processes attach meanwhile."""
    counts: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("anon_inode:") and ("bpf" in target or "perf" in target):
            counts[target] = counts.get(target, 0) + 1
    return counts


def run_probed(argv: list[str], options: CudaOptions | None = None, multi: bool | None = None):
    """Start ``argv`` (it prints "ready" once its libraries are loaded, then waits for a
    line), probe it, let it run to the end; returns the closed probes."""
    systools.need("bpftool")  # to check that nothing is left attached
    before = own_bpf_handles()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with CudaProbes(options, multi=multi) as probes:
            probes.watch(proc.pid)
            assert probes.attached, "no CUDA library found in the target's maps"
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "done"
            assert proc.wait(timeout=30) == 0
            probes.poll(50)
            probes.drain()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not bpfstate.perf_attachments(), "uprobes left attached after close()"
    assert own_bpf_handles() == before, "BPF links, programs or maps left behind"
    return probes


def record(mode: str, out: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """``aiflame record MODE -o OUT -- ARGV`` as a user runs it."""
    cmd = [sys.executable, "-m", "aiflame", "record", mode, "-o", str(out), "--", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def by_stack(profile, metric: str) -> dict[str, float]:
    col = profile.type_index(metric)
    return {";".join(profile.stack_names(s)): v for s, v in profile.iter_stack_values(col) if v}


def from_main(stacks: dict[str, float]) -> dict[str, float]:
    """Stacks cut to start at ``main`` (what calls main is the C library's business)."""
    out: dict[str, float] = {}
    for stack, v in stacks.items():
        frames = stack.split(";")
        assert "main" in frames, stack
        key = ";".join(frames[frames.index("main") :])
        out[key] = out.get(key, 0) + v
    return out


def test_real_libcudart_exact_counts_stacks_and_kernel_names(built, libcudart):
    n_malloc, n_launch, n_free, n_dsync, n_ssync = 5, 7, 3, 2, 4
    pattern = f"m{n_malloc},l{n_launch},f{n_free},d{n_dsync},s{n_ssync},c2,k3"
    probes = run_probed([str(built / "target"), libcudart, pattern])
    calls = probes.calls_profile()
    assert from_main(by_stack(calls, "api-calls")) == {
        "main;alloc_site_a;cudaMalloc": n_malloc,
        "main;launch_site_b;cudaLaunchKernel;-;test::fake_kernel(float*, int)": n_launch,
        "main;free_site_c;cudaFree": n_free,
        "main;sync_site_d;cudaDeviceSynchronize": n_dsync,
        "main;sync_site_d;cudaStreamSynchronize": n_ssync,
        "main;copy_site_e;cudaMemcpy;-;Memcpy HtoD": 2,
        "main;copy2d_site_f;cudaMemcpy2D;-;Memcpy DtoH": 3,
    }
    assert from_main(by_stack(calls, "launch-count")) == {
        "main;launch_site_b;cudaLaunchKernel;-;test::fake_kernel(float*, int)": n_launch
    }
    assert from_main(by_stack(calls, "copy-bytes")) == {
        "main;copy_site_e;cudaMemcpy;-;Memcpy HtoD": 2 * 4096,
        "main;copy2d_site_f;cudaMemcpy2D;-;Memcpy DtoH": 3 * 16 * 8,
    }
    sync = from_main(by_stack(calls, "sync-time"))
    assert set(sync) == {
        "main;sync_site_d;cudaDeviceSynchronize",
        "main;sync_site_d;cudaStreamSynchronize",
    }
    # No GPU here: every cudaMalloc failed, so nothing was allocated.
    assert by_stack(calls, "alloc-bytes") == by_stack(calls, "alloc-count") == {}
    failed = {calls.labels_of(i).get("error") for i in range(len(calls)) if calls.values[i, 3] == 0}
    errors = {
        calls.labels_of(i).get("error")
        for i in range(len(calls))
        if calls.stack_names(int(calls.sample_stack[i]))[-1] == "cudaMalloc"
    }
    assert len(errors) == 1 and None not in errors and None in failed  # launches: no result
    memory = probes.memory_profile()
    assert from_main(by_stack(memory, "failed-alloc-count")) == {
        "main;alloc_site_a;cudaMalloc": n_malloc
    }
    assert from_main(by_stack(memory, "failed-alloc-bytes")) == {
        "main;alloc_site_a;cudaMalloc": 1024 * (1 + 2 + 3 + 4 + 5)
    }
    assert by_stack(memory, "peak-bytes") == by_stack(memory, "alloc-bytes") == {}
    assert memory.meta["memory_counts"]["failed_frees"] == n_free
    stats = probes.stats()
    total = n_malloc + n_launch + n_free + n_dsync + n_ssync + 2 + 3
    assert stats["events"] == total and stats["lost (ring buffer full)"] == 0
    assert stats["stacks not read"] == 0 and not probes.notes()


def test_stand_in_runtime_live_memory_follows_the_pattern(built):
    argv = [
        str(built / "memory_target"),
        str(built / "libcudart.so.12"),
        str(built / "libcuda.so.1"),
    ]
    probes = run_probed(argv)
    memory = probes.memory_profile()
    assert from_main(by_stack(memory, "peak-bytes")) == {
        "main;keep_site;cudaMalloc": 3 * MiB,
        "main;driver_site;cuMemAlloc_v2": MiB // 2,
        "main;peak_site;cudaMalloc": 8 * MiB,
    }
    assert from_main(by_stack(memory, "alloc-count")) == {
        "main;keep_site;cudaMalloc": 3,
        "main;temp_site;cudaMalloc": 4,
        "main;driver_site;cuMemAlloc_v2": 1,
        "main;peak_site;cudaMalloc": 1,
        "main;host_site;cudaMallocHost": 1,
    }
    assert from_main(by_stack(memory, "failed-alloc-count")) == {"main;oom_site;cudaMalloc": 1}
    timeline = memory.meta["memory_timeline"]
    assert [v / MiB for v in timeline["live_bytes"]] == [
        1, 2, 3, 5, 3, 5, 3, 5, 3, 5, 3, 3.5, 11.5, 3.5
    ]  # fmt: skip
    assert memory.meta["peak_bytes"] == 11.5 * MiB
    # cudaMalloc calls cuMemAlloc_v2 inside: 9 mallocs (one failed), 5 frees, 2 syncs
    # are one event each, their driver calls counted as nested
    assert probes.stats()["nested calls skipped"] == 9 + 5 + 2
    calls = probes.calls_profile()
    assert from_main(by_stack(calls, "launch-count")) == {
        "main;launch_site;cuLaunchKernel;-;driver::kernel_a()": 3,
        "main;launch_site;cuLaunchKernel;-;kernel_b(float*)": 2,
    }
    (sync,) = from_main(by_stack(calls, "sync-time")).items()
    assert sync[0] == "main;sync_site;cudaDeviceSynchronize"
    assert 2 * 2e6 <= sync[1] < 2 * 2e6 + 200e6  # two 2 ms waits in the driver


def test_the_per_second_cap_bounds_events_and_counts_the_rest(built, libcudart):
    caps = {ApiClass.LAUNCH: 50, ApiClass.MEMORY: 0, ApiClass.COPY: 0, ApiClass.SYNC: 0}
    probes = run_probed([str(built / "target"), libcudart, "l2000,m3"], CudaOptions(caps=caps))
    launches = probes.log.count({"launch"})
    capped = probes.stats()["over the launch cap"]
    assert 50 <= launches <= 100  # one budget per second; the loop may straddle a second
    assert launches + capped == 2000
    assert probes.log.count({"alloc"}) == 3  # other classes have their own budget
    assert any("launch calls not recorded" in note for note in probes.notes())


def test_record_memory_command_writes_the_profile(built, tmp_path):
    out = tmp_path / "memory.pb.gz"
    target = [str(built / "memory_target"), str(built / "libcudart.so.12")]
    rec = record("--memory", out, [*target, str(built / "libcuda.so.1"), "500"])
    assert rec.returncode == 0, rec.stderr
    assert "peak 11.50 MiB" in rec.stderr and "1 failed allocation calls" in rec.stderr
    from aiflame.sources.registry import load

    profile = load(str(out))
    assert from_main(by_stack(profile, "peak-bytes")) == {
        "main;keep_site;cudaMalloc": 3 * MiB,
        "main;driver_site;cuMemAlloc_v2": MiB // 2,
        "main;peak_site;cudaMalloc": 8 * MiB,
    }


def test_one_link_per_probe_where_the_kernel_has_no_uprobe_multi(built, libcudart):
    options = CudaOptions(roles={"launch", "alloc"})  # fewer probes: each detaches slowly
    probes = run_probed([str(built / "target"), libcudart, "m2,l3,f4"], options, multi=False)
    assert not probes.multi and next(iter(probes.files.values())).links > 2
    calls = probes.calls_profile()
    assert from_main(by_stack(calls, "api-calls")) == {
        "main;alloc_site_a;cudaMalloc": 2,
        "main;launch_site_b;cudaLaunchKernel;-;test::fake_kernel(float*, int)": 3,
    }  # cudaFree was not asked for


@pytest.mark.parametrize("system_wide", [False, True], ids=["target", "system-wide"])
def test_the_recorder_beside_other_collectors(built, libcudart, system_wide):
    proc = subprocess.Popen(
        [str(built / "target"), libcudart, "m2,l3,s1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    rec = CudaRecorder(follow_children=True, system_wide=system_wide)
    try:
        assert proc.stdout.readline().strip() == "ready"
        rec.start()
        if not system_wide:
            rec.add_target(proc.pid)
        rec.tick()  # the first tick scans at once
        assert proc.pid in rec.probes.attached
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "done"
        proc.wait(timeout=30)
        rec.tick()
        profile = rec.finish()
    finally:
        rec.close()
        if proc.poll() is None:
            proc.kill()
    assert profile is not None
    mine = {i for i in range(len(profile)) if profile.labels_of(i)["pid"] == str(proc.pid)}
    counts: dict[str, float] = {}
    col = profile.type_index("api-calls")
    for i in mine:
        names = profile.stack_names(int(profile.sample_stack[i]))
        key = ";".join(names[names.index("main") :])
        counts[key] = counts.get(key, 0) + profile.values[i, col]
    assert counts == {
        "main;alloc_site_a;cudaMalloc": 2,
        "main;launch_site_b;cudaLaunchKernel;-;test::fake_kernel(float*, int)": 3,
        "main;sync_site_d;cudaStreamSynchronize": 1,
    }


def test_record_ebpf_has_the_cuda_metrics_beside_cpu_samples(built, tmp_path):
    out = tmp_path / "run.pb.gz"
    target = [str(built / "memory_target"), str(built / "libcudart.so.12")]
    rec = record("--ebpf", out, [*target, str(built / "libcuda.so.1"), "500"])
    assert rec.returncode == 0, rec.stderr
    from aiflame.sources.registry import load

    profile = load(str(out))
    names = [t.name for t in profile.sample_types]
    # cpu-samples first, when the program (which mostly sleeps) was caught on a CPU: a
    # metric without data is left out
    assert names[0] == "cpu-samples" or "cpu-samples" not in names
    assert all(profile.totals() > 0)
    wanted = ["launch-count", "sync-time", "alloc-bytes", "alloc-count"]
    assert set(wanted) <= set(names) and "copy-bytes" not in names  # it copies nothing
    assert from_main(by_stack(profile, "launch-count")) == {
        "main;launch_site;cuLaunchKernel;-;driver::kernel_a()": 3,
        "main;launch_site;cuLaunchKernel;-;kernel_b(float*)": 2,
    }
    assert from_main(by_stack(profile, "alloc-count"))["main;temp_site;cudaMalloc"] == 4


def test_hip_launches_allocations_and_names(built):
    probes = run_probed([str(built / "hip_target"), str(built / "libamdhip64.so.6")])
    (att,) = probes.attached.values()
    assert [lib.family for lib in att.libraries] == ["hip"]
    calls = probes.calls_profile()
    assert from_main(by_stack(calls, "launch-count")) == {
        "main;hip_launch_site;hipLaunchKernel;-;hip_test::saxpy(float, float*)": 3,
        "main;hip_launch_site;hipModuleLaunchKernel;-;module_kernel()": 2,
    }
    (sync,) = from_main(by_stack(calls, "sync-time")).items()
    assert sync[0] == "main;hip_launch_site;hipDeviceSynchronize" and sync[1] >= 1e6
    memory = probes.memory_profile()
    assert from_main(by_stack(memory, "peak-bytes")) == {
        "main;hip_alloc_site;hipMalloc": 8192 + 65536
    }
    assert from_main(by_stack(memory, "alloc-count")) == {"main;hip_alloc_site;hipMalloc": 3}
    assert memory.meta["memory_timeline"]["live_bytes"] == [4096, 8192, 8192 + 65536, 8192]


def test_ctrl_c_ends_a_recording_and_detaches(built):
    import signal
    import threading

    from aiflame.collectors.ebpf import cuda_session

    before = own_bpf_handles()
    argv = [str(built / "memory_target"), str(built / "libcudart.so.12")]
    options = cuda_session.CudaRecordOptions(probes=CudaOptions.memory_only())
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        rec = cuda_session.launch([*argv, str(built / "libcuda.so.1"), "20000"], options)
    finally:
        timer.cancel()
    try:
        assert rec.interrupted and rec.elapsed_s < 10
        assert rec.target is not None and rec.target.poll() is None  # the program goes on
        assert rec.probes.attached  # it had been probed
        assert own_bpf_handles() == before
    finally:
        rec.target.kill()
        rec.target.wait()


PY_TARGET = """
import ctypes
import sys

rt = ctypes.CDLL(sys.argv[1])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
rt.cudaDeviceSynchronize.argtypes = []


class Model:
    def allocate(self, n):
        out = []
        for _ in range(n):
            p = ctypes.c_void_p()
            assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0
            out.append(p)
        return out


def release(blocks):
    for p in blocks:
        rt.cudaFree(p)


def main():
    print("ready", flush=True)
    sys.stdin.readline()
    blocks = Model().allocate(3)
    release(blocks[:2])
    rt.cudaDeviceSynchronize()
    print("done", flush=True)
    sys.stdin.readline()  # until the events are read: code objects are named meanwhile


main()
"""


def test_python_frames_of_cuda_calls(built, tmp_path):
    """A Python program calling the runtime through ctypes: each call site reads its Python
    frames (named as the CPU samples and the PyTorch profiler name them), then the native
    frames between them and the API (ctypes, libffi), then the API function."""
    prog = tmp_path / "alloc.py"
    prog.write_text(PY_TARGET)
    argv = [sys.executable, str(prog), str(built / "libcudart.so.12")]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with CudaProbes() as probes:
            probes.watch(proc.pid)
            assert probes.python is not None  # this kernel has bpf_loop
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "done"
            probes.poll(50)
            probes.drain()
            proc.stdin.write("end\n")
            proc.stdin.flush()
            assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    probes.naming = PythonNaming([str(tmp_path)])  # files relative to the program's sys.path
    memory = probes.memory_profile()
    lines = [(i + 1, ln) for i, ln in enumerate(PY_TARGET.split("\n"))]
    at = {name: n for n, ln in lines for name in ("allocate", "main") if f"def {name}(" in ln}
    allocate = f"Model > allocate (alloc.py:{at['allocate']})"
    outer = ["<module> (alloc.py:1)", f"main (alloc.py:{at['main']})", allocate]
    peak = by_stack(memory, "peak-bytes")
    assert sum(peak.values()) == 3 * MiB  # the three blocks, before two are freed
    for stack in peak:
        frames = stack.split(";")
        assert frames[:3] == outer, frames
        assert frames[-1] == "cudaMalloc"
        native = frames[3:-1]  # ctypes and libffi, never the interpreter's frames
        assert native and not any("_PyEval" in f for f in native), frames
    calls = probes.calls_profile()
    sync = by_stack(calls, "sync-time")
    (stack,) = sync
    assert stack.split(";")[:2] == outer[:2] and stack.endswith(";cudaDeviceSynchronize"), stack


def test_probes_without_the_python_walk_on_older_kernels(built, libcudart, monkeypatch):
    """No bpf_loop (Linux < 5.17): the programs without the walk load, and count as before."""
    from aiflame.collectors.ebpf.libbpf import BpfError, BpfObject

    real_open = CudaProbes._open

    def old_kernel(self: CudaProbes, multi: bool, names: tuple[str, str]) -> BpfObject:
        if names == CudaProbes.PYTHON_PROGRAMS:
            raise BpfError("load aiflame-cuda: Invalid argument (unknown func bpf_loop#181)")
        return real_open(self, multi, names)

    monkeypatch.setattr(CudaProbes, "_open", old_kernel)
    probes = run_probed([str(built / "target"), libcudart, "m2,l3,f4"])
    assert probes.python is None
    assert probes.log.all_calls()


def test_record_memory_of_a_python_program(built, tmp_path):
    """``record --memory -- python script.py``: allocation stacks start at the script's
    Python frames, named relative to the script's directory."""
    prog = tmp_path / "alloc.py"
    prog.write_text(
        PY_TARGET.replace(
            "    sys.stdin.readline()  # until the events are read: code objects"
            " are named meanwhile\n",
            "    time.sleep(0.5)  # the recorder reads its events\n",
        )
        .replace("    sys.stdin.readline()\n", "    time.sleep(0.5)  # the probes attach\n")
        .replace("import sys\n", "import sys\nimport time\n")
    )
    out = tmp_path / "memory.folded"
    rec = record("--memory", out, [sys.executable, str(prog), str(built / "libcudart.so.12")])
    assert rec.returncode == 0 and "done" in rec.stdout, rec.stderr
    stacks = out.read_text().splitlines()
    assert stacks and all(
        line.startswith("<module> (alloc.py:1);main (alloc.py:") and ";Model > allocate (" in line
        for line in stacks
    ), stacks


# -- the first calls: made right after the library is loaded ---------------------------------

FIRST_MALLOCS, FIRST_LAUNCHES = 37, 23
FIRST_CALLS = {
    "main;alloc_site;cudaMalloc": FIRST_MALLOCS,
    "main;launch_site;cudaLaunchKernel;-;test::first_kernel(float*)": FIRST_LAUNCHES,
}


@pytest.fixture(scope="module")
def linked_calls(built, libcudart) -> Path:
    """first_calls.c linked with PyPI's libcudart: the dynamic loader maps it before main."""
    lib = os.path.dirname(libcudart)
    out = built / "linked_calls"
    link = ["-ldl", f"-L{lib}", "-Wl,--no-as-needed", f"-l:{os.path.basename(libcudart)}"]
    cmd = ["gcc", *CFLAGS, "-o", str(out), str(HERE / "first_calls.c"), *link, f"-Wl,-rpath,{lib}"]
    subprocess.run(cmd, check=True)
    return out


def first_calls_argv(built: Path, linked: Path, libcudart: str, how: str) -> list[str]:
    counts = [str(FIRST_MALLOCS), str(FIRST_LAUNCHES)]
    if how == "linked":
        return [str(linked), "-", *counts]
    return [str(built / "first_calls"), libcudart, *counts]


@pytest.mark.parametrize("how", ["dlopen", "linked"])
def test_calls_right_after_the_library_loads_are_all_seen_in_a_launched_program(
    built, linked_calls, libcudart, tmp_path, how
):
    """37 cudaMalloc and 23 cudaLaunchKernel the moment libcudart is loaded (dlopen, or by
    the dynamic loader before main): every one is counted at its call site."""
    argv = first_calls_argv(built, linked_calls, libcudart, how)
    out = tmp_path / "run.pb.gz"
    rec = record("--ebpf", out, argv)
    assert rec.returncode == 0, rec.stderr
    from aiflame.sources.registry import load

    profile = load(str(out))
    assert from_main(by_stack(profile, "api-calls")) == FIRST_CALLS
    memory = tmp_path / "memory.folded"
    rec = record("--memory", memory, argv)
    assert rec.returncode == 0, rec.stderr
    assert f"{FIRST_MALLOCS} failed allocation calls" in rec.stderr  # no GPU: all fail


@pytest.mark.parametrize("system_wide", [False, True], ids=["its-parent", "system-wide"])
def test_calls_right_after_dlopen_in_a_process_started_later(built, libcudart, system_wide):
    """A process that starts once the recording runs (a child of a recorded process, or any
    process with --all and the agent) is stopped when it maps libcudart until its probes
    are in: none of its first calls is missed."""
    argv = first_calls_argv(built, built, libcudart, "dlopen")
    rec = CudaRecorder(follow_children=True, system_wide=system_wide)
    rec.start()
    try:
        if system_wide:
            proc = subprocess.Popen(argv)
        else:  # a shell that starts the program a moment later
            proc = subprocess.Popen(["sh", "-c", 'sleep 0.3; "$@"; true', "sh", *argv])
            rec.add_target(proc.pid)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            rec.tick(50)
        assert proc.wait(timeout=5) == 0
        profile = rec.finish()
    finally:
        rec.close()
    assert profile is not None
    assert from_main(by_stack(profile, "api-calls")) == FIRST_CALLS
    assert rec.probes is not None and rec.probes.stats()["processes stopped until probed"] >= 1


IMPORT_TIME = """
import ctypes
import sys


class Weights:
    def load(self, rt, n):
        for i in range(n):
            p = ctypes.c_void_p()
            rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4096 * (i + 1)))


Weights().load(ctypes.CDLL(sys.argv[1]), int(sys.argv[2]))
"""


def test_python_allocating_the_moment_it_loads_libcudart(libcudart, tmp_path):
    """A script that allocates at import, right after loading the runtime: every call, with
    its Python call site."""
    prog = tmp_path / "weights.py"
    prog.write_text(IMPORT_TIME)
    out = tmp_path / "memory.folded"
    argv = [sys.executable, str(prog), libcudart, str(FIRST_MALLOCS)]
    cmd = [sys.executable, "-m", "aiflame", "record", "--memory", "--metric"]
    cmd += ["failed-alloc-count", "-o", str(out), "--", *argv]
    rec = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert rec.returncode == 0, rec.stderr
    stacks = dict(line.rsplit(" ", 1) for line in out.read_text().splitlines())
    assert sum(int(v) for v in stacks.values()) == FIRST_MALLOCS, stacks
    for stack in stacks:
        frames = stack.split(";")
        assert frames[:2] == ["<module> (weights.py:1)", "Weights > load (weights.py:7)"], frames
        assert frames[-1] == "cudaMalloc"


HOLDER = """
import sys, time
from aiflame.collectors.ebpf.cuda_session import CudaRecorder

rec = CudaRecorder(system_wide=True)
rec.start()
print("recording", flush=True)
time.sleep(60)  # never reads its events: a process it stops stays stopped meanwhile
"""


def test_a_stopped_process_goes_on_if_the_recorder_dies(built, libcudart):
    """The recorder is killed (SIGKILL) while a process waits, stopped, for its probes: the
    watchdog continues it, and it runs to its end."""
    import signal

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    proc = None
    try:
        assert holder.stdout.readline().strip() == "recording"
        proc = subprocess.Popen(first_calls_argv(built, built, libcudart, "dlopen"))
        deadline = time.monotonic() + 30
        while thread_state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert thread_state(proc.pid) == "T", "the process was not stopped at its mmap"
        holder.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def thread_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0].decode()
    except OSError:
        return ""


def test_a_shells_foreground_job_is_not_stopped(built, libcudart):
    """A program run from an interactive shell in a terminal is its foreground job: a stop
    would give the terminal back to the shell, so it is not stopped (and said so)."""
    script = systools.find("script")
    if script is None:
        systools.unavailable("needs script (apt-get install bsdutils)")
    argv = " ".join(first_calls_argv(built, built, libcudart, "dlopen"))
    rec = CudaRecorder(system_wide=True)
    rec.start()
    try:
        shell = subprocess.Popen(
            [script, "-qec", f"bash --norc -ic 'sleep 0.3; {argv}; echo finished'", "/dev/null"],
            stdout=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while shell.poll() is None and time.monotonic() < deadline:
            rec.tick(50)
        assert "finished" in shell.stdout.read()
        rec.finish()
    finally:
        rec.close()
    stats = rec.probes.stats()
    assert stats["foreground jobs not stopped"] >= 1, stats
    assert any("foreground jobs were not stopped" in note for note in rec.notes), rec.notes


def test_a_program_in_a_chroot_with_its_own_dynamic_loader(built, libcudart, tmp_path):
    """A program of another root (as in a container, seen through /proc/PID/root) runs its
    own dynamic loader: it waits at its exec until that loader is watched, and its first
    calls are all seen."""
    import pythons

    roots = [pythons.CHROOTS / r for r in ("sid", "noble", "jammy")]  # glibc 2.34+
    root = next((r for r in roots if (r / "usr/bin").is_dir()), None)
    if root is None:
        pytest.skip(f"needs a Debian sid or Ubuntu noble/jammy chroot in {pythons.CHROOTS}")
    inside = Path(tempfile.mkdtemp(prefix="aiflame-test-", dir=root / "tmp"))
    try:
        shutil.copy(built / "first_calls", inside)
        shutil.copy(libcudart, inside / "libcudart.so.12")
        at = "/" + str(inside.relative_to(root))
        argv = [shutil.which("chroot") or "chroot", str(root), f"{at}/first_calls"]
        argv += [f"{at}/libcudart.so.12", str(FIRST_MALLOCS), str(FIRST_LAUNCHES)]
        out = tmp_path / "run.pb.gz"
        rec = record("--ebpf", out, argv)
    finally:
        shutil.rmtree(inside, ignore_errors=True)
    assert rec.returncode == 0, rec.stderr
    from aiflame.sources.registry import load

    assert from_main(by_stack(load(str(out)), "api-calls")) == FIRST_CALLS
