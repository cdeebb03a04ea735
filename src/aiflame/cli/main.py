"""Entry point: ``aiflame SUBCOMMAND ...``; errors are one line and a non-zero exit."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from aiflame.cli.output import drop_stdout
from aiflame.errors import AiflameError
from aiflame.version import __version__

SUBCOMMANDS = (
    "flamegraph",
    "convert",
    "diff",
    "info",
    "top",
    "memory",
    "record",
    "analyze",
    "server",
    "agent",
    "trace",
    "mcp",
)

EXIT_ERROR = 1
EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """A parser whose usage errors are one line, as every other error of aiflame is: the
    full usage is ``--help``'s."""

    help_prog: str | None = None  # the chosen subcommand's, for arguments the top level rejects

    def error(self, message: str) -> NoReturn:
        hint = self.help_prog or self.prog
        self.exit(EXIT_USAGE, f"aiflame: error: {message} (see {hint} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or, with ``only``, of that one alone: the others
    are named but not imported, so that a command loads only what it uses."""
    parser = OneLineParser(
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
    command = chosen_command(argv)
    parser = build_parser(command)
    if command is not None and isinstance(parser, OneLineParser):
        parser.help_prog = f"aiflame {command}"
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    reserve = bytearray(1 << 20)  # freed on MemoryError, so that the message can be printed
    out_of_memory = False
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)  # unwind, so that no temporary file stays
    with warnings.catch_warnings(record=True) as caught:
        try:
            status = int(args.run(args) or 0)
            _flush_stdout()
            _show_warnings(caught)
            return status
        except AiflameError as e:
            return _fail(str(e))
        except KeyboardInterrupt:
            print("aiflame: interrupted", file=sys.stderr)
            return 130
        except _Terminated:
            print("aiflame: terminated", file=sys.stderr)
            return 128 + signal.SIGTERM
        except BrokenPipeError:
            drop_stdout()  # the reader (| head) went away: not an error
            return 0
        except MemoryError:
            out_of_memory = True  # reported below, once what the error held is freed
        except OSError as e:
            return _fail(_os_error(e))
        except Exception as e:
            if os.environ.get("AIFLAME_TRACEBACK") == "1":
                raise
            where = "; AIFLAME_TRACEBACK=1 shows where"
            return _fail(f"internal error: {type(e).__name__}: {e} (a bug{where})", internal=True)
    del reserve
    if out_of_memory:
        return _fail(
            f"out of memory while running '{args.command}' (the input needs more than is available)"
        )
    return EXIT_ERROR


class _Terminated(BaseException):
    """SIGTERM, raised where the program is, so that ``finally`` blocks run."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


MAX_MESSAGE = 2000  # characters of an error line (a message may quote a huge name)


def _fail(message: str, internal: bool = False) -> int:
    """One line on stderr (nothing from a profile reaches the terminal raw)."""
    from aiflame.render.visible import visible

    if len(message) > MAX_MESSAGE:
        message = f"{message[:MAX_MESSAGE]}... ({len(message):,} characters)"
    print(("aiflame: " if internal else "aiflame: error: ") + visible(message), file=sys.stderr)
    return EXIT_ERROR


def _os_error(e: OSError) -> str:
    reason = (e.strerror or str(e)).lower()
    if e.filename is not None:
        return f"{e.filename}: {reason}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return f"cannot write the output: {reason}"
    return reason


def _flush_stdout() -> None:
    """Surface a failed write of what was printed (stdout on a full disk) as an error,
    and leave nothing for the interpreter to fail on at exit."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        drop_stdout()
        raise AiflameError(
            f"cannot write to standard output: {(e.strerror or str(e)).lower()}"
        ) from None


def _show_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Warnings of a command that succeeded, one line each; numpy's floating-point ones
    ("overflow encountered in ...") say nothing a user can act on and are left out."""
    from aiflame.render.visible import visible

    for w in caught:
        text = str(w.message)
        if issubclass(w.category, RuntimeWarning) and " encountered in " in text:
            continue
        print(f"aiflame: warning: {visible(text)}", file=sys.stderr)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
