"""``aiflame analyze`` flags for the efficiency numbers: device peaks and batch size."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aiflame.analysis.comm import compile_patterns
from aiflame.analysis.devices import KNOWN, by_name, parse_peaks
from aiflame.analysis.report import Options
from aiflame.errors import AiflameError


def _peaks(text: str) -> dict[str, float]:
    try:
        return parse_peaks(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}': give TFLOP/s as a number or as precision=value pairs, e.g. bf16=989,fp32=67"
        ) from None


def _positive(kind: type) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if v <= 0:
            raise argparse.ArgumentTypeError(f"'{text}' is not a positive number")
        return v

    return parse


def add_efficiency_flags(p: argparse.ArgumentParser) -> None:
    names = ", ".join(s.aliases[0] for s in KNOWN if s.aliases)
    p.add_argument(
        "--device",
        metavar="NAME",
        help=f"measure against this GPU's peaks instead of the trace's deviceProperties ({names})",
    )
    p.add_argument(
        "--peak-tflops",
        type=_peaks,
        metavar="TFLOPS",
        help="peak TFLOP/s for MFU and the roofline: one number for every precision, or "
        "precision=value pairs (bf16=989,fp32=67); overrides the table",
    )
    p.add_argument(
        "--peak-bandwidth",
        type=_positive(float),
        metavar="TB/S",
        help="peak memory bandwidth in TB/s for the roofline; overrides the table",
    )
    p.add_argument(
        "--comm-kernels",
        action="append",
        default=[],
        metavar="REGEX",
        help="kernels whose name matches this regular expression (any case) are communication, "
        "besides the collective and expert-parallel kernels recognised by name and stream "
        "(repeatable)",
    )
    p.add_argument(
        "--batch-size",
        type=_positive(int),
        metavar="N",
        help="samples per profiler step: adds GPU time per sample and per input byte",
    )


def efficiency_options(args: argparse.Namespace) -> Options:
    if args.device and by_name(args.device) is None:
        known = ", ".join(s.aliases[0] for s in KNOWN if s.aliases)
        raise AiflameError(f"unknown --device '{args.device}' (known: {known})")
    compile_patterns(args.comm_kernels)  # a bad pattern fails before the (slow) reading
    return Options(
        top=max(args.top, 1),
        comm_kernels=list(args.comm_kernels),
        device=args.device,
        peak_tflops=args.peak_tflops,
        peak_tb_per_s=args.peak_bandwidth,
        batch_size=args.batch_size,
    )
