"""OpenTelemetry profiles in aiflame: what OTLP costs beside the Pyroscope push of the same
profiles (figures in docs/benchmarks.md, "OTLP profiles").

    python benchmarks/bench_otlp.py [--processes 50] [--repeat 5]

The same real stacks (the eBPF recording of a PyTorch training loop, tests/data/server), cut
among P processes, are encoded both ways: one OTLP ``ExportProfilesServiceRequest`` in the
OpenTelemetry eBPF profiler's shape (one dictionary for all, samples as timestamps;
tests/server/otlp_payloads.py) and one Pyroscope ``PushRequest`` of P gzipped pprofs (as
aiflame's agent sends them). Measured in this process, best of ``--repeat``:

- server: decoding into the store's rows (``ingest/otlp.py`` against ``ingest/push.py``'s
  ``push_items``, its dictionary cache cold and warm), per profile;
- wire: bytes per profile, gzipped as the senders send them;
- agent: turning spooled pprofs into one OTLP request (``proto/otlp_export.py``), per profile.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "server"))

import otlp_payloads  # noqa: E402
import payloads  # noqa: E402

from aiflame.model import Profile, ProfileBuilder  # noqa: E402
from aiflame.proto.otlp_export import Item, export_request  # noqa: E402
from aiflame.server.ingest import otlp  # noqa: E402
from aiflame.server.ingest.dictionaries import DictionaryCache  # noqa: E402
from aiflame.server.ingest.hashing import StringHashes  # noqa: E402
from aiflame.server.ingest.push import Limits, push_items  # noqa: E402


def process_profile(rec: Profile, keep: np.ndarray, time_ns: int) -> Profile:
    """The samples ``keep`` of the recording as a profile of their own frames only (what an
    agent writes for one process)."""
    b = ProfileBuilder(rec.sample_types)
    fr, S = rec.frames, rec.strings
    frame_of: dict[int, int] = {}
    for i in np.flatnonzero(keep).tolist():
        sid = int(rec.sample_stack[i])
        ids = []
        for f in rec.stacks.frames_of(sid) if sid >= 0 else []:
            if f not in frame_of:
                frame_of[f] = b.frame(
                    S[fr.name[f]], fr.kind[f], S[fr.file[f]], fr.line[f], S[fr.module[f]]
                )
            ids.append(frame_of[f])
        b.add(b.stack(ids), rec.values[i].tolist())
    b.meta.update(rec.meta, time_nanos=time_ns, duration_nanos=10**10)
    return b.build()


def best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    P = a.processes
    now = time.time_ns()
    procs = [otlp_payloads.Process(1000 + i) for i in range(P)]
    req = otlp_payloads.export(procs, now)
    body = req.SerializeToString()
    # The same samples per process as pprofs (the recording's rows split the same way).
    rec = payloads.recording()
    pprofs = [payloads.pprof_bytes(process_profile(rec, np.arange(len(rec)) % P == i, now))
              for i in range(P)]  # fmt: skip
    push = payloads.push_request(
        [({"__name__": "process_cpu", "service_name": f"s{i}"}, [(raw, f"id-{i}")])
         for i, raw in enumerate(pprofs)]
    )  # fmt: skip
    limits = Limits()
    recv = int(time.time() * 1000)

    def decode_otlp() -> None:
        d = otlp.decode(
            otlp.parse(body, "proto"), tenant="t", received_ms=recv, limits=limits,
            hashes=StringHashes(), min_time_ms=0,
        )  # fmt: skip
        assert len(d.items) == P and not d.rejected

    from aiflame.proto.pyroscope.push.v1 import push_pb2

    def decode_push(cache: DictionaryCache | None) -> None:
        msg = push_pb2.PushRequest.FromString(push)
        items = push_items(
            msg, tenant="t", received_ms=recv, limits=limits, strings=StringHashes(),
            min_time_ms=0, dictionaries=cache,
        )  # fmt: skip
        assert len(items) == P

    warm = DictionaryCache()
    decode_push(warm)
    t_otlp = best(decode_otlp, a.repeat)
    t_push_cold = best(lambda: decode_push(DictionaryCache()), a.repeat)
    t_push_warm = best(lambda: decode_push(warm), a.repeat)
    spooled = [
        Item(raw, {"service_name": f"s{i}", "pid": str(i)}, f"e-{i}")
        for i, raw in enumerate(pprofs)
    ]
    t_export = best(lambda: export_request(spooled, "bench"), a.repeat)
    agent_body = export_request(spooled, "bench").SerializeToString()
    samples = otlp_payloads.total_events(req)
    print(f"{P} processes, {samples:,} sampled events, {len(rec):,} stacks of the recording")
    print("server, decoding into rows (ms per profile):")
    print(f"  OTLP (eBPF profiler's shape)      {t_otlp * 1e3 / P:8.3f}")
    print(f"  Pyroscope push, cold dictionary  {t_push_cold * 1e3 / P:8.3f}")
    print(f"  Pyroscope push, warm dictionary  {t_push_warm * 1e3 / P:8.3f}")
    print(
        "  ratio OTLP / push cold, warm     "
        f"{t_otlp / t_push_cold:8.2f} {t_otlp / t_push_warm:6.2f}"
    )
    print("wire, gzipped bytes per profile:")
    print(f"  OTLP request (timestamps)        {len(gzip.compress(body)) / P:10.0f}")
    print(f"  OTLP request (the agent's)       {len(gzip.compress(agent_body)) / P:10.0f}")
    print(f"  Pyroscope push (gzipped pprofs)  {len(push) / P:10.0f}")
    print(f"agent, spooled pprofs -> OTLP request: {t_export * 1e3 / P:.3f} ms per profile")


if __name__ == "__main__":
    main()
