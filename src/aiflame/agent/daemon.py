"""``aiflame agent``: the loop that ties the parts together.

Every ``period`` seconds: cut the profiles of every process (:mod:`.profiler`) and the
telemetry (:mod:`.telemetry`), write them to the spool (:mod:`.spool`; from there a
sender per destination pushes them, :mod:`.push`), measure what the period cost and set
the next period's sampling rate (:mod:`.budget`), and tell the server this host is alive
(its answer may ask for traces). In between: the profiler's ring buffers, NVML polls,
libkineto's polls (:mod:`.kineto_ipc`, on a thread of its own), the API (:mod:`.api`)
and ``/metrics`` (:mod:`.metrics`), each on a thread.

SIGTERM / SIGINT end the loop: the current period is cut and spooled, every BPF program
detached, the senders get a few seconds to push what they can (the rest stays in the
spool for the next start). A SIGKILL loses the period being cut; what was spooled is
replayed at the next start.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from aiflame.agent.api import Api
from aiflame.agent.budget import CpuBudget
from aiflame.agent.config import AgentConfig, spool_queues
from aiflame.agent.identity import Identities, KubeletPods, KubeLogIndex
from aiflame.agent.kineto_ipc import KinetoFabric
from aiflame.agent.metrics import AgentCollector, AgentCounters, serve_metrics
from aiflame.agent.nvml import Nvml
from aiflame.agent.pod_resources import PodResources
from aiflame.agent.profiler import PROCESS_CPU, ContinuousProfiler
from aiflame.agent.push import Destination, HttpClient, Retry, Sender, check, otlp_endpoint
from aiflame.agent.snapshots import SnapshotManager, SnapshotRequest
from aiflame.agent.spool import Spool
from aiflame.agent.telemetry import Telemetry, encode_document
from aiflame.agent.tracing import TraceManager, TraceRequest
from aiflame.collectors.ebpf.libbpf import BpfError
from aiflame.collectors.ebpf.support import unavailable_reason
from aiflame.render.pprof import render_pprof
from aiflame.version import __version__

HEARTBEAT_PATH = "/api/v1/agents/heartbeat"
SHUTDOWN_PUSH_S = 5.0  # what the senders may still push at exit
TICK_S = 0.25  # the profiler's ring buffers carry announcements only: 4 looks a second do


class Agent:
    def __init__(self, config: AgentConfig, log: TextIO = sys.stderr) -> None:
        self.config = config
        self.log = log
        self.started = time.time()
        self.stop_event = threading.Event()
        rules = config.label_rules()
        pods = (
            KubeletPods(config.kubelet_url, config.kubelet_token, config.kubelet_ca_file)
            if config.kubelet_url and config.pod_labels
            else None
        )
        self.identities = Identities(
            config.host, rules, kube_logs=KubeLogIndex(config.kube_log_dir), pod_labels=pods
        )
        self.counters = AgentCounters()
        self.spool = Spool(config.spool, spool_queues(config), config.spool_max_bytes)
        self.budget = CpuBudget(config.cpu_budget, config.cpu_hz, config.min_cpu_hz)
        self.profiler: ContinuousProfiler | None = None
        self.telemetry: Telemetry | None = None
        self.nvml: Nvml | None = None
        self.pod_resources: PodResources | None = None
        self.fabric: KinetoFabric | None = None
        self.api: Api | None = None
        self.senders: list[Sender] = []
        self.traces: TraceManager | None = None
        self.snapshots: SnapshotManager | None = None
        self.metrics_port = 0
        self._stop_metrics: Callable[[], None] | None = None
        self._period_start = time.monotonic()
        self._turned = time.monotonic()  # when the main loop last turned (liveness)
        self._closed = False
        self.failed_periods = 0
        self.stopped_line = "stopped"  # what close() could do, said at exit

    def say(self, line: str) -> None:
        print(f"aiflame agent: {line}", file=self.log, flush=True)

    # -- start ------------------------------------------------------------------------------
    def start(self) -> None:
        c = self.config
        try:
            self._start_profiler()
            self._start_nvml()
            self._start_tracing()
            if c.metrics_listen:
                collector = AgentCollector(self, list(c.env_labels) + list(c.static_labels),
                                           dcgm=c.dcgm_metrics, pid_label=c.pid_label)  # fmt: skip
                self._stop_metrics, self.metrics_port = serve_metrics(
                    c.metrics_listen, collector, live=self.live, ready=self.ready
                )
            self._start_senders()
        except BaseException:
            self.close()
            raise
        replay = sum(1 for _ in self.spool.iter_all())
        dests = (
            ", ".join(f"{s.dest.name} {s.dest.url}" for s in self.senders) or "none (spool only)"
        )
        self.say(
            f"started: period {c.period:g} s, CPU {self.budget.rate_hz} Hz (budget "
            f"{c.cpu_budget * 100:g}% of a core), spool {c.spool} ({replay} entries to send), "
            f"destinations: {dests}"
            + (
                f", /metrics on {c.metrics_listen.rpartition(':')[0]}:{self.metrics_port}"
                if c.metrics_listen
                else ""
            )
            + (f", API on {self.api.address}" if self.api else "")
        )

    def _start_profiler(self) -> None:
        why = unavailable_reason()
        if why:
            self.say(f"no continuous profiles: {why}")
            return
        profiler = ContinuousProfiler(self.identities, self.budget.rate_hz, self.config.cuda)
        try:
            profiler.start()
        except BpfError as e:
            profiler.close()
            self.say(f"no continuous profiles: the kernel refused the sampler ({e})")
            return
        self.profiler = profiler
        for note in profiler.notes:
            self.say(note)
        if not self.budget.bpf_measured:
            self.say(
                "the kernel's BPF statistics are unavailable: "
                "the CPU budget counts the agent's own time only"
            )

    def _start_nvml(self) -> None:
        if not self.config.nvml:
            return
        nvml, why = Nvml.open()
        if nvml is None:
            self.say(f"no GPU telemetry ({why}); CPU-only")
            return
        self.nvml = nvml
        holders = None
        socket_path = self.config.pod_resources_socket
        if socket_path:  # asked while its socket exists (the kubelet may start later)
            self.pod_resources = PodResources(socket_path)
            holders = self.pod_resources.holders
        self.telemetry = Telemetry(
            nvml, self.identities.workload_labels, self.identities.host, holders=holders
        )
        names = ", ".join(f"{s['name']}" for s in nvml.static)
        self.say(
            f"GPU telemetry through NVML (driver {nvml.driver or '?'}): "
            f"{len(nvml.static)} GPUs: {names}"
        )
        if self.pod_resources is not None and self.pod_resources.available():
            found = self.pod_resources.holders()
            self.say(
                self.pod_resources.error
                or f"GPU assignments from the kubelet ({socket_path}): "
                f"{len(found)} GPUs held by pods"
            )

    def _start_tracing(self) -> None:
        c = self.config
        self.fabric = KinetoFabric(c.kineto_abstract, c.kineto_socket_dirs, netns=c.kineto_netns)
        self.fabric.start()
        for e in self.fabric.errors:
            self.say(e)
        upload = self._upload_trace if c.server.url else None
        self.traces = TraceManager(
            self.fabric,
            self.identities,
            c.trace_dir,
            c.trace_max_duration_ms,
            c.trace_timeout,
            upload,
        )
        self.snapshots = SnapshotManager(self.identities, c.trace_dir, upload=upload)
        try:
            self.api = Api(
                self.traces,
                self.status,
                socket_path=c.api_socket if not c.api_listen else "",
                listen=c.api_listen,
                token=c.api_token,
                snapshots=self.snapshots,
            )
        except OSError as e:
            where = c.api_listen or c.api_socket
            self.say(f"no API (aiflame trace) on {where}: {e.strerror or e}")

    def _start_senders(self) -> None:
        c = self.config
        if c.server.url:
            r = c.server
            dest = Destination("server", r.url, token=r.token, basic_user=r.user,
                               basic_password=r.password, tenant=r.tenant,
                               ca_file=r.ca_file)  # fmt: skip
            self.senders.append(Sender(self.spool, dest, self.stop_event))
        if c.pyroscope.url:
            p = c.pyroscope
            dest = Destination("pyroscope", p.url, kinds=frozenset({"profile"}), api=p.api,
                               token=p.token, basic_user=p.user, basic_password=p.password,
                               tenant=p.tenant, ca_file=p.ca_file)  # fmt: skip
            self.senders.append(Sender(self.spool, dest, self.stop_event))
        if c.otlp.url:
            o = c.otlp
            dest = Destination("otlp", otlp_endpoint(o.url), kinds=frozenset({"profile"}),
                               api="otlp", token=o.token, tenant=o.tenant, ca_file=o.ca_file,
                               extra_headers=dict(o.headers))  # fmt: skip
            self.senders.append(Sender(self.spool, dest, self.stop_event))
        for s in self.senders:
            s.start()
        if c.server.url:
            threading.Thread(target=self._heartbeats, name="aiflame-heartbeat", daemon=True).start()

    # -- the loop ---------------------------------------------------------------------------
    def run(self, duration: float | None = None) -> None:
        """Until SIGTERM/SIGINT (or ``duration`` seconds), then :meth:`close`."""
        c = self.config
        t0 = time.monotonic()
        next_cut = t0 + c.period
        next_poll = t0 if self.telemetry is not None else float("inf")
        try:
            while not self.stop_event.is_set():
                now = self._turned = time.monotonic()
                if duration is not None and now - t0 >= duration:
                    break
                if self.telemetry is not None and now >= next_poll:
                    with contextlib.suppress(Exception):
                        self.telemetry.poll()
                    next_poll = now + c.telemetry_interval
                if now >= next_cut:
                    try:
                        self.cut_period()
                    except Exception as e:  # one bad period must not end the agent
                        self._failed_period(e)
                    next_cut += c.period
                    if next_cut < time.monotonic():  # a period that overran: start afresh
                        next_cut = time.monotonic() + c.period
                wait = max(0.01, min(next_cut, next_poll) - time.monotonic())
                if self.profiler is not None:
                    self.profiler.tick(min(wait, TICK_S))
                else:
                    self.stop_event.wait(min(wait, 0.5))
        finally:
            self.close()

    def cut_period(self) -> None:
        """Cut profiles and telemetry, spool them, adjust the rate."""
        now = time.monotonic()
        wall = now - self._period_start
        self._period_start = now
        if self.profiler is not None:
            for cp in self.profiler.cut():
                self._spool_profile(cp)
            self.spool.sync()  # the period's profiles: synced and recorded at once
            for what, n in self.profiler.stats.lost.items():
                self.counters.drop(what, n)
            self.profiler.stats.lost = {}
        if self.telemetry is not None and self.config.server.url:
            with contextlib.suppress(Exception):
                doc = self.telemetry.cut()
                meta = {"kind": "telemetry", "id": doc["batch_id"], "samples": 0}
                self.spool.put("telemetry.json.gz", encode_document(doc), meta, queues=["server"])
        elif self.telemetry is not None:
            with contextlib.suppress(Exception):
                self.telemetry.cut()
        cost = self.budget.measure(wall, self.profiler.program_fds() if self.profiler else [])
        rate = self.budget.next_rate(cost)
        if self.profiler is not None:
            if rate != self.profiler.rate_hz:
                self.say(
                    f"CPU sampling at {rate} Hz: {self.budget.note}"
                    if self.budget.note
                    else f"CPU sampling at {rate} Hz again"
                )
            self.profiler.set_rate(rate, self.budget.note)

    def _last_cut(self) -> str:
        """Cut and spool the period in progress (it is not lost); says how that went."""
        dropped = self.spool.stats.dropped_entries
        try:
            self.cut_period()
        except Exception as e:
            return f"the last period lost ({type(e).__name__}: {e})"
        lost = self.spool.stats.dropped_entries - dropped
        if self.spool.stats.write_error:
            return f"the last period not all spooled ({self.spool.stats.write_error})"
        if lost:
            return f"the last period spooled, {lost} older entries dropped to make room"
        return "the last period spooled"

    def _failed_period(self, e: Exception) -> None:
        self.failed_periods += 1
        if self.failed_periods <= 3 or self.failed_periods % 100 == 0:
            self.say(f"a period could not be cut ({type(e).__name__}: {e}); going on")

    def _spool_profile(self, cp) -> None:
        data = render_pprof(cp.profile)
        meta = {
            "kind": "profile",
            "profile_type": cp.kind,
            "labels": cp.labels,
            "samples": cp.samples if cp.kind == PROCESS_CPU else 0,
            "events": cp.samples,
            "start": cp.profile.meta.get("time_nanos", 0) / 1e9,  # type: ignore[operator]
            "duration": cp.profile.meta.get("duration_nanos", 0) / 1e9,  # type: ignore[operator]
            "rate_hz": cp.rate_hz,
        }
        self.spool.put("pb.gz", data, meta, sync=False)
        if cp.kind == PROCESS_CPU:
            with self.counters.lock:
                self.counters.profile_samples += cp.samples
        self.counters.profiles_cut += 1

    def _upload_trace(self, data: bytes, meta: dict[str, object]) -> None:
        """Spool a trace or a memory snapshot (``ext`` in ``meta``) for the server."""
        meta = dict(meta)
        ext = str(meta.pop("ext", "trace.json.gz"))
        self.spool.put(ext, data, {**meta, "samples": 0}, queues=["server"])

    # -- the server's side ------------------------------------------------------------------
    def _heartbeats(self) -> None:
        c = self.config
        client = HttpClient(c.server.url, c.server.ca_file, timeout=10.0)
        dest = self.senders[0].dest
        while not self.stop_event.wait(c.period):
            body = json.dumps(
                {
                    "host": self.identities.host,
                    "agent_version": __version__,
                    "started": self.started,
                    "gpus": [
                        {"index": i, "uuid": s["uuid"], "name": s["name"]}
                        for i, s in enumerate(self.nvml.static if self.nvml else [])
                    ],
                    "spool_bytes": self.spool.bytes,
                    "sampling_rate_hz": self.budget.rate_hz,
                }
            ).encode()
            headers = {**dest.headers(), "Content-Type": "application/json"}
            try:
                status, h, answer = client.request("POST", HEARTBEAT_PATH, body, headers)
                check(status, h, answer)
            except Exception:  # the server is down or refuses: the next beat will tell
                continue
            self._server_requests(answer)
        client.close()

    def _server_requests(self, answer: bytes) -> None:
        try:
            requests = json.loads(answer or b"{}").get("requests") or []
        except (ValueError, AttributeError):
            return
        for r in requests[:8]:
            if not isinstance(r, dict) or self.traces is None:
                continue
            selector = r.get("selector") or {}
            body: dict[str, object] = {
                "pids": selector.get("pids") or [],
                "job_id": selector.get("job_id") or "",
                "all": bool(selector.get("all")),
                "upload": True,
                "request_id": str(r.get("request_id") or ""),
            }
            kind = r.get("kind") or "trace"
            if kind == "trace":
                body.update(
                    duration_ms=r.get("duration_ms"),
                    iterations=r.get("iterations"),
                    start_time=r.get("start_time"),
                )
            elif kind != "memory-snapshot":
                self.say(f"server request {body['request_id']}: unknown kind {str(kind)[:40]!r}")
                continue
            args = (str(kind), body)
            threading.Thread(target=self._run_request, args=args, daemon=True).start()

    def _run_request(self, kind: str, body: dict[str, object]) -> None:
        assert self.traces is not None and self.snapshots is not None
        rid = body.get("request_id") or "?"
        try:
            if kind == "memory-snapshot":
                result = self.snapshots.run(SnapshotRequest.from_json(body))
            else:
                result = self.traces.run(
                    TraceRequest.from_json(body, self.config.trace_max_duration_ms)
                )
        except Exception as e:  # the server's request could not be served: say why, go on
            self.say(f"server request {rid}: {e}")
            return
        failed = result.get("failed")
        for f in failed if isinstance(failed, list) else []:
            self.say(f"server request {rid}: PID {f['pid']}: {f['why']}")

    # -- introspection ----------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        cost = self.budget.last
        return {
            "version": __version__,
            "host": self.identities.host,
            "uptime_s": round(time.time() - self.started, 1),
            "sampling_rate_hz": self.budget.rate_hz,
            "cpu_share": round(cost.share, 5) if cost else None,
            "spool_bytes": self.spool.bytes,
            "spool_entries": sum(1 for _ in self.spool.iter_all()),
            "gpus": [dict(s) for s in self.nvml.static] if self.nvml else [],
            "processes_followed": len(self.profiler._seen) if self.profiler else 0,
            "kineto_processes": sorted(self.fabric.processes()) if self.fabric else [],
            "kineto_namespaces": self.fabric.stats.namespaces if self.fabric else 0,
            "destinations": {
                s.dest.name: {
                    "pushed": dict(s.stats.pushed),
                    "failures": dict(s.stats.failures),
                    "last_error": s.stats.last_error,
                }
                for s in self.senders
            },
        }

    def live(self) -> str:
        """ "" while the main loop turns (it waits at most a tick, a cut at most a period)."""
        stuck = time.monotonic() - self._turned
        limit = max(60.0, 3 * self.config.period)
        return f"the main loop has not turned for {stuck:.0f} s" if stuck > limit else ""

    def ready(self) -> str:
        """ "" while what the agent cuts can be spooled."""
        error = self.spool.stats.write_error
        return f"the spool cannot be written: {error}" if error else ""

    def dropped_events(self) -> dict[str, int]:
        out = dict(self.counters.dropped_events or {})
        for kind, n in self.spool.stats.dropped_by_kind.items():
            out[f"spool {kind}"] = out.get(f"spool {kind}", 0) + n
        return out

    # -- stop -------------------------------------------------------------------------------
    def request_stop(self, *_: object) -> None:
        self.stop_event.set()

    def close(self) -> None:
        """Flush the current period, detach, stop every thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.profiler is not None:
            self.stopped_line = self._last_cut()
            self.profiler.close()
            self.stopped_line = f"stopped: every BPF program detached, {self.stopped_line}"
        self.stop_event.set()
        for sender in self.senders:
            sender.join(timeout=2)
        deadline = time.monotonic() + SHUTDOWN_PUSH_S
        for sender in self.senders:  # what can still go out in a few seconds
            while self.spool.pending(sender.dest.name) and time.monotonic() < deadline:
                try:
                    if not sender.send_some():
                        break
                except Retry:
                    break
            sender.client.close()
        if self.api is not None:
            self.api.close()
        if self.fabric is not None:
            self.fabric.close()
        if self._stop_metrics is not None:
            self._stop_metrics()
        if self.nvml is not None:
            self.nvml.close()
        if self.pod_resources is not None:
            self.pod_resources.close()
        self.budget.close()


def run_agent(config: AgentConfig, duration: float | None = None) -> int:
    agent = Agent(config)
    old = {s: signal.signal(s, agent.request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        agent.start()
        agent.run(duration)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    agent.say(agent.stopped_line)
    return 0
