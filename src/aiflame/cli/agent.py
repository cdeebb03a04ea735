"""The per-host daemon of a GPU fleet: continuous profiles of every process (CPU with
Python frames, CUDA/HIP API calls, GPU memory by allocation stack), GPU telemetry through
NVML, on-demand PyTorch traces (libkineto's IPC fabric, as Dynolog serves it), /metrics
for Prometheus; pushed to aiflame server, Grafana Pyroscope and/or an OpenTelemetry
collector (OTLP), spooled on disk while they cannot be reached. See docs/agent.md."""

from __future__ import annotations

import argparse
import sys

EXIT_CONFIG = 2
HELP = "run the per-host daemon: continuous profiles, GPU telemetry, on-demand traces"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML configuration (flags override it)")
    p.add_argument("--server", metavar="URL", help="aiflame server to push to")
    p.add_argument("--server-token-file", metavar="FILE", help="its token (Bearer)")
    p.add_argument("--pyroscope", metavar="URL", help="also push profiles to Grafana Pyroscope")
    p.add_argument(
        "--pyroscope-api", choices=("push", "ingest"), help="push API (default) or /ingest"
    )
    p.add_argument(
        "--pyroscope-user", metavar="USER", help="basic auth user (Grafana Cloud: stack id)"
    )
    p.add_argument(
        "--pyroscope-password-file", metavar="FILE", help="basic auth password/API token"
    )
    p.add_argument("--pyroscope-token-file", metavar="FILE", help="Bearer token instead")
    p.add_argument("--pyroscope-tenant", metavar="ID", help="X-Scope-OrgID")
    p.add_argument(
        "--otlp",
        metavar="URL",
        help="also send profiles to an OpenTelemetry collector over OTLP/HTTP "
        "(e.g. http://collector:4318; a URL without a path gets /v1development/profiles)",
    )
    p.add_argument(
        "--otlp-header",
        action="append",
        metavar="NAME=VALUE",
        help="a header of every OTLP request (e.g. Authorization=Bearer ...); repeatable",
    )
    p.add_argument("--otlp-token-file", metavar="FILE", help="OTLP: Bearer token from FILE")
    p.add_argument(
        "--spool", metavar="DIR", help="spool directory (default /var/lib/aiflame/spool)"
    )
    p.add_argument("--spool-max-mb", type=float, metavar="MB", help="spool bound (default 512)")
    p.add_argument("--period", type=float, metavar="SECONDS", help="profile period (default 15)")
    p.add_argument(
        "--metrics-listen",
        metavar="ADDR",
        help="/metrics on HOST:PORT (default 127.0.0.1:9464; '' off)",
    )
    p.add_argument(
        "--dcgm-metrics",
        choices=("keep", "prefix", "drop"),
        help="GPU series under dcgm-exporter's names (keep, the default), prefixed with "
        "aiflame_, or not at all (beside a dcgm-exporter)",
    )
    p.add_argument(
        "--api-socket", metavar="PATH", help="API socket (default /run/aiflame/agent.sock)"
    )
    p.add_argument(
        "--api-listen", metavar="ADDR", help="API on TCP HOST:PORT instead (needs --token-file)"
    )
    p.add_argument("--token-file", metavar="FILE", help="token the TCP API requires")
    p.add_argument("--host", help="host label (default: the host name)")
    p.add_argument("--cpu-hz", type=int, metavar="HZ", help="CPU sampling rate (default 19)")
    p.add_argument(
        "--cpu-budget-percent",
        type=float,
        metavar="P",
        help="CPU budget, %% of one core (default 1)",
    )
    p.add_argument("--no-cuda", action="store_true", help="no CUDA/HIP API or GPU memory probes")
    p.add_argument("--no-nvml", action="store_true", help="no GPU telemetry")
    p.add_argument(
        "--kineto-socket-dir",
        action="append",
        metavar="DIR",
        help="serve libkineto in DIR too (KINETO_IPC_SOCKET_DIR); repeatable",
    )
    p.add_argument(
        "--no-kineto-abstract", action="store_true", help="not on the abstract socket @dynolog"
    )
    p.add_argument(
        "--no-kineto-netns",
        action="store_true",
        help="not in the other network namespaces (pods) of the host",
    )
    p.add_argument(
        "--trace-dir", metavar="DIR", help="where traces go (default /var/lib/aiflame/traces)"
    )
    p.add_argument(
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="a label of everything of this host; repeatable",
    )
    p.add_argument(
        "--label-env",
        action="append",
        metavar="KEY=VAR",
        help="label KEY from each process's VAR; repeatable",
    )
    p.add_argument(
        "--duration", type=float, metavar="SECONDS", help=argparse.SUPPRESS
    )  # tests, benchmarks


