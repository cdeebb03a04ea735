"""Cut a window out of a PyTorch profiler (Kineto) trace, to keep test data small.

    python tools/trim_trace.py IN.json.gz OUT.json.gz --window START END [--drop-key KEY]

START and END are microseconds from the first ``X`` event. Kept: every metadata (``M``)
event; CPU-side events that start in the window; GPU activity (kernels, copies, memsets)
and flow arrows that start in the window or carry the correlation id of a kept CPU event
(so activity launched before the window stays, unlinked, as in a real trace); the other
top-level keys unchanged (but those named by ``--drop-key``), plus ``"trimmedFrom"``. One
event per line, gzip level 9. Standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

GPU = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def trim(src: Path, dst: Path, start: float, end: float, drop: list[str]) -> tuple[int, int]:
    with gzip.open(src, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    t0 = min(e["ts"] for e in events if e.get("ph") == "X" and "ts" in e)
    lo, hi = t0 + start, t0 + end

    def inside(e: dict) -> bool:
        return "ts" in e and lo <= float(e["ts"]) < hi

    kept_cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") not in GPU and inside(e)]
    corr = {(e.get("args") or {}).get("correlation") for e in kept_cpu} - {None}
    out = [e for e in events if e.get("ph") == "M"] + kept_cpu
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU:
            if inside(e) or (e.get("args") or {}).get("correlation") in corr:
                out.append(e)
        elif e.get("ph") in ("s", "f") and (inside(e) or e.get("id") in corr):
            out.append(e)
    body = {k: v for k, v in trace.items() if k != "traceEvents" and k not in drop}
    body["trimmedFrom"] = src.name
    lines = ",\n".join(json.dumps(e, separators=(",", ":")) for e in out)
    head = json.dumps(body)[:-1]
    text = head + (", " if body else "") + '"traceEvents": [\n' + lines + "\n]}\n"
    with gzip.open(dst, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(text)
    return len(events), len(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--window", nargs=2, type=float, metavar=("START", "END"), required=True)
    ap.add_argument("--drop-key", action="append", default=[], metavar="KEY")
    a = ap.parse_args()
    before, after = trim(a.src, a.dst, a.window[0], a.window[1], a.drop_key)
    print(f"{a.dst}: {after:,} of {before:,} events, {a.dst.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
