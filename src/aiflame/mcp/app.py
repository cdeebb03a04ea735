"""The MCP server: aiflame's tools registered with the MCP SDK, served over stdio (the
default, what desktop clients and coding agents launch) or streamable HTTP with a token.

Tools are read-only (they read files under the roots, or query an ``aiflame server``), run in
the SDK's worker threads, and answer with structured content (the same JSON as text). A
problem with the input (a path outside the roots, a file aiflame cannot read, a metric the
profile lacks, a server that refuses) is a tool error whose message says what was wrong.
"""

from __future__ import annotations

import functools
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from aiflame.errors import AiflameError
from aiflame.mcp.fleet import CPU_TYPE, FleetTools
from aiflame.mcp.local import LocalTools
from aiflame.mcp.paths import Roots
from aiflame.version import __version__

INSTRUCTIONS = """\
aiflame answers questions about AI workloads' performance from profiles and traces: PyTorch \
profiler (Kineto) traces, Nsight Systems exports, pprof, perf script, folded stacks, PyTorch \
memory snapshots, GPU PC samples; and, when configured with an aiflame server, about the \
fleet (GPU hours by label, findings, a workload's profile over time). Paths are read only \
under the server's root directories. Every answer carries 'provenance': the inputs (or the \
server query and time range), the metric and its unit and the sample count, so it can be \
checked with the aiflame command named there."""

Paths = Annotated[
    list[str],
    Field(description="input files, or a directory of traces (one per rank)", min_length=1),
]
Limit = Annotated[int, Field(description="rows to return (1-100)", ge=1, le=100)]
Metric = Annotated[
    str | None,
    Field(
        description="sample type (e.g. cpu-samples, gpu-time, wall-time, peak-bytes); "
        "default: the profile's main one"
    ),
]
Start = Annotated[str, Field(description="range start: Unix ms or s, or now-6h / now-7d")]
End = Annotated[str, Field(description="range end: Unix ms or s, or now")]


@dataclass
class Config:
    roots: list[str]
    server_url: str = ""
    server_token: str = ""
    tenant: str = ""
    ca_file: str = ""