def build_config(args: argparse.Namespace):
    from aiflame.agent.config import AgentConfig, ConfigError, load_file, read_secret, validate

    c = load_file(args.config) if args.config else AgentConfig()
    simple = {
        "spool": "spool", "period": "period", "metrics_listen": "metrics_listen",
        "api_socket": "api_socket", "api_listen": "api_listen", "host": "host",
        "cpu_hz": "cpu_hz", "trace_dir": "trace_dir", "dcgm_metrics": "dcgm_metrics",
    }  # fmt: skip
    for flag, attr in simple.items():
        value = getattr(args, flag)
        if value is not None:
            setattr(c, attr, value)
    if args.spool_max_mb is not None:
        c.spool_max_bytes = int(args.spool_max_mb * (1 << 20))
    if args.cpu_budget_percent is not None:
        c.cpu_budget = args.cpu_budget_percent / 100.0
    if args.server is not None:
        c.server.url = args.server
    if args.server_token_file:
        c.server.token = read_secret(args.server_token_file, "--server-token-file")
    if args.pyroscope is not None:
        c.pyroscope.url = args.pyroscope
    if args.pyroscope_api:
        c.pyroscope.api = args.pyroscope_api
    if args.pyroscope_user is not None:
        c.pyroscope.user = args.pyroscope_user
    if args.pyroscope_password_file:
        c.pyroscope.password = read_secret(
            args.pyroscope_password_file, "--pyroscope-password-file"
        )
    if args.pyroscope_token_file:
        c.pyroscope.token = read_secret(args.pyroscope_token_file, "--pyroscope-token-file")
    if args.pyroscope_tenant is not None:
        c.pyroscope.tenant = args.pyroscope_tenant
    if args.otlp is not None:
        c.otlp.url = args.otlp
    for item in args.otlp_header or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--otlp-header {item!r}: expected NAME=VALUE")
        c.otlp.headers[name.strip()] = value.strip()
    if args.otlp_token_file:
        c.otlp.token = read_secret(args.otlp_token_file, "--otlp-token-file")
    if args.token_file:
        c.api_token = read_secret(args.token_file, "--token-file")
    if args.no_cuda:
        c.cuda = False
    if args.no_nvml:
        c.nvml = False
    if args.kineto_socket_dir:
        c.kineto_socket_dirs = list(args.kineto_socket_dir)
    if args.no_kineto_abstract:
        c.kineto_abstract = False
    if args.no_kineto_netns:
        c.kineto_netns = False
    for item in args.label or ():
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--label {item!r}: expected KEY=VALUE")
        c.static_labels[key] = value
    for item in args.label_env or ():
        key, sep, var = item.partition("=")
        if not sep or not var:
            raise ConfigError(f"--label-env {item!r}: expected KEY=VARIABLE")
        c.env_labels[key] = var
    return validate(c)


def run(args: argparse.Namespace) -> int:
    from aiflame.agent.config import ConfigError

    try:
        config = build_config(args)
    except ConfigError as e:
        print(f"aiflame: error: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        print(
            "aiflame: error: the agent needs its extra: pip install 'aiflame[fleet]'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if config.otlp.url:
        try:
            import opentelemetry.proto.profiles.v1development.profiles_pb2  # noqa: F401
        except ImportError:
            print(
                "aiflame: error: --otlp needs opentelemetry-proto: pip install 'aiflame[fleet]'",
                file=sys.stderr,
            )
            return EXIT_CONFIG
    from aiflame.agent.daemon import run_agent

    try:
        return run_agent(config, args.duration)
    except PermissionError as e:
        print(
            f"aiflame: error: {e.filename or ''}: permission denied (the agent runs as root)",
            file=sys.stderr,
        )
        return 1
