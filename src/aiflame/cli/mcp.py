"""Serve aiflame's analyses to AI agents over the Model Context Protocol: analyze a trace or
a directory of ranks, top functions / kernels / GPU stall reasons, a diff of two inputs, GPU
memory at the peak; with --server, an aiflame server's GPU hours, findings and workload
profiles. stdio by default (what MCP clients launch); --http serves streamable HTTP with a
token. See docs/mcp.md."""

from __future__ import annotations

import argparse
import os

from aiflame.errors import AiflameError

HELP = "an MCP server over profiles, traces and an aiflame server's fleet (for AI agents)"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="a directory whose files the tools may read (repeatable; default: the current one)",
    )
    p.add_argument("--server", metavar="URL", help="an aiflame server for the fleet tools")
    p.add_argument("--server-token-file", metavar="FILE", help="its token (a 'read' scope), Bearer")
    p.add_argument("--tenant", metavar="ID", help="the server's tenant (X-Scope-OrgID)")
    p.add_argument("--ca-file", metavar="PEM", help="CA bundle for an https server")
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (needs --token-file)",
    )
    p.add_argument("--token-file", metavar="FILE", help="the token HTTP clients must send (Bearer)")


def _secret(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            value = f.readline().strip()
    except OSError as e:
        raise AiflameError(f"{what} {path}: {e.strerror or e}") from None
    if len(value) < 16:
        raise AiflameError(f"{what} {path}: a token of at least 16 characters is needed")
    return value


def run(args: argparse.Namespace) -> int:
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        raise AiflameError("aiflame mcp needs the MCP SDK: pip install 'aiflame[mcp]'") from None
    from aiflame.mcp.app import Config, serve_http, serve_stdio
    from aiflame.mcp.paths import Roots

    Roots.of(args.root)  # a bad root is one line, before anything is served
    config = Config(
        roots=args.root or [os.getcwd()],
        server_url=args.server or "",
        server_token=_secret(args.server_token_file, "--server-token-file")
        if args.server_token_file
        else "",
        tenant=args.tenant or "",
        ca_file=args.ca_file or "",
    )
    if args.http is None:
        if args.token_file:
            raise AiflameError("--token-file is for --http (stdio needs no token)")
        serve_stdio(config)
        return 0
    host, sep, port = args.http.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise AiflameError(f"--http {args.http}: expected HOST:PORT")
    if not args.token_file:
        raise AiflameError("--http needs --token-file: the tools read files and query servers")
    serve_http(
        config, host.strip("[]") or "127.0.0.1", int(port), _secret(args.token_file, "--token-file")
    )
    return 0
