"""Build a PyTorch memory snapshot N times larger than the real one, for the scale benchmark.

    python benchmarks/gen_big_snapshot.py [--scale 100] [--out PATH]

The input is the real snapshot of tests/data/memory/ (a transformer at inference: 98
segments, 3,840 allocator events). Its allocator trace is replicated ``--scale`` times, as
one longer recording of the same loop would be: copy ``k`` is shifted in time by ``k`` spans
of the trace and in address by ``(scale - 1 - k)`` strides above the highest address the
snapshot uses, so copies never share an address and the last copy has the original
addresses (the segments at the end of the snapshot are those of the original, and only the
last copy's allocations can still be live in them). Each copy has its own frame lists, as a
longer recording has; the frame dicts inside them are shared, as PyTorch's pickler shares
equal frames. Every allocation of the real trace is freed inside the trace, so each copy
replays like the original: the same peak, ``scale`` times the allocations.

Written with pickle protocol 4 (what ``_dump_snapshot`` writes) to
``bench-data/memory/medium_128_x{scale}.pickle`` (git-ignored; kept between runs), or to
``--out``. The real snapshot is also written uncompressed beside it, as
``medium_128.pickle``.
"""

from __future__ import annotations

import argparse
import gzip
import pickle
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"
BENCH = ROOT / "bench-data" / "memory"


def real_snapshot() -> Path:
    """The real snapshot as a plain pickle (what users pass to both tools)."""
    out = BENCH / "medium_128.pickle"
    if not out.exists():
        BENCH.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(SNAPSHOT.read_bytes()))
    return out


def _read(path: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "src"))
    from aiflame.sources.torch_memory.importer import PlainDataUnpickler  # never runs code

    with open(path, "rb") as f:
        data = PlainDataUnpickler(f).load()
    assert isinstance(data, dict)
    return data


def replicate(data: dict[str, Any], scale: int) -> dict[str, Any]:
    """``data`` with its first device's trace replicated ``scale`` times (in place)."""
    trace = data["device_traces"][0]
    span = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    top = max(int(s["address"]) + int(s["total_size"]) for s in data["segments"])
    top = max([top] + [int(e.get("addr", 0)) + int(e.get("size", 0)) for e in trace])
    stride = 1 << max(top.bit_length(), 1)  # a power of two above every address used
    events = []
    for k in range(scale):
        shift = (scale - 1 - k) * stride
        lists: dict[int, list] = {}  # events that shared a frame list share its copy
        for e in trace:
            c = dict(e, time_us=e["time_us"] + k * span)
            if "addr" in c:
                c["addr"] = int(c["addr"]) + shift
            key = id(e["frames"])
            if key not in lists:
                lists[key] = list(e["frames"])
            c["frames"] = lists[key]
            events.append(c)
    data["device_traces"][0] = events
    return data


def big_snapshot(scale: int, out: Path | None = None) -> Path:
    """The snapshot ``scale`` times larger, built once."""
    out = out or BENCH / f"medium_128_x{scale}.pickle"
    if out.exists():
        return out
    data = replicate(_read(real_snapshot()), scale)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    with open(tmp, "wb") as f:
        pickle.dump(data, f, protocol=4)
    tmp.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", type=int, default=100)
    ap.add_argument("--out", type=Path, help="where to write (default: bench-data/memory/)")
    args = ap.parse_args()
    path = big_snapshot(args.scale, args.out)
    print(f"{path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
