"""Trace running PyTorch programs on demand, through the local ``aiflame agent``: every
process that polls the agent's libkineto endpoint (started with KINETO_USE_DAEMON=1) and
matches gets a PyTorch profiler trace (Python functions, aten ops, GPU kernels) of the
duration or number of iterations asked, written where the agent keeps traces (or -o).
``--memory-snapshot`` takes a GPU memory snapshot instead, of processes that run the aiflame
bootstrap with AIFLAME_SNAPSHOT=1 (docs/agent.md)."""

from __future__ import annotations

import argparse
import sys

HELP = "trace running PyTorch programs on demand through the local aiflame agent"
DEFAULT_SOCKET = "/run/aiflame/agent.sock"


def configure(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--pid", type=int, nargs="+", metavar="PID", help="these processes (a launcher: its ranks)"
    )
    which.add_argument("--job-id", metavar="J", help="every process of Slurm job J on this host")
    which.add_argument(
        "--all", action="store_true", help="every PyTorch process that polls the agent"
    )
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--duration-ms", type=int, metavar="N", help="trace N milliseconds (default 2000)"
    )
    how.add_argument(
        "--iterations", type=int, metavar="N", help="trace N training steps (optimizer.step)"
    )
    p.add_argument("--start-time", type=float, metavar="T", help="start at Unix time T (seconds)")
    p.add_argument(
        "--memory-snapshot",
        action="store_true",
        help="a GPU memory snapshot (torch.cuda.memory._snapshot) instead of a trace, "
        "of processes started with the aiflame bootstrap and AIFLAME_SNAPSHOT=1",
    )
    p.add_argument("-o", "--output", metavar="DIR", help="write the traces into DIR")
    p.add_argument(
        "--server",
        action="store_true",
        help="also upload them (traces or snapshots) to the agent's aiflame server",
    )
    p.add_argument(
        "--agent",
        metavar="ADDR",
        default=DEFAULT_SOCKET,
        help=f"the agent's API: its socket (default {DEFAULT_SOCKET}) or HOST:PORT",
    )
    p.add_argument("--token-file", metavar="FILE", help="token of an agent API on TCP")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import os

    from aiflame.agent.api import tcp_request, unix_request
    from aiflame.agent.config import read_secret
    from aiflame.errors import AiflameError

    snapshot = args.memory_snapshot
    if snapshot and (args.duration_ms or args.iterations or args.start_time is not None):
        raise AiflameError("--memory-snapshot takes no --duration-ms, --iterations or --start-time")
    endpoint = "/v1/snapshot" if snapshot else "/v1/trace"
    body: dict[str, object] = {"upload": bool(args.server)}
    if args.pid:
        body["pids"] = args.pid
    elif args.job_id:
        body["job_id"] = args.job_id
    else:
        body["all"] = True
    if args.duration_ms is not None:
        body["duration_ms"] = args.duration_ms
    if args.iterations is not None:
        body["iterations"] = args.iterations
    if args.start_time is not None:
        body["start_time"] = args.start_time
    if args.output:
        body["output_dir"] = os.path.abspath(args.output)
    tcp = ":" in args.agent and not args.agent.startswith("/")
    try:
        if tcp:
            token = read_secret(args.token_file, "--token-file") if args.token_file else ""
            status, answer = tcp_request(args.agent, "POST", endpoint, body, args.timeout, token)
        else:
            status, answer = unix_request(args.agent, "POST", endpoint, body, args.timeout)
    except FileNotFoundError:
        raise AiflameError(f"no aiflame agent at {args.agent} (is it running?)") from None
    except PermissionError:
        raise AiflameError(f"{args.agent}: permission denied (the agent's API is root's)") from None
    except (OSError, TimeoutError) as e:
        raise AiflameError(f"the agent at {args.agent} did not answer: {e}") from None
    if status != 200:
        raise AiflameError(str(answer.get("error") or f"the agent answered HTTP {status}"))
    for s in answer.get("skipped", []):
        print(f"aiflame: skipped PID {s.get('pid')}: {s.get('why')}", file=sys.stderr)
    for f in answer.get("failed", []):
        print(f"aiflame: PID {f.get('pid')}: {f.get('why')}", file=sys.stderr)
    traces = answer.get("snapshots" if snapshot else "traces", [])
    for t in traces:
        print(t.get("path"))
    if not traces:
        raise AiflameError("no memory snapshot was written" if snapshot else "no trace was written")
    return 0 if not answer.get("failed") else 1
