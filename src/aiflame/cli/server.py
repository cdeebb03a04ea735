"""Run the fleet server: ingest (Pyroscope push and /ingest, agent telemetry, traces),
ClickHouse store (embedded chDB by default), automatic trace analysis, GPU-hour attribution,
Grafana's Pyroscope query API and the web UI. See docs/server.md."""

from __future__ import annotations

import argparse

from aiflame.errors import AiflameError

HELP = "the fleet server: store, analysis, GPU-hour attribution, Grafana/Pyroscope API, web UI"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="chdb://DIR (embedded ClickHouse, default chdb://./aiflame-data) or "
        "clickhouse://user:pass@host:8123/db[?cluster=NAME]",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default="127.0.0.1:4040",
        help="address to serve (default 127.0.0.1:4040; other than loopback only "
        "with --token-file)",
    )
    p.add_argument(
        "--otlp-grpc-listen",
        metavar="HOST:PORT",
        default="",
        help="also take OpenTelemetry profiles over OTLP/gRPC here (e.g. 127.0.0.1:4317; "
        "OTLP/HTTP is always on the main address, /v1development/profiles)",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="tokens, one 'TOKEN SCOPE[,SCOPE...]' per line (scopes: ingest, read, "
        "admin); every request then needs one",
    )
    p.add_argument(
        "--retention",
        metavar="[GROUP=]DURATION",
        action="append",
        default=[],
        help="how long data is kept: 30d for everything, or per group: "
        "profiles=14d, telemetry=30d, rollups=400d, traces=90d (repeatable)",
    )
    p.add_argument(
        "--analysis-workers",
        type=int,
        default=1,
        metavar="N",
        help="processes analyzing uploaded traces (default 1)",
    )
    p.add_argument(
        "--max-body",
        metavar="MB",
        type=float,
        default=32,
        help="largest profile push accepted, in MiB (default 32)",
    )
    p.add_argument(
        "--max-trace",
        metavar="MB",
        type=float,
        default=512,
        help="largest trace upload accepted, in MiB (default 512)",
    )
    p.add_argument(
        "--batch-seconds",
        type=float,
        default=None,
        metavar="S",
        help="how long answered pushes wait in the write-ahead log for their batch to the "
        "store (default 10; a batch of 200,000 rows goes sooner): longer batches cost the "
        "store less CPU per profile, and make pushes queryable that much later",
    )
    p.add_argument(
        "--query-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="the longest a query may run in the store (default 30)",
    )
    p.add_argument(
        "--max-queries-per-client",
        type=int,
        default=4,
        metavar="N",
        help="queries in flight at once per token and tenant; beyond, 429 (default 4)",
    )
    p.add_argument(
        "--max-connections-per-client",
        type=int,
        default=256,
        metavar="N",
        help="open connections per client address; beyond, 429 (default 256, 0: no cap; "
        "raise it behind a proxy that sends every client from one address)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="a request's headers must arrive within this (default 10); its body at 16 KiB/s "
        "on average after as long",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="a connection that sends no request for this long is closed (default 30)",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def run(args: argparse.Namespace) -> int:
    try:
        import chdb  # noqa: F401
        import clickhouse_connect  # noqa: F401
        import pyarrow  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise AiflameError(
            f"aiflame server needs the fleet extra ({e.name} is missing): "
            "pip install 'aiflame[fleet]'"
        ) from None
    from dataclasses import replace

    from aiflame.server.config import ServerConfig, parse_retention
    from aiflame.server.ingest.push import Limits
    from aiflame.server.run import serve
    from aiflame.server.store.url import DEFAULT_STORE

    if args.analysis_workers < 1:
        raise AiflameError("--analysis-workers must be at least 1")
    if args.max_body <= 0 or args.max_trace <= 0:
        raise AiflameError("--max-body and --max-trace must be positive")
    if args.batch_seconds is not None and not 0.1 <= args.batch_seconds <= 60:
        raise AiflameError("--batch-seconds must be from 0.1 to 60")
    if not 0.1 <= args.query_timeout <= 3600:
        raise AiflameError("--query-timeout must be from 0.1 to 3600 seconds")
    if not 0.5 <= args.header_timeout <= 3600:
        raise AiflameError("--header-timeout must be from 0.5 to 3600 seconds")
    if not 1 <= args.idle_timeout <= 3600:
        raise AiflameError("--idle-timeout must be from 1 to 3600 seconds")
    if args.max_queries_per_client < 1 or args.max_connections_per_client < 0:
        raise AiflameError(
            "--max-queries-per-client must be at least 1, --max-connections-per-client 0 or more"
        )
    limits = replace(
        Limits(),
        max_body_bytes=int(args.max_body * (1 << 20)),
        max_trace_bytes=int(args.max_trace * (1 << 20)),
    )
    config = ServerConfig(
        store=args.store or DEFAULT_STORE,
        listen=args.listen,
        otlp_grpc_listen=args.otlp_grpc_listen,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        token_file=args.token_file,
        retention_s=parse_retention(args.retention),
        limits=limits,
        analysis_workers=args.analysis_workers,
        log_level=args.log_level,
        query_timeout_s=args.query_timeout,
        queries_per_client=args.max_queries_per_client,
        queries_total=max(16, args.max_queries_per_client),
        header_timeout_s=args.header_timeout,
        idle_timeout_s=args.idle_timeout,
        body_timeout_s=args.header_timeout,
        max_client_connections=args.max_connections_per_client,
    )
    if args.batch_seconds is not None:
        config = replace(config, logged_flush_interval_s=args.batch_seconds)
    if args.token_file:
        from aiflame.server.auth import parse_token_file

        parse_token_file(args.token_file)  # a bad file is one line, before anything starts
    return serve(config)
