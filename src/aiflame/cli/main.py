"""Entry point: ``aiflame SUBCOMMAND ...``; errors are one line and a non-zero exit."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from aiflame import __version__
from aiflame.errors import AiflameError

SUBCOMMANDS = (
    "flamegraph",
    "convert",
    "diff",
    "info",
    "memory",
    "record",
    "analyze",
    "agent",
    "trace",
)

EXIT_ERROR = 1
EXIT_USAGE = 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or, with ``only``, of that one alone: the others
    are named but not imported, so that a command loads only what it uses."""
    parser = argparse.ArgumentParser(
        prog="aiflame",
        description="Full-stack flame graphs for AI workloads: CPU, GPU time, GPU memory.",
    )
    parser.add_argument("--version", action="version", version=f"aiflame {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        module = importlib.import_module(f"aiflame.cli.{name}")
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__)
        module.configure(p)
        p.set_defaults(run=module.run)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (its first word), if any."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in SUBCOMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(chosen_command(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args) or 0)
    except AiflameError as e:
        print(f"aiflame: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("aiflame: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        print("aiflame: error: out of memory", file=sys.stderr)
        return EXIT_ERROR


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
