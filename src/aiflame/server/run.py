"""Serving: uvicorn on ``--listen`` (TLS with ``--tls-cert``/``--tls-key``), one process.

Without a token file the server listens on loopback only: a store anyone on the network
can write to or read from is not a default anyone should get by accident.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket

from aiflame.errors import AiflameError
from aiflame.server.config import ServerConfig

log = logging.getLogger("aiflame.server")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None)
            )
        except (OSError, ValueError):
            return False


def check(config: ServerConfig) -> tuple[str, int]:
    host, port = config.host_port()
    if not config.token_file and not is_loopback(host):
        raise AiflameError(
            f"--listen {config.listen}: without --token-file the server only listens on "
            "loopback (127.0.0.1 or ::1); give a token file to serve the network"
        )
    if bool(config.tls_cert) != bool(config.tls_key):
        raise AiflameError("--tls-cert and --tls-key go together")
    for path in (config.tls_cert, config.tls_key):
        if path and not os.access(path, os.R_OK):
            raise AiflameError(f"{path}: cannot read it")
    if config.otlp_grpc_listen:
        grpc_host, sep, grpc_port = config.otlp_grpc_listen.rpartition(":")
        if not sep or not grpc_port.isdigit():
            raise AiflameError(f"--otlp-grpc-listen {config.otlp_grpc_listen}: expected HOST:PORT")
        if not config.token_file and not is_loopback(grpc_host.strip("[]") or "0.0.0.0"):
            raise AiflameError(
                f"--otlp-grpc-listen {config.otlp_grpc_listen}: without --token-file only "
                "on loopback"
            )
    return host, port


def start_otlp_grpc(config: ServerConfig, state):  # type: ignore[no-untyped-def]
    """The OTLP/gRPC profiles service on its own port (None when not asked for)."""
    if not config.otlp_grpc_listen:
        return None
    try:
        from aiflame.server.routes_otlp import GrpcServer

        tls = None
        if config.tls_cert and config.tls_key:
            with open(config.tls_cert, "rb") as c, open(config.tls_key, "rb") as k:
                tls = (c.read(), k.read())
        server = GrpcServer(state, config.otlp_grpc_listen, tls)
    except ImportError as e:
        raise AiflameError(
            f"--otlp-grpc-listen needs grpcio and opentelemetry-proto ({e.name} is missing): "
            "pip install 'aiflame[fleet]'"
        ) from None
    except (OSError, RuntimeError) as e:
        raise AiflameError(f"--otlp-grpc-listen {config.otlp_grpc_listen}: {e}") from None
    server.start()
    log.info("OTLP/gRPC profiles on %s", config.otlp_grpc_listen)
    return server


def serve(config: ServerConfig) -> int:
    import uvicorn

    from aiflame.server.app import WAL_DECODERS, build_app
    from aiflame.server.connections import ConnectionLimits, guarded_protocol
    from aiflame.server.state import ServerState

    host, port = check(config)
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Bind first: a port in use is one clear line, before the store is opened.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise AiflameError(f"--listen {config.listen}: {e.strerror}") from None
    state = ServerState(config, WAL_DECODERS)
    scheme = "https" if config.tls_cert else "http"
    log.info("store: %s", state.url.describe())
    log.info("listening on %s://%s:%d (UI: /ui/fleet)", scheme, host, port)
    uv = uvicorn.Config(
        build_app(state),
        http=guarded_protocol(
            ConnectionLimits(
                idle_s=config.idle_timeout_s,
                header_timeout_s=config.header_timeout_s,
                body_timeout_s=config.body_timeout_s,
                min_rate=config.body_min_bytes_per_s,
                max_per_client=config.max_client_connections,
            )
        ),
        log_level="warning",
        access_log=False,
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        timeout_keep_alive=max(1, round(config.idle_timeout_s)),
        limit_concurrency=4096,
        backlog=2048,
    )
    server = uvicorn.Server(uv)
    grpc_server = None
    try:
        grpc_server = start_otlp_grpc(config, state)
        server.run(sockets=[sock])
    finally:
        if grpc_server is not None:
            grpc_server.stop()
        state.close()
    return 0
