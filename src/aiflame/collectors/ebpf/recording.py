"""The eBPF CPU sampler as one part of an ``aiflame record`` session.

    rec = EbpfRecorder(rate=99, follow_children=True)   # or system_wide=True
    rec.start()                 # loads and attaches; BpfError when the kernel refuses
    rec.add_target(pid)         # after launching the program
    rec.idle(0.1)               # instead of sleeping: takes process snapshots meanwhile
    profile = rec.finish()      # detaches everything, then symbolizes: cpu-samples
    rec.notes                   # lines for the user: losses, truncated stacks

Every path out (return, exception, Ctrl-C handled by the session, SIGTERM) goes through
:meth:`close`; and since BPF links are file descriptors, the kernel detaches them itself if
this process is killed outright.
"""

from __future__ import annotations

import time

from aiflame.collectors.ebpf.cpu_profile import build_profile
from aiflame.collectors.ebpf.sampler import CpuSampler, SamplerOptions
from aiflame.model import Profile
from aiflame.symbolize.process import SymbolResolver

TRUNCATION_NOTE = 0.2  # share of truncated user stacks worth a note


class EbpfRecorder:
    def __init__(
        self, rate: int = 99, follow_children: bool = True, system_wide: bool = False
    ) -> None:
        self.system_wide = system_wide
        options = SamplerOptions(
            freq=rate,
            pids=None if system_wide else [],
            follow_children=follow_children,
        )
        self.sampler = CpuSampler(options)
        self.notes: list[str] = []
        self.running = False

    def start(self) -> None:
        self.sampler.start()
        self.running = True

    def preexec(self) -> None:
        """``preexec_fn`` of the launched program: a target from before its first fork."""
        if self.running and not self.system_wide:
            self.sampler.preexec()

    def add_target(self, pid: int) -> None:
        if self.running and not self.system_wide:
            self.sampler.add_target(pid)

    def idle(self, seconds: float) -> None:
        """Wait ``seconds``, snapshotting processes that appear meanwhile."""
        if not self.running:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sampler.poll(max(1, int(left * 1000)))

    def finish(self) -> Profile | None:
        """Stop sampling and build the profile (None when nothing was sampled)."""
        if not self.running:
            return None
        self.running = False
        raw = self.sampler.stop()
        if not raw.counts:
            return None
        multi = self.system_wide or len({k.pid for k, _ in raw.counts}) > 1
        profile, stats = build_profile(raw, SymbolResolver(), process_frames=multi)
        losses = str(profile.meta.get("info:ebpf losses", "none"))
        if losses != "none":
            self.notes.append(f"eBPF sampler {losses}")
        if stats.truncated_share >= TRUNCATION_NOTE:
            self.notes.append(
                f"{stats.truncated_share:.0%} of user stacks are cut short (code built "
                "without frame pointers); see 'aiflame info'"
            )
        return profile

    def close(self) -> None:
        self.running = False
        self.sampler.close()
