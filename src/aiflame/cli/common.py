"""Flags shared by subcommands; outputs are written by :mod:`aiflame.cli.output`."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from aiflame.cli.output import write_output
from aiflame.errors import AiflameError


def add_inputs(p: argparse.ArgumentParser, many: bool = True) -> None:
    p.add_argument(
        "inputs" if many else "input",
        nargs="+" if many else None,
        metavar="INPUT",
        help="profile or trace file ('-' for stdin; .gz is read transparently)",
    )
    p.add_argument(
        "--format",
        dest="input_format",
        metavar="FMT",
        help="input format, when detection is not wanted (folded, perf-script, pprof, ...)",
    )
    add_perf_options(p)


def add_perf_options(p: argparse.ArgumentParser) -> None:
    """The options of FlameGraph's stackcollapse-perf.pl, for 'perf script' inputs."""
    g = p.add_argument_group("perf script input")
    flag = g.add_argument
    flag("--pid", dest="perf_pid", action="store_true", help="process name with its PID")
    flag("--tid", dest="perf_tid", action="store_true", help="process name with PID/TID")
    flag(
        "--kernel",
        dest="perf_kernel",
        action="store_true",
        help="mark kernel frames _[k] in folded text",
    )
    flag("--jit", dest="perf_jit", action="store_true", help="mark JIT frames _[j] in folded text")
    flag(
        "--annotate-all",
        dest="perf_all",
        action="store_true",
        help="both --kernel and --jit (stackcollapse-perf.pl --all)",
    )
    flag(
        "--addrs",
        dest="perf_addrs",
        action="store_true",
        help="keep the address of frames without a symbol",
    )
    flag(
        "--event-filter",
        dest="perf_event_filter",
        metavar="EVENT",
        help="keep samples of this event (default: the first event type in the input)",
    )
    flag(
        "--jobs",
        dest="perf_jobs",
        type=_jobs,
        metavar="N",
        help="processes for a large perf script file (default: one per idle CPU, up to 8)",
    )


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of processes, got '{text}'")
    return n


def perf_load_options(args: argparse.Namespace) -> dict[str, object]:
    """The perf script options that were given, as importer keyword arguments."""
    names = ("perf_pid", "perf_tid", "perf_kernel", "perf_jit", "perf_all", "perf_addrs")
    out: dict[str, object] = {k: True for k in names if getattr(args, k, False)}
    if getattr(args, "perf_event_filter", None):
        out["perf_event_filter"] = args.perf_event_filter
    if getattr(args, "perf_jobs", None):
        out["perf_jobs"] = args.perf_jobs
    return out


def add_metric(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-m",
        "--metric",
        metavar="NAME",
        help="sample type to show (default: the profile's main one; see 'aiflame info')",
    )


__all__ = ["write_output"]  # re-exported: every command writes through it


def add_output(p: argparse.ArgumentParser, required: bool = True, help: str = "") -> None:
    p.add_argument("-o", "--output", required=required, metavar="OUT", help=help or "output file")


def output_format(
    path: str,
    default: str,
    allowed: Iterable[str] | None = None,
    given: str | None = None,
    flag: bool = False,
) -> str:
    """The format to write ``path`` in: ``given`` (-f), else its extension's, else
    ``default`` (no extension, or stdout). An extension this command cannot write is one
    clear error, never a file of another format under that name; ``flag``: the command
    has ``-f`` to name the format, which the error then mentions."""
    from aiflame.render.registry import FORMATS, extensions, format_for_path

    can = tuple(allowed if allowed is not None else FORMATS)
    fmt = given or (None if path == "-" else format_for_path(path))
    endings = ", ".join(e for f in can for e in extensions(f)[:2])
    or_flag = f", or give -f {'|'.join(can)}" if flag else ""
    if fmt is None:
        suffix = "" if path == "-" else Path(path).suffix
        if not suffix:
            return default
        raise AiflameError(
            f"{path}: cannot write '{suffix}' files; name the output {endings}{or_flag}"
        )
    if fmt not in can:
        other = "; 'aiflame convert' writes it" if fmt in FORMATS else ""
        raise AiflameError(
            f"{path}: this command does not write {fmt}; name the output {endings}{other}"
        )
    return fmt


def check_metric(profile, metric: str | None) -> None:  # type: ignore[no-untyped-def]
    """Fail with a clear line when ``metric`` is not in the profile."""
    try:
        profile.type_index(metric)
    except KeyError as e:
        raise AiflameError(str(e.args[0])) from None
    if profile.is_empty():
        src = profile.meta.get("source", "input")
        raise AiflameError(f"{src}: empty profile (no samples with a value)")


GROUP_KEYS = ("file", "rank", "device", "stream", "pid", "tid", "gil")
FILE_LABEL = "file"  # --group-by file: the input file each sample came from


def add_trace_options(p: argparse.ArgumentParser) -> None:
    """Flags for GPU traces (PyTorch profiler, Nsight Systems): grouping and naming."""
    p.add_argument(
        "--group-by",
        choices=GROUP_KEYS,
        help="put each input file, rank, device, stream, process, thread or GIL state "
        "(recorded Python threads: held or released) at the root of the flame graph",
    )
    p.add_argument(
        "--kernel-names",
        choices=("full", "short"),
        help="GPU kernel names as in the trace (full, the default) or with template "
        "arguments and parameters folded, but for the arguments that tell the kernels of the "
        "profile apart (short)",
    )
    p.add_argument(
        "--python-names",
        choices=("short", "raw"),
        help="Python frames as 'function (file.py:12)' (short, the default) or as the "
        "profiler wrote them (raw)",
    )
    add_module_options(p)


def add_module_options(p: argparse.ArgumentParser) -> None:
    """How PyTorch profiler traces show module instances and profiler steps."""
    p.add_argument(
        "--module-instances",
        action="store_true",
        help="PyTorch traces: keep a frame per module instance (nn.Module: Layer_0, Layer_1, "
        "...); by default the instances of a module class merge into one 'Layer > forward'",
    )
    p.add_argument(
        "--merge-steps",
        action="store_true",
        help="PyTorch traces: merge the ProfilerStep#N annotations into one ProfilerStep#*",
    )


def trace_load_options(args: argparse.Namespace) -> dict[str, object]:
    """Importer options given on the command line (only those that were set)."""
    names = ("kernel_names", "python_names")
    out: dict[str, object] = {
        k: getattr(args, k) for k in names if getattr(args, k, None) is not None
    }
    out.update(module_options(args))
    return out


def module_options(args: argparse.Namespace) -> dict[str, bool]:
    """``--module-instances`` and ``--merge-steps``, as importer options (when given)."""
    return {k: True for k in ("module_instances", "merge_steps") if getattr(args, k, False)}


def apply_group_by(profile, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """``profile`` with the ``--group-by`` label as root frames, when asked for."""
    key = getattr(args, "group_by", None)
    if not key:
        return profile
    from aiflame.transforms.group import group_by

    return group_by(profile, key)


def load_inputs(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Load and merge ``args.inputs`` with the format options, group them, check the metric."""
    from aiflame.sources import load_many

    profile = load_many(
        args.inputs,
        args.input_format,
        label_files=FILE_LABEL if getattr(args, "group_by", None) == FILE_LABEL else None,
        **trace_load_options(args),
        **perf_load_options(args),
    )
    profile = apply_group_by(profile, args)
    check_metric(profile, args.metric)
    return profile