def _guard(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Input problems as the SDK's tool errors (one clear message, no traceback logged)."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)  # the SDK reads the parameters' schema from the signature
    def call(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return fn(*args, **kwargs)
        except (AiflameError, OSError, ValueError) as e:
            raise ToolError(str(e)) from None

    return call


def build(config: Config):  # type: ignore[no-untyped-def]
    """The MCPServer with every tool this configuration can answer."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    local = LocalTools(Roots.of(config.roots))
    server = MCPServer(
        "aiflame", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    notes = ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=True)

    @_guard
    def analyze_trace(paths: Paths, top: Limit = 10) -> dict[str, Any]:
        """Analyze GPU traces (PyTorch profiler, Nsight Systems, Chrome traces; a directory:
        one trace per rank) as `aiflame analyze` does: GPU time breakdown (computation,
        communication, memcpy, idle), idle causes, top kernels and ops, launch and sync
        overhead, and findings ranked by the GPU time a fix can win, each with its fix.
        GPU PC sample inputs add the stall analysis."""
        return local.analyze_trace(paths, top)

    @_guard
    def top_functions(
        paths: Paths,
        metric: Metric = None,
        by: Annotated[Literal["self", "total"], Field(description="order by")] = "self",
        kind: Annotated[
            str | None,
            Field(
                description="only frames of one kind: python, cpp, native, kernel, runtime, "
                "gpu-kernel, jit, ..."
            ),
        ] = None,
        limit: Limit = 20,
    ) -> dict[str, Any]:
        """The costliest functions of a profile or trace (as `aiflame top` lists them): self
        value (spent in the function itself) and total (with what it called) of a metric,
        with shares of the total."""
        return local.top_functions(paths, metric, by, kind, limit)

    @_guard
    def top_kernels(paths: Paths, limit: Limit = 20) -> dict[str, Any]:
        """The GPU kernels that take the most GPU time: for traces, per rank with count,
        mean and share (as `aiflame analyze`); for profiles, their gpu-kernel frames."""
        return local.top_kernels(paths, limit)

    @_guard
    def gpu_stall_reasons(paths: Paths, limit: Limit = 10) -> dict[str, Any]:
        """Why GPU kernels stall, from GPU PC samples (Nsight Compute, CUPTI PC sampling,
        HPCToolkit, rocprofv3, iaprof): per kernel its stall reasons, source lines and
        instructions, and findings with the fix to try (as `aiflame analyze`)."""
        return local.gpu_stall_reasons(paths, limit)

    @_guard
    def diff_profiles(
        base: Annotated[str, Field(description="the 'before' input (file or directory)")],
        test: Annotated[str, Field(description="the 'after' input (file or directory)")],
        metric: Metric = None,
        limit: Limit = 15,
    ) -> dict[str, Any]:
        """Compare two profiles or traces (as `aiflame diff`): totals of both and the
        functions whose self value grew or shrank the most."""
        return local.diff_profiles(base, test, metric, limit)

    @_guard
    def memory_at_peak(
        path: Annotated[
            str,
            Field(
                description="PyTorch memory snapshot, or a profiler trace "
                "recorded with profile_memory=True"
            ),
        ],
        limit: Limit = 15,
    ) -> dict[str, Any]:
        """GPU memory live at the peak by allocation stack (as `aiflame memory`): the
        stacks and the allocation sites holding the most bytes."""
        return local.memory_at_peak(path, limit)

    for fn in (analyze_trace, top_functions, top_kernels, gpu_stall_reasons, diff_profiles,
               memory_at_peak):  # fmt: skip
        server.add_tool(fn, name=_name(fn), annotations=notes)

    if config.server_url:
        fleet = FleetTools(config.server_url, config.server_token, config.tenant, config.ca_file)
        remote = ToolAnnotations(read_only_hint=True, open_world_hint=True, idempotent_hint=True)

        @_guard
        def gpu_hours(
            group_by: Annotated[str, Field(description="label to group by: job_id, team, "
                                           "model, namespace, user, host, ...")] = "job_id",
            start: Start = "now-7d",
            end: End = "now",
            selector: Annotated[
                str, Field(description='label selector, e.g. {team="search"}')
            ] = "",
            limit: Limit = 10,
        ) -> dict[str, Any]:  # fmt: skip
            """GPU hours of the fleet by a label (allocated, busy, useful) with efficiency
            metrics (SM activity, FLOP/s, MFU where known), from the aiflame server."""
            return fleet.gpu_hours(group_by, start, end, selector, limit)

        @_guard
        def fleet_findings(
            start: Start = "now-7d",
            end: End = "now",
            workload_label: Annotated[str, Field(description="label naming a workload")] = "job_id",
            selector: Annotated[str, Field(description="label selector")] = "",
            limit: Limit = 10,
        ) -> dict[str, Any]:  # fmt: skip
            """Anti-patterns found in the fleet's traces, ranked by the GPU hours they cost,
            with the workloads they cost most in and the fix, from the aiflame server."""
            return fleet.fleet_findings(start, end, workload_label, selector, limit)

        @_guard
        def workload_profile(
            selector: Annotated[str, Field(description='the workload, e.g. {job_id="8812"}')],
            profile_type: Annotated[
                str, Field(description="name:type:unit:period_type:period_unit")
            ] = CPU_TYPE,
            start: Start = "now-1h",
            end: End = "now",
            by: Annotated[Literal["self", "total"], Field(description="order by")] = "self",
            limit: Limit = 20,
        ) -> dict[str, Any]:
            """A workload's continuous profile over a time range (every host's, merged):
            its costliest functions by self or total value, from the aiflame server."""
            return fleet.workload_profile(selector, profile_type, start, end, by, limit)

        @_guard
        def server_labels(
            name: Annotated[str, Field(description="a label whose values to list; empty: "
                                       "list the label names and profile types")] = "",
            selector: Annotated[str, Field(description="label selector")] = "",
            start: Start = "now-24h",
            end: End = "now",
        ) -> dict[str, Any]:  # fmt: skip
            """The aiflame server's label names and profile types, or one label's values:
            what the other server tools can be asked about."""
            return fleet.labels(name, selector, start, end)

        for fn in (gpu_hours, fleet_findings, workload_profile, server_labels):
            server.add_tool(fn, name=_name(fn), annotations=remote)
    return server


def _name(fn: Callable[..., Any]) -> str:
    return fn.__name__


def serve_stdio(config: Config) -> None:
    logging.getLogger("mcp").setLevel(logging.WARNING)
    build(config).run("stdio")


def serve_http(config: Config, host: str, port: int, token: str) -> None:
    """Streamable HTTP at ``/mcp``; every request needs ``Authorization: Bearer TOKEN``."""
    import uvicorn

    server = build(config)
    app = server.streamable_http_app(streamable_http_path="/mcp", host=host)
    uvicorn.run(BearerToken(app, token), host=host, port=port, log_level="warning")


class BearerToken:
    """ASGI middleware: nothing is served without the token (compared in constant time)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            got = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                body = b'{"error": "a token is required (Authorization: Bearer TOKEN)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="aiflame-mcp"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
