"""``aiflame record --memory``: live GPU memory by allocation stack, from eBPF probes on the
CUDA/HIP allocation and free functions (see collectors/ebpf/cuda_memory.py).

Writes the same kind of profile as ``aiflame memory SNAPSHOT``: metrics ``peak-bytes``
(default), ``alloc-bytes``, ``alloc-count`` (and ``failed-alloc-count``/``-bytes``), the
memory-over-time chart in the HTML page.
"""

from __future__ import annotations

import argparse
import sys

from aiflame.cli.browser import open_first_page
from aiflame.cli.common import write_output
from aiflame.errors import AiflameError

METRICS = (
    "peak-bytes",
    "alloc-bytes",
    "alloc-count",
    "failed-alloc-count",
    "failed-alloc-bytes",
)


def check(args: argparse.Namespace) -> None:
    """Errors of ``--memory`` options that must stop the run before the program starts."""
    if args.metric is not None and args.metric not in METRICS:
        raise AiflameError(f"--metric {args.metric}: record --memory writes {', '.join(METRICS)}")
    from aiflame.collectors.ebpf.support import unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise AiflameError(f"--memory needs the eBPF collector: {reason}")


def run(args: argparse.Namespace, cmd: list[str], targets: list[tuple[str, str]]) -> int:
    """Record, write ``targets`` ((path, format) pairs); returns the exit status."""
    from aiflame.cli.memory import summary
    from aiflame.collectors.ebpf import cuda_session
    from aiflame.collectors.ebpf.cuda import CudaOptions
    from aiflame.collectors.session import print_status_line

    live = sys.stderr.isatty()
    options = cuda_session.CudaRecordOptions(
        probes=CudaOptions.memory_only(),
        duration=args.duration,
        subprocesses=args.subprocesses,
        status=print_status_line if live else None,
    )
    try:
        if args.pid is not None:
            rec = cuda_session.attach(args.pid, options)
        else:
            rec = cuda_session.launch(cmd, options)
    finally:
        if live:
            print_status_line("")
    probes = rec.probes
    for note in probes.notes():
        print(f"aiflame: {note}", file=sys.stderr)
    if not probes.attached:
        print("aiflame: no CUDA/HIP library was loaded by the program", file=sys.stderr)
    profile = probes.memory_profile()
    written = []
    if len(profile):
        title = args.title or "GPU memory (live, eBPF): " + (
            " ".join(cmd) if cmd else f"PID {args.pid}"
        )
        _write(profile, targets, args.metric or "peak-bytes", title, summary(profile))
        written = [p for p, _ in targets]
        line = summary(profile)
        if line:
            print(f"aiflame: {line}", file=sys.stderr)
        calls = profile.meta.get("info:memory calls")
        if calls:
            print(f"aiflame: {calls}", file=sys.stderr)
        for path in written:
            print(f"aiflame: wrote {path}", file=sys.stderr)
        if getattr(args, "open", False):
            open_first_page(written)
    code = _exit_status(rec.target)
    if not written:
        print("aiflame: error: no GPU memory allocation was recorded", file=sys.stderr)
        return code if code else 1
    return code


def _write(profile, targets, metric: str, title: str, subtitle: str) -> None:  # type: ignore[no-untyped-def]
    from aiflame.render.registry import render

    for path, fmt in targets:
        if fmt == "html":
            from aiflame.render.html import render_html

            page = render_html(profile, title=title, subtitle=subtitle, metric=metric)
            write_output(path, page)
        else:
            write_output(path, render(profile, fmt, metric, title))


def _exit_status(target) -> int:  # type: ignore[no-untyped-def]
    from aiflame.collectors.session import exit_status

    if target is None:
        return 0
    if target.poll() is None:
        target.wait()
    return exit_status(target.returncode)
