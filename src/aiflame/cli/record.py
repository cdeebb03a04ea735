"""Record a live Python / PyTorch program: ``aiflame record -- python train.py`` or ``--pid``.

CPU stacks come from py-spy, PyTorch operators and GPU kernels from a bounded PyTorch
profiler window started in the program without code changes. By default an HTML flame
graph and a pprof file are written, and the hottest stacks are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiflame.cli.browser import add_open, check_open, open_first_page
from aiflame.cli.common import add_metric, add_module_options, module_options, write_output
from aiflame.errors import AiflameError
from aiflame.model.profile import METRIC_ALIASES
from aiflame.render.visible import visible

HELP = "record a running or launched Python/PyTorch program (CPU stacks, GPU kernels)"
DEFAULT_NATIVE_RATE = 2  # about 1% of wall time per Hz: docs/benchmarks.md "record overhead"
# py-spy's two streams, then what the Kineto importer makes of a PyTorch window
METRICS = ("cpu-samples", "native-samples", "wall-time", "gpu-time", "kernel-count")
EBPF_METRICS = ("python-samples",)  # py-spy's Python stacks when eBPF has cpu-samples


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="file to write; its extension picks the format (.html, .svg, .pb.gz, .folded, "
        ".speedscope.json). Default: an HTML flame graph and a pprof file in this directory",
    )
    p.add_argument("-p", "--pid", type=int, help="record this running process instead")
    p.add_argument(
        "-r", "--rate", type=int, default=99, metavar="HZ", help="Python stack samples per second"
    )
    p.add_argument(
        "--native-rate",
        type=int,
        default=None,
        metavar="HZ",
        help="samples per second with native (C/C++/JIT) frames and thread state; each one "
        f"pauses the program for milliseconds (default {DEFAULT_NATIVE_RATE}, 0: none; "
        "default 0 with eBPF, whose cpu-samples have native stacks)",
    )
    p.add_argument(
        "-d", "--duration", type=float, metavar="SECONDS", help="stop recording after this long"
    )
    p.add_argument(
        "--subprocesses",
        action="store_true",
        help="also record child processes (DataLoader workers, torchrun ranks)",
    )
    p.add_argument(
        "--gpu",
        choices=("auto", "off"),
        default="auto",
        help="auto: run the PyTorch profiler (CPU ops + CUDA kernels) in programs that "
        "import torch; off: never",
    )
    p.add_argument(
        "--gpu-window",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds the PyTorch profiler runs (default 5), from the first nn.Module call",
    )
    p.add_argument(
        "--gpu-delay",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds after the program's first nn.Module call before the PyTorch profiler "
        "starts (default 0; a program that calls no module gets it 10 s after 'import torch')",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="live GPU memory by allocation stack instead (eBPF probes on the CUDA/HIP "
        "allocation functions; root): metrics peak-bytes, alloc-bytes, alloc-count",
    )
    ebpf = p.add_mutually_exclusive_group()
    ebpf.add_argument(
        "--ebpf",
        action="store_true",
        help="require the eBPF CPU sampler (used by default as root): Python (CPython "
        "3.8-3.15, walked in the kernel), native, JIT and kernel frames of every thread in "
        "cpu-samples",
    )
    ebpf.add_argument("--no-ebpf", action="store_true", help="never use the eBPF sampler")
    p.add_argument(
        "--py-spy",
        action="store_true",
        help="with eBPF, take the Python stacks from py-spy (python-samples) even where the "
        "eBPF sampler can walk them",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="record every process of the machine with eBPF (root), for -d SECONDS or until Ctrl-C",
    )
    p.add_argument(
        "--gpu-pc-sampling",
        action="store_true",
        help="sample the program's CUDA kernels with CUPTI PC sampling (NVIDIA): stall "
        "reasons per SASS instruction and source line, under the launch stacks of the "
        "PyTorch window (gpu-samples); needs a launched program and profiling permission",
    )
    add_metric(p)
    add_module_options(p)
    p.add_argument(
        "--import-frames",
        action="store_true",
        help="keep the frames of Python's import machinery (importlib): by default each run "
        "of them is one [import] frame between a module and the modules it imports",
    )
    p.add_argument("--title", help="title of the HTML page")
    add_open(p)
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the program to launch, e.g. -- python train.py --epochs 1",
    )


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if cmd and cmd[0].endswith(".py") and os.path.isfile(cmd[0]) and not os.access(cmd[0], os.X_OK):
        cmd = [sys.executable, *cmd]  # `aiflame record -- train.py`
    return cmd


def _check(args: argparse.Namespace, cmd: list[str]) -> None:
    if args.pid is not None and cmd:
        raise AiflameError("give either --pid PID or a command after --, not both")
    if getattr(args, "gpu_pc_sampling", False) and not cmd:
        raise AiflameError(
            "--gpu-pc-sampling starts CUPTI inside the program before it uses CUDA: "
            "give the command to launch after --"
        )
    if getattr(args, "all", False):
        if args.pid is not None or cmd:
            raise AiflameError("--all records every process: give no --pid and no command")
        if args.no_ebpf:
            raise AiflameError("--all needs the eBPF sampler: drop --no-ebpf")
    elif args.pid is None and not cmd:
        raise AiflameError("nothing to record: give -- COMMAND ARGS... or --pid PID")
    if not 1 <= args.rate <= 10000:
        raise AiflameError(f"--rate {args.rate}: must be between 1 and 10000")
    if args.native_rate is not None and not 0 <= args.native_rate <= 1000:
        raise AiflameError(f"--native-rate {args.native_rate}: must be between 0 and 1000")
    if args.duration is not None and args.duration <= 0:
        raise AiflameError(f"--duration {args.duration:g}: must be positive")
    if args.gpu_window <= 0 or args.gpu_delay < 0:
        raise AiflameError("--gpu-window must be positive and --gpu-delay not negative")
    if args.output:
        fmt = _output_format(args.output)  # a bad name must fail before the program runs
        check_open(args, args.output, is_page=fmt == "html")
    if getattr(args, "memory", False):
        from aiflame.cli import record_memory

        record_memory.check(args)
    elif args.metric is not None:
        args.metric = METRIC_ALIASES.get(args.metric, args.metric)
        if args.metric not in METRICS + EBPF_METRICS:
            raise AiflameError(f"--metric {args.metric}: record writes {', '.join(METRICS)}")


def _output_format(path: str) -> str:
    from aiflame.render.registry import format_for_path

    fmt = format_for_path(path)
    if fmt is None or fmt == "chrome":  # a recording is stacks, not a timeline of slices
        raise AiflameError(
            f"cannot tell the output format from '{path}' "
            "(use .html, .svg, .pb.gz, .folded or .speedscope.json)"
        )
    return fmt


def _default_base(cmd: list[str], pid: int | None) -> str:
    if pid is None and not cmd:
        stem = "system"  # --all
    elif pid is not None:
        stem = f"pid{pid}"
    else:
        script = next((a for a in cmd[1:] if a.endswith(".py")), cmd[0])
        stem = Path(script).stem or "program"
    return f"aiflame-{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def _targets(args: argparse.Namespace, cmd: list[str]) -> list[tuple[str, str]]:
    """(path, format) of the files to write: ``-o``, else an HTML page and a pprof file."""
    if args.output:
        return [(args.output, _output_format(args.output))]
    base = _default_base(cmd, args.pid)
    return [(base + ".html", "html"), (base + ".pb.gz", "pprof")]


def _write(  # type: ignore[no-untyped-def]
    profile,
    args: argparse.Namespace,
    cmd: list[str],
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    from aiflame.render.registry import render

    what = " ".join(cmd) if cmd else (f"PID {args.pid}" if args.pid is not None else "all")
    title = args.title or f"aiflame record: {what}"
    if args.output:
        targets = [(args.output, _output_format(args.output))]
    else:
        base = _default_base(cmd, args.pid)
        targets = [(base + ".html", "html"), (base + ".pb.gz", "pprof")]
    for path, fmt in targets:
        if progress is not None:
            progress(f"writing {path}")
        write_output(path, render(profile, fmt, args.metric, title))
    return [p for p, _ in targets]


def run(args: argparse.Namespace) -> int:
    from aiflame.cli.progress import TailProgress
    from aiflame.cli.record_summary import summary_lines
    from aiflame.collectors.session import RecordOptions, Session, print_status_line
    from aiflame.transforms.imports import fold_imports

    cmd = _command(args)
    _check(args, cmd)
    if getattr(args, "memory", False):
        from aiflame.cli import record_memory

        return record_memory.run(args, cmd, _targets(args, cmd))
    live = sys.stderr.isatty()
    progress = TailProgress()
    options = RecordOptions(
        rate=args.rate,
        native_rate=args.native_rate,
        native_fallback=DEFAULT_NATIVE_RATE,
        duration=args.duration,
        subprocesses=args.subprocesses,
        torch_window=args.gpu_window if args.gpu == "auto" else 0.0,
        torch_delay=args.gpu_delay,
        status=print_status_line if live else None,
        progress=progress,
        ebpf="on" if args.ebpf else ("off" if args.no_ebpf else "auto"),
        system_wide=args.all,
        python_in_kernel=not args.py_spy,
        gpu_pc_sampling=args.gpu_pc_sampling,
        trace_options=module_options(args),
    )
    session = Session(options)
    try:
        try:
            if args.all:
                result = session.system()
            elif args.pid is not None:
                result = session.attach(args.pid)
            else:
                result = session.launch(cmd)
        finally:
            if live:
                print_status_line("")
        for note in result.notes:
            print(f"aiflame: {note}", file=sys.stderr)
        written: list[str] = []
        if result.profile is not None and not result.profile.is_empty():
            profile = result.profile if args.import_frames else fold_imports(result.profile)
            if args.metric and args.metric not in {t.name for t in profile.sample_types}:
                shown = profile.sample_types[profile.type_index(None)].name
                print(f"aiflame: no {args.metric} was recorded; showing {shown}", file=sys.stderr)
                args.metric = None
            written = _write(profile, args, cmd, progress)
            progress.done()
            width = shutil.get_terminal_size((100, 24)).columns
            for line in summary_lines(profile, width=width):
                print(visible(line), file=sys.stderr)  # names of the program's functions
            for path in written:
                print(f"aiflame: wrote {path}", file=sys.stderr)
            if args.open:
                open_first_page(written)
    finally:
        progress.done()
        session.cleanup()
    code = _target_exit(result.target)
    if not written:
        why = f": {result.failure}" if result.failure else ""
        print(f"aiflame: error: no samples were recorded{why}", file=sys.stderr)
        return code if code else 1
    return code


def _target_exit(target) -> int:  # type: ignore[no-untyped-def]
    """The launched program's exit status, waiting for it if it still runs (-d)."""
    from aiflame.collectors.session import exit_status

    if target is None:
        return 0
    if target.poll() is None:
        print(f"aiflame: waiting for the program (PID {target.pid}) to exit", file=sys.stderr)
        try:
            target.wait()
        except KeyboardInterrupt:
            return 130
    return exit_status(target.returncode)
