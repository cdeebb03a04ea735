"""A recording session: launch a program (or attach to a PID), sample it, build one Profile.

Two py-spy samplers watch the target at once:

* ``cpu-samples``: Python stacks at ``rate`` Hz (99 by default) of the threads the OS sees
  running. py-spy reads them without pausing the process (``--nonblocking``), which is what
  keeps the overhead low.
* ``native-samples``: Python + C/C++ + JIT stacks of every thread at ``native_rate`` Hz,
  labelled ``state`` = active / idle / gil-wait. Native unwinding pauses the process and
  costs milliseconds per sample (far more with JIT code on the stack), hence its own,
  lower rate.

Programs that are launched get the torch bootstrap (:mod:`.torch_bootstrap`) on PYTHONPATH
and ``ONEDNN_JIT_PROFILE=2``, so oneDNN names its JIT kernels in ``/tmp/perf-<pid>.map``.
The torch traces, if any, are loaded with the Kineto importer and merged in.

With eBPF (``ebpf`` "auto" as root, or "on"), :mod:`.ebpf.recording` samples every thread
of the target and its children in the kernel instead: ``cpu-samples`` then holds native,
JIT and kernel frames, and, for CPython 3.8-3.15, the Python frames too, which the BPF
program walks itself: no py-spy process then (``python_in_kernel``). For other
interpreters, py-spy's Python stacks are kept beside as ``python-samples``.
``system_wide`` records every process with eBPF alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiflame.collectors import procs
from aiflame.collectors.gpupc import collector_env, join_with_windows, load_gpu_samples
from aiflame.collectors.own_frames import BOOTSTRAP_DIR, bootstrap_frames
from aiflame.collectors.pyspy import (
    SamplerConfig,
    StreamSpec,
    add_samples,
    explain_failure,
    find_pyspy,
    read_speedscope,
)
from aiflame.collectors.torchtrace import load_torch_traces, python_roots, window_costs
from aiflame.errors import AiflameError
from aiflame.model import Profile, ProfileBuilder, SampleType
from aiflame.symbolize.perfmap import PerfMap, map_path
from aiflame.symbolize.pyframes import PythonNaming
from aiflame.transforms.strip import drop_empty_types, strip_frames

if TYPE_CHECKING:
    from aiflame.collectors.ebpf.recording import EbpfRecorder

CPU_SAMPLES = SampleType("cpu-samples", "count")
PYTHON_SAMPLES = SampleType("python-samples", "count")  # py-spy's, beside eBPF's cpu-samples
NATIVE_SAMPLES = SampleType("native-samples", "count")
TRUNCATED_FOR_PYTHON_VIEW = 0.5  # share of cut-short eBPF stacks that makes py-spy's the default
READY_TIMEOUT_S = 10.0  # for the interpreter to come up before sampling starts anyway
# With eBPF, a launched program that maps no interpreter this long after it started is
# taken for what it is (a C/C++ program, a shell): no py-spy is started for it.
NO_INTERPRETER_S = 0.5
SAMPLER_EXIT_GRACE_S = 10.0
INTERRUPT_GRACE_S = 5.0
EXPORT_SLACK_S = 60.0  # for a torch window to export its trace after it ends


@dataclass
class RecordOptions:
    rate: int = 99
    native_rate: int | None = 0  # None: 0 with eBPF (it has native stacks), else native_fallback
    native_fallback: int = 0
    duration: float | None = None
    subprocesses: bool = False
    torch_window: float = 5.0  # 0: no PyTorch profiler window
    torch_delay: float = 0.0
    status: Callable[[str], None] | None = None  # receives the live status line
    progress: Callable[[str], None] | None = None  # each step after the recording ends
    ebpf: str = "off"  # "auto": eBPF when it works, else one note; "on": required
    system_wide: bool = False  # every process, eBPF only (launch/attach not used)
    python_in_kernel: bool = True  # with eBPF, walk Python stacks there where it can (no py-spy)
    gpu_pc_sampling: bool = False  # CUPTI PC sampling in the program (collectors/gpupc.py)
    # Importer options of the PyTorch window's trace (module_instances, merge_steps).
    trace_options: dict[str, bool] = field(default_factory=dict)


@dataclass
class RecordResult:
    profile: Profile | None
    notes: list[str] = field(default_factory=list)
    target: subprocess.Popen | None = None  # a launched program, maybe still running
    interrupted: bool = False
    elapsed_s: float = 0.0
    failure: str | None = None  # why nothing was recorded


class Session:
    """One recording; use :meth:`launch` or :meth:`attach` once."""

    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        self.pyspy: str | None = None  # found where a py-spy sampler is needed (_need_pyspy)
        self.pyspy_missing = False  # with eBPF: py-spy's extra stacks were needed, not found
        self.ebpf_unavailable = ""  # why eBPF was not used ("auto" mode)
        self.ebpf: EbpfRecorder | None = None
        self.ebpf_profile: Profile | None = None
        self.dir = tempfile.mkdtemp(prefix="aiflame-record-")
        self.samplers: list[tuple[str, subprocess.Popen, SamplerConfig]] = []
        self.notes: list[str] = []
        self.failures: list[str] = []  # why a sampler recorded nothing
        self.python_in_kernel = False  # the eBPF sampler walks the target's Python stacks
        self.no_python = False  # eBPF saw no interpreter in the target: no py-spy, no notes
        self._signals: list[int] = []
        self._own_perf_maps = False  # we asked oneDNN for them: ours to delete
        self.naming: PythonNaming | None = None  # Python frames named alike by every recorder
        self.target_name = ""  # the program launched, or the command of the PID attached to

    # -- public entry points ------------------------------------------------------------------
    def launch(self, argv: list[str]) -> RecordResult:
        self.target_name = os.path.basename(argv[0])
        self._start_ebpf(follow_children=True)  # before the program: a failure runs nothing
        self._need_pyspy()
        env = self._target_env()
        preexec = self.ebpf.preexec if self.ebpf is not None else None
        target = procs.start(argv, env=env, preexec_fn=preexec)
        if self.ebpf is not None:
            self.ebpf.add_target(target.pid)
        t0 = time.monotonic()
        with self._trap_signals(target):
            self._wait_ready(target)
            if target.poll() is None:
                self._start_samplers(target.pid)
            self._run_loop(target.pid, target)
        result = self._finish(target.pid, target, t0)
        result.target = target
        return result

    def attach(self, pid: int) -> RecordResult:
        procs.check_attachable(pid)
        self.target_name = procs.name(pid)
        self._start_ebpf(follow_children=self.options.subprocesses)
        self._need_pyspy()
        if self.ebpf is not None:
            self.ebpf.add_target(pid)
        t0 = time.monotonic()
        with self._trap_signals(None):
            self._start_samplers(pid)
            self._run_loop(pid, None)
        result = self._finish(pid, None, t0)
        if result.profile is None and self.ebpf is not None and not self.options.subprocesses:
            # eBPF samples any program: nothing means it never ran (a launcher that waits)
            raise AiflameError(
                f"nothing was sampled in process {pid} ({procs.name(pid) or '?'}) in "
                f"{result.elapsed_s:.1f} s: it did not run on a CPU (a program it started is "
                "followed with --subprocesses)"
            )
        if result.failure and result.profile is None:
            raise AiflameError(result.failure)
        return result

    def system(self) -> RecordResult:
        """Every process of the machine, with eBPF, for ``duration`` or until Ctrl-C."""
        self._start_ebpf(follow_children=False)
        if self.ebpf is None:
            raise AiflameError("recording the whole system needs the eBPF collector")
        t0 = time.monotonic()
        with self._trap_signals(None):
            while not self._signals:
                elapsed = time.monotonic() - t0
                if self.options.duration and elapsed >= self.options.duration:
                    break
                if self.options.status:
                    ticks = int(elapsed * self.options.rate * (os.cpu_count() or 1))
                    self.options.status(f"recording {elapsed:5.1f} s · up to ~{ticks:,} samples")
                self._idle(0.1)
        return self._finish(0, None, t0)

    def cleanup(self) -> None:
        if self.ebpf is not None:
            self.ebpf.close()
        keep = os.environ.get("AIFLAME_KEEP_RECORD_DIR")  # the raw files, for debugging
        if keep:
            with contextlib.suppress(OSError):
                shutil.copytree(self.dir, keep, dirs_exist_ok=True)
        for p in Path(self.dir).iterdir():
            if p.is_dir():  # the cubins of --gpu-pc-sampling
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)

    # -- launching ----------------------------------------------------------------------------
    def _target_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["AIFLAME_RECORD_DIR"] = self.dir
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (BOOTSTRAP_DIR, env.get("PYTHONPATH", "")) if p
        )
        env["AIFLAME_TORCH_WINDOW"] = str(self.options.torch_window)
        env["AIFLAME_TORCH_DELAY"] = str(self.options.torch_delay)
        if self.options.gpu_pc_sampling:
            env.update(collector_env(self.options.torch_window))
        if "ONEDNN_JIT_PROFILE" not in env and "DNNL_JIT_PROFILE" not in env:
            env["ONEDNN_JIT_PROFILE"] = "2"  # perf map only (no jitdump files)
            self._own_perf_maps = True
        # Perf-map trampolines name Python functions in native stacks (3.12+); not needed
        # where the sampler walks the Python frames itself.
        in_kernel = self.options.python_in_kernel
        if self.ebpf is not None and not in_kernel and "PYTHONPERFSUPPORT" not in env:
            # Python >= 3.12 names its functions in the perf map for eBPF stacks.
            env["PYTHONPERFSUPPORT"] = "1"
            self._own_perf_maps = True
        return env

    def _start_ebpf(self, follow_children: bool) -> None:
        """Load the eBPF sampler if asked to; in "auto" mode a failure is one note."""
        mode = "on" if self.options.system_wide else self.options.ebpf
        if mode == "off":
            return
        from aiflame.collectors.ebpf.libbpf import BpfError
        from aiflame.collectors.ebpf.recording import EbpfRecorder
        from aiflame.collectors.ebpf.support import unavailable_reason

        why = unavailable_reason()
        if why is None:
            rec = EbpfRecorder(self.options.rate, follow_children, self.options.system_wide)
            try:
                rec.start()
                self.ebpf = rec
                return
            except (BpfError, AiflameError) as e:
                rec.close()
                why = str(e)
        if mode == "on":
            raise AiflameError(f"the eBPF collector cannot run: {why}")
        self.ebpf_unavailable = why
        self.notes.append(f"eBPF collector unavailable ({why}); CPU stacks from py-spy only")

    def _need_pyspy(self) -> None:
        """Find py-spy before anything runs where it is sure to be needed: without eBPF (it
        is the sampler), or with eBPF when asked for (``python_in_kernel`` off, a native
        rate). Otherwise eBPF samples alone, unless the target turns out to be an
        interpreter the BPF program cannot walk (see :meth:`_start_samplers`)."""
        o = self.options
        if self.ebpf is not None and o.python_in_kernel and not o.native_rate:
            return
        try:
            self.pyspy = find_pyspy()
        except AiflameError as e:
            if self.ebpf_unavailable:
                raise AiflameError(f"{e}; eBPF cannot run either: {self.ebpf_unavailable}") from e
            raise

    def _idle(self, seconds: float) -> None:
        if self.ebpf is not None:
            self.ebpf.idle(seconds)
        else:
            time.sleep(seconds)

    def _wait_ready(self, target: subprocess.Popen) -> None:
        """Until the bootstrap reports an interpreter is up (py-spy can read it then).

        With --subprocesses any process of the tree will do: the program may be a shell
        script that starts Python. With eBPF, not for a program that maps no interpreter
        (a C or C++ program: eBPF samples it from its start, py-spy has nothing to read).
        """
        pattern = "proc-*.json" if self.options.subprocesses else f"proc-{target.pid}.json"
        start = time.monotonic()
        wait = min(READY_TIMEOUT_S, self.options.duration or READY_TIMEOUT_S)
        while time.monotonic() - start < wait and target.poll() is None and not self._signals:
            if next(Path(self.dir).glob(pattern), None) is not None:
                return
            if self.ebpf is not None and time.monotonic() - start >= NO_INTERPRETER_S:
                state = self.ebpf.python_state(target.pid)
                if state == "walked" or (state == "none" and not self.options.subprocesses):
                    return  # py-spy is not needed for its Python stacks, or has none to read
            self._idle(0.01)

    # -- sampling -----------------------------------------------------------------------------
    def _configs(self) -> list[tuple[str, SamplerConfig]]:
        o = self.options
        out: list[tuple[str, SamplerConfig]] = []
        if self.pyspy_missing or self.no_python:
            return out
        if not self.python_in_kernel:
            out.append(("cpu", SamplerConfig(o.rate, False, False, o.subprocesses, o.duration)))
        native_rate = o.native_rate
        if native_rate is None:
            native_rate = 0 if self.ebpf is not None else o.native_fallback
        if native_rate > 0:
            out.append(
                ("native", SamplerConfig(native_rate, True, True, o.subprocesses, o.duration))
            )
        return out

    def _start_samplers(self, pid: int) -> None:
        if self.ebpf is not None:
            state = self.ebpf.python_state(pid)
            self.python_in_kernel = self.options.python_in_kernel and state == "walked"
            # no interpreter in it (and none to follow): eBPF samples it alone, silently
            self.no_python = state == "none" and not self.options.subprocesses
        if self._configs() and self.pyspy is None:
            try:
                self.pyspy = find_pyspy()
            except AiflameError as e:  # eBPF samples anyway: py-spy would only add to it
                self.pyspy_missing = True
                self.notes.append(f"no Python stacks beside eBPF's: {e}")
        for name, config in self._configs():
            assert self.pyspy is not None
            out = os.path.join(self.dir, f"pyspy-{name}.json")
            log = open(os.path.join(self.dir, f"pyspy-{name}.log"), "wb")  # noqa: SIM115
            try:
                proc = subprocess.Popen(
                    config.args(self.pyspy, pid, out),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a terminal's Ctrl-C is ours to pass on
                )
            finally:
                log.close()
            self.samplers.append((name, proc, config))

    def _run_loop(self, pid: int, target: subprocess.Popen | None) -> None:
        start = time.monotonic()
        interrupted_at: float | None = None
        while True:
            samplers_done = all(p.poll() is not None for _, p, _ in self.samplers)
            target_done = target is None or target.poll() is not None
            if self.ebpf is not None:  # it samples until the target ends, -d or Ctrl-C
                ebpf_done = self._ebpf_done(pid, target, start, interrupted_at)
                samplers_done = samplers_done and ebpf_done
                target_done = target_done if target is not None else ebpf_done
            if samplers_done and (target_done or self.options.duration or interrupted_at):
                break
            if target_done and not samplers_done:
                if target is not None:  # the program has exited: the clock starts
                    self._progress("waiting for py-spy to write its samples")
                self._stop_samplers_after(SAMPLER_EXIT_GRACE_S)
                break
            if self._signals and interrupted_at is None:
                interrupted_at = time.monotonic()
                self._signal_samplers(signal.SIGINT)
                if target is not None and signal.SIGTERM in self._signals:
                    target.terminate()
            # After Ctrl-C the program gets a grace period to finish (and write its trace).
            waited = time.monotonic() - (interrupted_at or 0.0)
            if interrupted_at is not None and samplers_done and waited > INTERRUPT_GRACE_S:
                break
            if self.options.status:
                self.options.status(self._status_text(pid, time.monotonic() - start))
            self._idle(0.1)

    def _ebpf_done(
        self, pid: int, target: subprocess.Popen | None, start: float, interrupted: float | None
    ) -> bool:
        if interrupted is not None:
            return True
        if self.options.duration and time.monotonic() - start >= self.options.duration:
            return True
        return target.poll() is not None if target is not None else not procs.alive(pid)

    def _status_text(self, pid: int, elapsed: float) -> str:
        n_procs = len(procs.tree(pid)) if self.options.subprocesses else 1
        ticks = int(elapsed * self.options.rate)
        return f"recording {elapsed:5.1f} s · ~{ticks:,} samples · {n_procs} process" + (
            "es" if n_procs != 1 else ""
        )

    def _signal_samplers(self, sig: int) -> None:
        for _, proc, _ in self.samplers:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)

    def _stop_samplers_after(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        for sig in (None, signal.SIGINT, signal.SIGKILL):
            if sig is not None:
                self._signal_samplers(sig)
                deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline:
                if all(p.poll() is not None for _, p, _ in self.samplers):
                    return
                time.sleep(0.05)

    @contextlib.contextmanager
    def _trap_signals(self, target: subprocess.Popen | None) -> Iterator[None]:
        """Ctrl-C / SIGTERM end the recording (the profile is still written)."""

        def handler(signum: int, frame: object) -> None:
            self._signals.append(signum)
            if len(self._signals) > 2 and target is not None and target.poll() is None:
                target.kill()  # a third signal: the user really wants out

        # A signal the caller ignores (nohup, a background job) stays ignored.
        wanted = [
            s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) != signal.SIG_IGN
        ]
        old = {s: signal.signal(s, handler) for s in wanted}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # -- results ------------------------------------------------------------------------------
    def _finish(self, pid: int, target: subprocess.Popen | None, t0: float) -> RecordResult:
        if any(p.poll() is None for _, p, _ in self.samplers):
            self._progress("waiting for py-spy to write its samples")
        self._stop_samplers_after(SAMPLER_EXIT_GRACE_S)
        if self.ebpf is not None:
            self._progress("naming the eBPF samples' frames")
            self.naming = PythonNaming(python_roots(self.dir))
            try:
                self.ebpf_profile = self.ebpf.finish(self.naming)
            finally:
                self.ebpf.close()
            self.notes.extend(self.ebpf.notes)
        self._wait_torch_windows()
        self._progress("building the profile")
        profile = self._build(pid)
        elapsed = time.monotonic() - t0
        if profile is not None:
            profile.meta["info:recorded"] = f"{elapsed:.1f} s"
        if profile is None and not self.failures:
            tried = ""
            if self.ebpf is not None:
                tried = f": eBPF saw it on no CPU at {self.options.rate} Hz and no CUDA/HIP call"
            self.failures.append(
                f"nothing was sampled in {elapsed:.1f} s{tried} (too short a run?)"
            )
        if profile is None and self.failures:
            self.notes.extend(self.failures[1:])
        failure = self.failures[0] if profile is None and self.failures else None
        return RecordResult(profile, self.notes, None, bool(self._signals), elapsed, failure)

    def _wait_torch_windows(self) -> None:
        """Until every torch window that started has exported (or its process is gone)."""
        deadline = time.monotonic() + self.options.torch_window + EXPORT_SLACK_S
        said = False
        while time.monotonic() < deadline:
            pending = [
                int(p.name.split("-")[1].split(".")[0])
                for p in Path(self.dir).glob("torch-*.pending")
            ]
            if not [p for p in pending if procs.alive(p)]:
                return
            if not said:
                self._progress("waiting for the PyTorch profiler to export its trace")
                said = True
            time.sleep(0.05)

    def _progress(self, step: str) -> None:
        if self.options.progress is not None:
            self.options.progress(step)

    def _process_labels(self) -> dict[int, dict[str, str]]:
        labels: dict[int, dict[str, str]] = {}
        for path in Path(self.dir).glob("proc-*.json"):
            try:
                info = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if "rank" in info:
                labels[int(info["pid"])] = {"rank": str(info["rank"])}
        return labels

    def _build(self, root_pid: int) -> Profile | None:
        if self.options.system_wide:
            return self._system_profile()
        profile = self._collect(root_pid)
        return None if profile is None else _program_only(profile)

    def _collect(self, root_pid: int) -> Profile | None:
        """Every recorder's samples of the program, in one profile."""
        configs = self._configs()
        first = PYTHON_SAMPLES if self.ebpf is not None else CPU_SAMPLES
        types = [first] + ([NATIVE_SAMPLES] if len(configs) > 1 else [])
        builder = ProfileBuilder(types)
        maps: dict[int, PerfMap] = {}
        seen_pids: set[int] = set()

        def perf_map(pid: int) -> PerfMap:
            seen_pids.add(pid)
            if pid not in maps:
                maps[pid] = PerfMap.for_pid(pid)
            return maps[pid]

        labels = self._process_labels()
        total = 0
        states: dict = {}
        # py-spy's Python frames named as the PyTorch profiler's, so that both views line up.
        roots = python_roots(self.dir)
        naming = self.naming.with_roots(roots) if self.naming else PythonNaming(roots)
        # The native stream first: its thread states correct the CPU stream.
        for column, (name, config) in reversed(list(enumerate(configs))):
            out = os.path.join(self.dir, f"pyspy-{name}.json")
            if not os.path.exists(out) or os.path.getsize(out) == 0:
                failure = self._sampler_failure(name, root_pid)
                if failure is not None and failure not in self.failures:
                    self.failures.append(failure)
                continue
            spec = StreamSpec(
                column, config.native, root_pid, perf_map, labels, states, naming=naming
            )
            total += add_samples(builder, read_speedscope(out), spec)
        started = {int(p.name[5:-5]) for p in Path(self.dir).glob("proc-*.json")}
        sampled = set(self.ebpf.sampler.maps) if self.ebpf is not None else set()  # eBPF's
        self._remove_perf_maps(seen_pids | started | sampled | {root_pid})
        if next(Path(self.dir).glob("torch-*.json"), None) is not None:
            self._progress("reading the PyTorch profiler's trace")
        torch_profiles = load_torch_traces(
            self.dir, labels, self.notes, roots, naming, self.options.trace_options
        )
        gpu_samples = load_gpu_samples(self.dir, labels, self.notes)  # --gpu-pc-sampling
        gpu_samples = join_with_windows(torch_profiles, gpu_samples)
        if self.ebpf_profile is not None:
            if self.failures and self._python_ran():  # py-spy's stacks: a bonus beside eBPF's
                self.notes.extend(f"no Python stacks: {f}" for f in self.failures)
            self.failures.clear()
            torch_profiles.insert(0, self.ebpf_profile)
        if not total and not torch_profiles and not gpu_samples:
            return None
        builder.meta.update(self._meta(configs))
        for i, cost in enumerate(window_costs(torch_profiles)):
            parts = [
                f"{k.removesuffix('_s')} {v:.2f} s" for k, v in cost.items() if k.endswith("_s")
            ]
            builder.meta[f"info:torch cost {i}"] = ", ".join(parts)
            self.notes.append(f"PyTorch profiler window cost: {', '.join(parts)}")
        profile = builder.build()
        torch_profiles += gpu_samples
        if torch_profiles:
            from aiflame.transforms.merge import merge

            meta = profile.meta
            together = [profile, *torch_profiles]
            if self.ebpf_profile is not None:
                # eBPF's cpu-samples first; no all-zero python-samples if py-spy saw nothing
                together = [self.ebpf_profile, *([profile] if total else []), *torch_profiles[1:]]
            profile = merge(together)
            profile.meta = {**meta, "sources": profile.meta.get("sources")}
        if self.ebpf_profile is not None:
            ebpf_meta = {k: v for k, v in self.ebpf_profile.meta.items() if k not in profile.meta}
            profile.meta.update(ebpf_meta)
            names = [t.name for t in profile.sample_types]
            profile.meta["default_type"] = names.index(self._default_metric(profile))
            return profile
        profile.meta["default_type"] = 0
        return profile

    def _default_metric(self, profile: Profile) -> str:
        """eBPF's cpu-samples, unless most of its user stacks are cut short (an interpreter
        built without frame pointers) while py-spy has the program's Python stacks: those
        are then the view a user reads first."""
        from aiflame.collectors.ebpf.cpu_profile import truncated_stacks

        names = [t.name for t in profile.sample_types]
        pair = truncated_stacks(profile.meta)
        if PYTHON_SAMPLES.name in names and pair is not None and pair[1]:
            truncated, total = pair
            has_python = profile.totals()[names.index(PYTHON_SAMPLES.name)] > 0
            if has_python and truncated / total >= TRUNCATED_FOR_PYTHON_VIEW:
                self.notes.append(
                    f"the page opens on python-samples: {truncated / total:.0%} of eBPF's user "
                    "stacks are cut short; cpu-samples (native and kernel frames) is one click away"
                )
                return PYTHON_SAMPLES.name
        return CPU_SAMPLES.name

    def _system_profile(self) -> Profile | None:
        profile = self.ebpf_profile
        if profile is not None:
            profile.meta.update({"source": "aiflame record --all", "format": "record"})
            profile.meta["default_type"] = 0
        return profile

    def _meta(self, configs: list[tuple[str, SamplerConfig]]) -> dict[str, object]:
        rates = ", ".join(f"{n} {c.rate} Hz" for n, c in configs)
        pyspy = f"py-spy ({rates})" if configs else ""
        meta: dict[str, object] = {
            "source": "aiflame record",
            "format": "record",
            "info:sampler": pyspy,
        }
        if self.ebpf_profile is not None:
            ebpf = str(self.ebpf_profile.meta.get("info:sampler"))
            meta["info:sampler"] = f"{ebpf}; {pyspy}" if pyspy else ebpf
        if self.options.torch_window > 0:
            meta["info:torch window"] = f"{self.options.torch_window:g} s"
        return meta

    def _python_ran(self, pid: int = 0) -> bool:
        """Whether an interpreter ran in the recorded processes: the bootstrap's report,
        one the eBPF sampler found, or one in the mappings of ``pid`` now."""
        if next(Path(self.dir).glob("proc-*.json"), None) is not None:
            return True
        if self.ebpf is not None and self.ebpf.pythons_seen():
            return True
        from aiflame.collectors.ebpf.pyruntime import maps_interpreter

        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
                return pid > 0 and maps_interpreter(f.read())
        except OSError:
            return False

    def _sampler_failure(self, name: str, pid: int) -> str | None:
        if not self._python_ran(pid):
            # with eBPF py-spy was an extra for Python: nothing to say of a program without
            return None if self.ebpf is not None else self._not_python(pid)
        if not self.samplers:  # the program ended before sampling could start
            return "the program exited before sampling could start"
        try:
            log = Path(self.dir, f"pyspy-{name}.log").read_text(errors="replace")
        except OSError:
            log = ""
        return explain_failure(log, pid, exited=not procs.alive(pid))

    def _not_python(self, pid: int) -> str:
        """What was tried on a program that ran no Python interpreter (without eBPF)."""
        if self.options.ebpf == "off":
            ebpf = "the eBPF sampler, which samples any program, was turned off (--no-ebpf)"
        else:
            why = self.ebpf_unavailable or "it did not run"
            ebpf = f"the eBPF sampler, which samples any program, could not run ({why})"
        follow = "" if self.options.subprocesses else " (--subprocesses follows its children)"
        what = f"process {pid} ({self.target_name or procs.name(pid)})"
        return f"{what} ran no Python interpreter, which py-spy needs{follow}; {ebpf}"

    def _remove_perf_maps(self, pids: set[int]) -> None:
        """Perf maps we asked oneDNN to write are ours to clean up once read."""
        if not self._own_perf_maps:
            return
        for pid in pids:
            if not procs.alive(pid):
                with contextlib.suppress(OSError):
                    os.remove(map_path(pid))


def _program_only(profile: Profile) -> Profile:
    """The program's profile without aiflame's own code in it (the bootstrap's frames and
    timer thread), said in an ``info:`` line, and without metrics that hold no value."""
    profile, lost = strip_frames(profile, bootstrap_frames(profile))
    if lost.any():
        what = ", ".join(
            (f"{v / 1e9:.3f} s" if t.unit == "nanoseconds" else f"{v:,.0f}") + " of " + t.name
            for v, t in zip(lost.tolist(), profile.sample_types, strict=True)
            if v
        )
        profile.meta["info:left out"] = (
            f"{what} in aiflame's bootstrap (PyTorch window start/stop, its timer thread)"
        )
    return drop_empty_types(profile)


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def print_status_line(text: str) -> None:
    sys.stderr.write("\r\x1b[K" + text)
    sys.stderr.flush()
