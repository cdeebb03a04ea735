"""The eBPF CPU sampler as one part of an ``aiflame record`` session.

    rec = EbpfRecorder(rate=99, follow_children=True)   # or system_wide=True
    rec.start()                 # loads and attaches; BpfError when the kernel refuses
    rec.add_target(pid)         # after launching the program
    rec.idle(0.1)               # instead of sleeping: takes process snapshots meanwhile
    profile = rec.finish()      # detaches everything, then symbolizes: cpu-samples
    rec.notes                   # lines for the user: losses, truncated stacks

The CUDA/HIP API probes (:class:`.cuda_session.CudaRecorder`) run beside the sampler on
the same targets, and their metrics (launch-count, sync-time, copy-bytes, alloc-bytes,
alloc-count, api-calls) join cpu-samples in the profile; where they cannot be loaded that
is one note and the sampler runs alone.

Every path out (return, exception, Ctrl-C handled by the session, SIGTERM) goes through
:meth:`close`; and since BPF links are file descriptors, the kernel detaches them itself if
this process is killed outright.
"""

from __future__ import annotations

import time

from aiflame.collectors.ebpf.cpu_profile import CPU_SAMPLES, build_profile
from aiflame.collectors.ebpf.cuda_session import CudaRecorder
from aiflame.collectors.ebpf.libbpf import BpfError
from aiflame.collectors.ebpf.sampler import CpuSampler, SamplerOptions
from aiflame.model import Profile, ProfileBuilder
from aiflame.symbolize.process import SymbolResolver
from aiflame.symbolize.pyframes import PythonNaming
from aiflame.transforms.merge import merge

TRUNCATION_NOTE = 0.2  # share of truncated user stacks worth a note
CUDA_TICK_S = 0.05  # how often the CUDA probes look for new libraries and read events


class EbpfRecorder:
    def __init__(
        self,
        rate: int = 99,
        follow_children: bool = True,
        system_wide: bool = False,
        cuda: bool = True,
    ) -> None:
        self.system_wide = system_wide
        options = SamplerOptions(
            freq=rate,
            pids=None if system_wide else [],
            follow_children=follow_children,
        )
        self.sampler = CpuSampler(options)
        self.cuda = CudaRecorder(follow_children, system_wide) if cuda else None
        self.notes: list[str] = []
        self.running = False

    def start(self) -> None:
        self.sampler.start()
        self.running = True
        if self.cuda is not None:
            try:
                self.cuda.start()
            except BpfError as e:
                self.notes.append(f"CUDA/HIP API probes not used: {e}")
                self.cuda = None

    def preexec(self) -> None:
        """``preexec_fn`` of the launched program: a target from before its first fork."""
        if self.running and not self.system_wide:
            self.sampler.preexec()
            if self.cuda is not None:
                self.cuda.preexec()

    def add_target(self, pid: int) -> None:
        if self.running and not self.system_wide:
            self.sampler.add_target(pid)
            if self.cuda is not None:
                self.cuda.add_target(pid)

    def idle(self, seconds: float) -> None:
        """Wait ``seconds``, snapshotting processes that appear meanwhile."""
        if not self.running:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.cuda is None:
                self.sampler.poll(max(1, int(left * 1000)))
                continue
            # the probes' events wake at once (a process waits stopped for its set-up)
            self.cuda.tick(max(1, int(min(left, CUDA_TICK_S) * 1000)))
            self.sampler.poll(0)

    def walks_python(self, pid: int) -> bool:
        """Whether the sampler reads this process's Python stacks itself (CPython 3.8-3.15
        found in it), so that no other sampler is needed for them."""
        return self.running and self.sampler.walks_python(pid)

    def python_state(self, pid: int) -> str:
        """:meth:`.CpuSampler.python_state`: ``walked``, ``other`` or ``none``."""
        return self.sampler.python_state(pid) if self.running else "none"

    def pythons_seen(self) -> bool:
        """Whether an interpreter was found in a sampled process (walked or not)."""
        return self.sampler.pythons_seen()

    def finish(self, naming: PythonNaming | None = None) -> Profile | None:
        """Stop sampling and build the profile (None when nothing was sampled); ``naming``
        names the Python frames (the targets' ``sys.path``)."""
        if not self.running:
            return None
        self.running = False
        raw = self.sampler.stop()
        if self.sampler.python_unavailable:
            self.notes.append(self.sampler.python_unavailable)
        if self.cuda is not None and self.cuda.probes is not None:
            self.cuda.probes.naming = naming  # the call sites' Python frames, named alike
        calls = self._finish_cuda()
        if not raw.counts:
            if calls is None:
                return None
            # no CPU sample (a program that mostly waits): cpu-samples stays the first type
            return _with_calls(ProfileBuilder([CPU_SAMPLES]).build(), calls)
        multi = self.system_wide or len({k.pid for k, _ in raw.counts}) > 1
        profile, stats = build_profile(raw, SymbolResolver(), multi, naming)
        losses = str(profile.meta.get("info:ebpf losses", "none"))
        if losses != "none":
            self.notes.append(f"eBPF sampler {losses}")
        if stats.truncated_share >= TRUNCATION_NOTE:
            self.notes.append(
                f"{stats.truncated_share:.0%} of user stacks are cut short (code built "
                "without frame pointers); see 'aiflame info'"
            )
        return profile if calls is None else _with_calls(profile, calls)

    def _finish_cuda(self) -> Profile | None:
        """Detach the CUDA probes and build their profile (None: no call was seen)."""
        if self.cuda is None:
            return None
        try:
            return self.cuda.finish()
        finally:
            self.notes.extend(self.cuda.notes)

    def close(self) -> None:
        self.running = False
        self.sampler.close()
        if self.cuda is not None:
            self.cuda.close()


def _with_calls(profile: Profile, calls: Profile) -> Profile:
    """The CPU profile with the CUDA/HIP calls' samples and notes added."""
    merged = merge([profile, calls])
    merged.meta.update({k: v for k, v in calls.meta.items() if k.startswith("info:")})
    return merged
