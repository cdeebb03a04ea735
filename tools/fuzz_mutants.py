"""Mutants of real inputs, for tools/fuzz_commands.py.

Each mutator takes a random generator and the seed's bytes and returns (name, bytes) of a
mutant: generic damage (bit flips, truncation, garbage), then what each format invites:
numbers at the edges (NaN, Infinity, 1e309, 2**64, 400 digits), long lines and names,
deep nesting, hostile names (escape sequences, rich markup, bidi controls, HTML), invalid
UTF-8, JSON values of the wrong type, GPU-only and empty traces, corrupt gzip and gzip
bombs, damaged and half-valid SQLite, opcode-level pickle mutations and pickle bombs, deep
stacks and counts that overflow.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import pickletools
import random
import re
import sqlite3
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

# Real inputs of every format (small ones: a mutant is run many times).
SEEDS: dict[str, list[str]] = {
    "folded": [
        "speedscope/stackcollapse/simple.txt",
        "speedscope/stackcollapse/recursion.txt",
        "speedscope/stackcollapse/simple-utf16-le.txt",
        "diff/before.txt",
        "html/perf-iperf-stacks-pidtid-01-collapsed-all.txt",
    ],
    "perf-script": [
        "perf/flamegraph/inputs/perf-funcab-pid-01.txt.gz",
        "perf/flamegraph/inputs/perf-java-stacks-02.txt.gz",
        "perf/flamegraph/inputs/perf-cycles-instructions-01.txt.gz",
        "perf/flamegraph/inputs/perf-js-stacks-01.txt.gz",
    ],
    "pprof": [
        "pprof/google_pprof/gobench.cpu.pb.gz",
        "pprof/google_pprof/cppbench.heap.pb.gz",
        "pprof/google_pprof/java.contention.pb.gz",
        "pprof/go_runtime/cpu.pb.gz",
    ],
    "speedscope": [
        "speedscope/profiles/simple-sampled-0.1.2.speedscope.json",
        "speedscope/profiles/simple-evented-0.0.1.speedscope.json",
        "speedscope/profiles/two-sampled-0.6.0.speedscope.json",
        "record/pyspy-gil.speedscope.json",
    ],
    "kineto": [
        "kineto/tracelens/torch_compile_triton/trace.json.gz",
        "kineto/hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz",
        "kineto/tracelens/mi210/gpu_only_trace.json.gz",
        "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    ],
    "trace-events": [
        "trace_events/simple.json",
        "trace_events/multiprocess.json",
        "trace_events/matching-x.json",
        "trace_events/out-of-order.json",
    ],
    "nsys": ["nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"],
    "torch-memory": ["memory/medium_128_inference_memory_snapshot.pickle.gz"],
    "austin": [
        "austin/austin3_wall.austin",
        "austin/austin37_full.austin.gz",
        "austin/austin1_wall.austin",
    ],
    "rocprofv3-pc": [
        "gpu_instructions/rocprofiler_sdk/pc_sampling_host_trap.csv",
        "gpu_instructions/rocprofiler_sdk/pc_sampling_stochastic_debug.csv",
    ],
    "iaprof": [
        "gpu_instructions/iaprof/flame.folded",
        "gpu_instructions/iaprof/record.tsv",
    ],
    "nsight-compute": ["gpu_instructions/nsight_compute/indexspaces-bb-a40.ncu-rep.gz"],
}

JSON_FORMATS = ("speedscope", "kineto", "trace-events")
TEXT_FORMATS = ("folded", "perf-script", "austin", "rocprofv3-pc", "iaprof", *JSON_FORMATS)

Mutator = Callable[[random.Random, bytes], bytes]

EDGE_NUMBERS = (
    "NaN", "-NaN", "Infinity", "-Infinity", "inf", "1e309", "-1e309", "1e308", "-1", "-0",
    "0", "1e-400", "18446744073709551616", "9223372036854775808", "-9223372036854775809",
    "9" * 400, "1.5", "0x10", "1_000", "340282366920938463463374607431768211456",
)  # fmt: skip
HOSTILE_NAMES = (
    "\x1b]0;owned by a trace\x07",
    "\x1b[2J\x1b[H",
    "\x1b[31mred\x1b[0m",
    "[bold red]markup[/bold red]",
    "[link=http://x]click[/link]",
    "gnp\u202eexe.",
    "\u2066isolate\u2069\u200f",
    "</script><script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "line\nbreak",
    "carriage\rreturn",
    "nul\x00byte",
    "semi;colon;s",
    '"quote\\back',
    "\x85\x9b31m",
    "\u2028sep\u2029",
)
LONG = 100_000


def _long_text(rng: random.Random) -> str:
    unit = rng.choice([" ", "a", "a ", "(", " (", "x (", ";", ":", "1", "1 ", "->", ".(a) "])
    return unit * (LONG // len(unit))


# -- generic byte damage ----------------------------------------------------------------


def bit_flips(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 16])):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def byte_sets(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice([1, 3, 10])):
        b[rng.randrange(len(b))] = rng.choice([0, 0xFF, 0x80, 0x7F, 0x22, 0x0A, 0x5B, 0x7B, 0x3B])
    return bytes(b)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def delete_chunk(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data))
    return data[:i] + data[i + rng.randint(1, 4096) :]


def duplicate_chunk(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.randint(1, 4096))
    return data[:j] + data[i:j] * rng.choice([1, 2, 50]) + data[j:]


def insert_garbage(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + os.urandom(rng.choice([1, 16, 1024])) + data[i:]


GENERIC: list[Mutator] = [bit_flips, byte_sets, truncate, delete_chunk, duplicate_chunk,
                          insert_garbage]  # fmt: skip


# -- text -------------------------------------------------------------------------------

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def edge_numbers(rng: random.Random, data: bytes) -> bytes:
    spans = [m.span() for m in _NUMBER.finditer(data, 0, min(len(data), 1 << 20))]
    if not spans:
        return data
    out = bytearray(data)
    for a, b in sorted(rng.sample(spans, min(len(spans), rng.choice([1, 3, 30]))), reverse=True):
        out[a:b] = rng.choice(EDGE_NUMBERS).encode()
    return bytes(out)


def long_line(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    if rng.random() < 0.5:
        lines.insert(i, _long_text(rng).encode())
    else:
        lines[i] = lines[i] + _long_text(rng).encode()
    return b"\n".join(lines)


def long_name(rng: random.Random, data: bytes) -> bytes:
    """A word of the input (a frame name, mostly) made 100,000 characters long."""
    words = [m.span() for m in re.finditer(rb"[A-Za-z_][A-Za-z0-9_:.]{2,}", data[: 1 << 20])]
    if not words:
        return data
    a, b = rng.choice(words)
    return data[:a] + _long_text(rng).encode() + data[b:]


def hostile_name(rng: random.Random, data: bytes) -> bytes:
    words = [m.span() for m in re.finditer(rb"[A-Za-z_][A-Za-z0-9_]{2,}", data[: 1 << 20])]
    if not words:
        return data
    out = data
    for a, b in sorted(rng.sample(words, min(len(words), rng.choice([1, 5, 50]))), reverse=True):
        name = rng.choice(HOSTILE_NAMES)
        out = out[:a] + name.encode("utf-8", "surrogatepass") + out[b:]
    return out


def invalid_utf8(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice([1, 10])):
        i = rng.randrange(len(out) + 1)
        out[i:i] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80"])
    return bytes(out)


def deep_stack(rng: random.Random, data: bytes) -> bytes:
    """A folded or perf stack of 40,000 frames (more than an int16 depth)."""
    depth = rng.choice([33_000, 40_000, 70_000])
    if data.lstrip()[:1] in (b"{", b"["):
        return data
    if b" cycles:" in data or b"cpu-clock" in data or re.search(rb"\d+\.\d+:", data[:4096]):
        frames = b"".join(b"\t    %x f%d (/lib/x.so)\n" % (i, i % 7) for i in range(depth))
        return b"py 1/1 [000] 1.000000: 1 cycles:\n" + frames + b"\n" + data
    return b";".join(b"f%d" % (i % 5) for i in range(depth)) + b" 7\n" + data


def overflowing_counts(rng: random.Random, data: bytes) -> bytes:
    big = b"17" + b"0" * 307  # 1.7e308: two of them add up to infinity
    return data + b"\nx;y " + big + b"\nx;z " + big + b"\n"


TEXT: list[Mutator] = [edge_numbers, long_line, long_name, hostile_name, invalid_utf8,
                       deep_stack, overflowing_counts]  # fmt: skip


# -- JSON -------------------------------------------------------------------------------


def _json_paths(doc: object, limit: int = 20000) -> list[tuple[object, object]]:
    """(container, key) of values in ``doc``, breadth first, at most ``limit``."""
    out: list[tuple[object, object]] = []
    todo = [doc]
    while todo and len(out) < limit:
        x = todo.pop(0)
        items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
        for k, v in items:
            out.append((x, k))
            if isinstance(v, dict | list):
                todo.append(v)
    return out


def _load_json(data: bytes) -> object | None:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _odd_value(rng: random.Random) -> object:
    return rng.choice([
        None, True, "", "x" * 1000, rng.choice(HOSTILE_NAMES), [], [1, 2], {}, {"a": [1]},
        float("nan"), float("inf"), -float("inf"), 2**64, -(2**70), 10**400, 1e308, -1, 0,
        1.5, "NaN", "12", [["nested"]],
    ])  # fmt: skip


def json_type_swap(rng: random.Random, data: bytes) -> bytes:
    doc = _load_json(data)
    if doc is None:
        return data
    paths = _json_paths(doc)
    for parent, key in rng.sample(paths, min(len(paths), rng.choice([1, 3, 20]))):
        parent[key] = _odd_value(rng)  # type: ignore[index]
    return json.dumps(doc).encode()


def json_delete_keys(rng: random.Random, data: bytes) -> bytes:
    doc = _load_json(data)
    if doc is None:
        return data
    paths = [(p, k) for p, k in _json_paths(doc) if isinstance(p, dict)]
    for parent, key in rng.sample(paths, min(len(paths), rng.choice([1, 5, 50]))):
        parent.pop(key, None)  # type: ignore[union-attr]
    return json.dumps(doc).encode()


def json_deep_nesting(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice([1000, 100_000])
    doc = _load_json(data)
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    nested = opener * depth + b"1" + closer * depth
    if isinstance(doc, dict) and rng.random() < 0.5:
        key = rng.choice(list(doc) or ["x"])
        text = json.dumps(doc).encode()
        marker = json.dumps(key).encode() + b": "
        i = text.find(marker)
        if i >= 0:
            j = i + len(marker)
            return text[:j] + nested + b', "_": ' + text[j:]
    i = rng.randrange(len(data) + 1)
    return data[:i] + nested + data[i:]


def json_numbers_at_edges(rng: random.Random, data: bytes) -> bytes:
    """ts, dur and other numbers as NaN / Infinity tokens, 1e300, 2**70, negative."""
    doc = _load_json(data)
    if doc is None:
        return edge_numbers(rng, data)
    paths = [(p, k) for p, k in _json_paths(doc) if isinstance(p[k], int | float)]  # type: ignore[index]
    for parent, key in rng.sample(paths, min(len(paths), rng.choice([1, 5, 100]))):
        parent[key] = rng.choice(  # type: ignore[index]
            [float("nan"), float("inf"), 1e300, -1e300, 2**70, -(2**70), -1, 10**30, 1e-320]
        )
    return json.dumps(doc).encode()  # allow_nan: writes the NaN / Infinity tokens


def trace_variants(rng: random.Random, data: bytes) -> bytes:
    """Chrome traces: GPU events only, CPU only, no events, huge dur, cat as a list."""
    doc = _load_json(data)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return data
    kind = rng.randrange(6)
    gpu = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy")
    if kind == 0:
        kept = [e for e in events if isinstance(e, dict) and e.get("cat") in gpu]
        events[:] = kept[: rng.choice([2, len(kept)])]
    elif kind == 1:
        events[:] = [e for e in events if isinstance(e, dict) and e.get("cat") not in gpu]
    elif kind == 2:
        events[:] = []
    elif kind == 3:
        for e in rng.sample(events, min(len(events), 10)):
            if isinstance(e, dict):
                e["dur"] = rng.choice([1e300, 2**70, -5, 10**20])
    elif kind == 4:
        for e in rng.sample(events, min(len(events), 10)):
            if isinstance(e, dict):
                e["cat"] = ["kernel", 1]
    else:
        events[:] = events * rng.choice([2, 20])
    return json.dumps(doc).encode()


JSON: list[Mutator] = [json_type_swap, json_delete_keys, json_deep_nesting,
                       json_numbers_at_edges, trace_variants]  # fmt: skip


# -- gzip -------------------------------------------------------------------------------


def corrupt_gzip(rng: random.Random, data: bytes) -> bytes:
    gz = bytearray(data if data[:2] == b"\x1f\x8b" else gzip.compress(data, mtime=0))
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.choice([1, 4])):
            i = rng.randrange(10, len(gz))
            gz[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del gz[rng.randrange(10, len(gz)) :]
    elif kind == 2:
        gz += os.urandom(rng.choice([1, 8, 100]))
    else:
        gz[-8:-4] = os.urandom(4)  # CRC
    return bytes(gz)


def gzipped(rng: random.Random, data: bytes) -> bytes:
    return data if data[:2] == b"\x1f\x8b" else gzip.compress(data, mtime=0)


# -- SQLite -----------------------------------------------------------------------------


def _with_db(data: bytes, change: Callable[[sqlite3.Connection], None]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.sqlite")
        Path(path).write_bytes(data)
        conn = sqlite3.connect(path)
        try:
            change(conn)
            conn.commit()
        except sqlite3.Error:
            pass
        finally:
            conn.close()
        return Path(path).read_bytes()


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    return [r[0] for r in rows]


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


ODD_SQL_VALUES = ["text", b"\x00\xff", None, 2**63 - 1, -(2**63), 1e308, float("nan"), -1,
                  "x" * LONG]  # fmt: skip
_BUSY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds",
                "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS", "TARGET_INFO_GPU")  # fmt: skip


def sqlite_values(rng: random.Random, data: bytes) -> bytes:
    """Text, blobs, NULL, huge numbers in the columns nsys exports hold numbers in."""

    def change(conn: sqlite3.Connection) -> None:
        tables = [t for t in _tables(conn) if t in _BUSY_TABLES] or _tables(conn)
        for _ in range(rng.choice([1, 3])):
            table = rng.choice(tables)
            cols = _columns(conn, table)
            if not cols:
                continue
            col = rng.choice(cols)
            value = rng.choice([*ODD_SQL_VALUES, rng.choice(HOSTILE_NAMES)])
            where = rng.choice(["", " WHERE rowid % 7 = 0", " WHERE rowid = 1"])
            conn.execute(f'UPDATE "{table}" SET "{col}" = ?{where}', (value,))

    return _with_db(data, change)


def sqlite_schema(rng: random.Random, data: bytes) -> bytes:
    """A table emptied or dropped, a column dropped."""

    def change(conn: sqlite3.Connection) -> None:
        tables = [t for t in _tables(conn) if t in _BUSY_TABLES] or _tables(conn)
        table = rng.choice(tables)
        kind = rng.randrange(3)
        if kind == 0:
            conn.execute(f'DELETE FROM "{table}"')
        elif kind == 1:
            conn.execute(f'DROP TABLE "{table}"')
        else:
            cols = _columns(conn, table)
            if len(cols) > 1:
                conn.execute(f'ALTER TABLE "{table}" DROP COLUMN "{rng.choice(cols)}"')

    return _with_db(data, change)


def sqlite_pages(rng: random.Random, data: bytes) -> bytes:
    """Damage to the header, to pages, or a file cut at a page boundary."""
    b = bytearray(data)
    kind = rng.randrange(3)
    if kind == 0:
        for _ in range(rng.choice([1, 3])):
            b[rng.randrange(16, 100)] = rng.randrange(256)
    elif kind == 1:
        page = 4096
        for _ in range(rng.choice([1, 5])):
            i = rng.randrange(len(b) // page) * page
            b[i : i + rng.choice([16, page])] = os.urandom(rng.choice([16, page]))
    else:
        del b[rng.randrange(1, max(2, len(b) // 4096)) * 4096 :]
    return bytes(b)


SQLITE: list[Mutator] = [sqlite_values, sqlite_schema, sqlite_pages]


# -- pickles ----------------------------------------------------------------------------


def _ops(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each opcode of ``data`` (up to where it stops parsing)."""
    out: list[tuple[int, int]] = []
    starts = []
    try:
        for _, _, pos in pickletools.genops(data):
            starts.append(pos)
    except Exception:
        pass
    for a, b in zip(starts, [*starts[1:], len(data)], strict=True):
        out.append((a, b))
    return out


# A memo store at index 2**32-1, a memo fetch far away, a 1 TiB string, a 4 EiB frame.
_HUGE_ARGUMENTS = (
    b"r\xff\xff\xff\xff",
    b"j\xff\xff\xff\x7f",
    b"\x8d" + struct.pack("<Q", 1 << 40),
    b"\x95" + struct.pack("<Q", 1 << 62),
)


def pickle_opcodes(rng: random.Random, data: bytes) -> bytes:
    """Opcode-level damage: an opcode replaced, deleted, repeated; a memo index, a length
    or an argument changed; code asked for (GLOBAL os.system, REDUCE)."""
    data = _plain(data)
    ops = _ops(data)
    if not ops:
        return data
    out = bytearray(data)
    for _ in range(rng.choice([1, 2, 5])):
        a, b = rng.choice(ops)
        kind = rng.randrange(6)
        if b > len(out):
            continue
        if kind == 0:
            out[a] = rng.choice(b"}](ahjqrXB\x8c\x8d\x8e\x95\x94eus.tR\x93c2")
        elif kind == 1:
            del out[a:b]
        elif kind == 2:
            out[a:a] = out[a:b] * rng.choice([2, 100])
        elif kind == 3 and b - a > 1:
            for i in range(a + 1, b):
                out[i] = rng.choice([0, 0xFF, rng.randrange(256)])
        elif kind == 4:
            out[a:a] = b"cos\nsystem\n(S'true'\ntR"
        else:
            out[a:a] = rng.choice(_HUGE_ARGUMENTS)
        ops = _ops(bytes(out)) or ops
    return bytes(out)


def _plain(data: bytes) -> bytes:
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _snapshot(data: bytes) -> dict | None:
    sys.path.insert(0, str(ROOT / "src"))
    from aiflame.sources.torch_memory.importer import PlainDataUnpickler

    try:
        return PlainDataUnpickler(io.BytesIO(_plain(data))).load()
    except Exception:
        return None


def pickle_values(rng: random.Random, data: bytes) -> bytes:
    """The snapshot re-pickled with values at the edges: a frame line of 2**64, sizes of
    -1 or 2**70, odd states and actions, hostile frame names, NaN times."""
    snap = _snapshot(data)
    if not isinstance(snap, dict):
        return data
    frames = [f for s in snap.get("segments", []) for b in s.get("blocks", [])
              for h in b.get("history", []) or [b] for f in h.get("frames", []) or []]  # fmt: skip
    frames += [f for t in snap.get("device_traces", []) for e in t for f in e.get("frames", [])]
    for _ in range(rng.choice([1, 5, 50])):
        kind = rng.randrange(4)
        if kind == 0 and frames:
            f = rng.choice(frames)
            f[rng.choice(["line", "name", "filename"])] = rng.choice(
                [2**64, -1, float("nan"), rng.choice(HOSTILE_NAMES), None, "x" * LONG, [1]]
            )
        elif kind == 1 and snap.get("segments"):
            seg = rng.choice(snap["segments"])
            key = rng.choice(["total_size", "address", "device", "stream", "blocks"])
            seg[key] = _odd_value(rng)
        elif kind == 2 and snap.get("device_traces") and snap["device_traces"][0]:
            e = rng.choice(snap["device_traces"][0])
            key = rng.choice(["size", "addr", "time_us", "action", "stream", "frames"])
            e[key] = _odd_value(rng)
        else:
            snap[rng.choice(["segments", "device_traces"])] = _odd_value(rng)
    return pickle.dumps(snap, protocol=rng.choice([2, 4, 5]))


def pickle_bomb(rng: random.Random, data: bytes) -> bytes:
    """Kilobytes that unfold into billions: the same list or dict referenced again and
    again by the memo (BINGET), nested a few levels; a trace of one event repeated."""
    n, levels = rng.choice([(1000, 2), (300, 3), (100, 4), (30000, 1)])
    w = io.BytesIO()
    w.write(b"\x80\x04}\x94(\x8c\x08segments\x94]\x94")
    w.write(b"}\x94(\x8c\x0btotal_size\x94K\x01\x8c\x06blocks\x94]\x94(")
    w.write(b"}\x94(\x8c\x04size\x94K\x01\x8c\x05state\x94\x8c\x10active_allocated\x94u")
    memo = 9  # the block dict
    w.write(b"e\x94")  # blocks list: memo 10
    for level in range(levels):
        w.write(b"]\x94(")
        w.write((b"j" + struct.pack("<I", memo)) * n)
        w.write(b"e")
        memo = memo + 2 + level
        w.write(b"\x94")
    w.write(b"u")  # segment dict done
    w.write(b"a\x8c\x0ddevice_traces\x94]\x94u.")
    return w.getvalue()


PICKLE: list[Mutator] = [pickle_opcodes, pickle_values, pickle_bomb]


# -- pprof ------------------------------------------------------------------------------


def pprof_values(rng: random.Random, data: bytes) -> bytes:
    """Sample values beyond int64, lines of 2**63, 100,000-character and hostile names,
    deep stacks, a location id that does not exist."""
    sys.path.insert(0, str(ROOT / "src"))
    from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb

    msg = pb.Profile()
    try:
        msg.ParseFromString(_plain(data))
    except Exception:
        return data
    kind = rng.randrange(5)
    if kind == 0 and msg.sample:
        for s in rng.sample(list(msg.sample), min(len(msg.sample), 5)):
            s.value[:] = [rng.choice([2**63 - 1, -(2**63), 0, -1]) for _ in s.value]
    elif kind == 1 and msg.location:
        for loc in msg.location:
            for line in loc.line:
                line.line = rng.choice([2**63 - 1, -(2**63), -1])
    elif kind == 2 and len(msg.string_table) > 1:
        i = rng.randrange(1, len(msg.string_table))
        msg.string_table[i] = rng.choice([*HOSTILE_NAMES, "n" * LONG])
    elif kind == 3 and msg.sample and msg.location:
        msg.sample[0].location_id[:] = [msg.location[0].id] * rng.choice([33_000, 70_000])
    elif msg.sample:
        msg.sample[0].location_id.append(rng.choice([2**64 - 1, 0, 999_999]))
    return gzip.compress(msg.SerializeToString(), mtime=0)


# -- deep nesting and numbers at the edges, for every format ----------------------------
#
# Inputs of a few hundred kilobytes whose structure is nested thousands deep: each stage
# (readers, transforms, writers, analysis) must stay linear in them, and an output that
# spells every stack out (folded, pprof, speedscope) grows with the square of the depth.

DEPTHS = (2_000, 5_000, 9_000, 40_000)
INT64_EDGES = (
    2**63 - 1, 2**63 - 1000, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 2**53 + 1,
    9.3e18, -9.3e18, 1e19, 10**20,
)  # fmt: skip
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpy")  # fmt: skip


def _events_of(doc: object) -> list | None:
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    return events if isinstance(events, list) else None


def deep_slices(rng: random.Random, data: bytes) -> bytes:
    """Chrome / Kineto traces: thousands of slices nested on one thread ('X' slices each
    inside the one before, or 'B' events never ended), with synchronizing runtime calls
    and kernel launches inside the innermost."""
    doc = _load_json(data)
    events = _events_of(doc)
    if events is None:
        return data
    depth = rng.choice(DEPTHS[:3])
    pid, tid = rng.choice([(1, 1), (0, 0), ("p", "t")])
    times = (e.get("ts") for e in events if isinstance(e, dict))
    t0 = next((t for t in times if isinstance(t, int | float)), 0)
    if rng.random() < 0.6:
        nested = [
            {"ph": "X", "cat": rng.choice(["cpu_op", "python_function", "user_annotation"]),
             "name": f"op{i % 7}", "pid": pid, "tid": tid, "ts": t0 + i,
             "dur": 4 * depth - 2 * i, "args": {"External id": i}}
            for i in range(depth)
        ]  # fmt: skip
    else:
        nested = [{"ph": "B", "name": f"f{i % 5}", "pid": pid, "tid": tid, "ts": t0 + i}
                  for i in range(depth)]  # fmt: skip
    t = t0 + depth
    for j in range(rng.choice([10, 500, 2000])):
        call = rng.choice(SYNC_CALLS) if j % 2 else "cudaLaunchKernel"
        nested.append({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": pid, "tid": tid,
                       "ts": t, "dur": 1, "args": {"correlation": 10**6 + j}})  # fmt: skip
        if not j % 2:
            args = {"correlation": 10**6 + j, "device": 0, "stream": 7}
            nested.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                           "ts": t + 1, "dur": 1, "args": args})  # fmt: skip
        t += 2
    events.extend(nested)
    return json.dumps(doc, separators=(",", ":")).encode()


def speedscope_deep(rng: random.Random, data: bytes) -> bytes:
    """speedscope: an evented profile opening frames thousands deep (closed or not), or a
    sampled one whose samples are thousands of frames deep."""
    doc = _load_json(data)
    if not isinstance(doc, dict):
        return data
    depth = rng.choice(DEPTHS)
    frames = [{"name": f"f{i}"} for i in range(rng.choice([1, 5, 300]))]
    nf = len(frames)
    if rng.random() < 0.6:
        events = [{"type": "O", "frame": i % nf, "at": i} for i in range(depth)]
        if rng.random() < 0.7:
            events += [{"type": "C", "frame": (depth - 1 - i) % nf, "at": depth + i}
                       for i in range(depth)]  # fmt: skip
        profile = {"type": "evented", "name": "deep", "unit": "none", "startValue": 0,
                   "endValue": 2 * depth, "events": events}  # fmt: skip
    else:
        sample = [i % nf for i in range(depth)]
        profile = {"type": "sampled", "name": "deep", "unit": "none", "startValue": 0,
                   "endValue": 3, "samples": [sample, sample[: depth // 2], [0]],
                   "weights": [1, 1, 1]}  # fmt: skip
    doc["shared"] = {"frames": frames}
    doc["profiles"] = [profile, *(doc.get("profiles") or [])[:1]]
    doc["$schema"] = "https://www.speedscope.app/file-format-schema.json"
    return json.dumps(doc, separators=(",", ":")).encode()


def json_int64_edges(rng: random.Random, data: bytes) -> bytes:
    """Numbers at the edges of 64-bit integers (and floats beyond them) in the fields a
    reader turns into int64 columns: times, durations, ids, a trace's base time."""
    doc = _load_json(data)
    if doc is None:
        return data
    paths = [(p, k) for p, k in _json_paths(doc) if isinstance(p[k], int | float)]  # type: ignore[index]
    for parent, key in rng.sample(paths, min(len(paths), rng.choice([1, 3, 30]))):
        parent[key] = rng.choice(INT64_EDGES)  # type: ignore[index]
    if isinstance(doc, dict) and rng.random() < 0.5:
        doc[rng.choice(["baseTimeNanoseconds", "displayTimeUnit"])] = rng.choice(INT64_EDGES)
    return json.dumps(doc).encode()


def text_int64_edges(rng: random.Random, data: bytes) -> bytes:
    """Text formats: numbers replaced by values at the edges of int64."""
    spans = [m.span() for m in _NUMBER.finditer(data, 0, min(len(data), 1 << 20))]
    if not spans:
        return data
    out = bytearray(data)
    for a, b in sorted(rng.sample(spans, min(len(spans), rng.choice([1, 3, 30]))), reverse=True):
        out[a:b] = str(rng.choice(INT64_EDGES)).encode()
    return bytes(out)


def sqlite_deep(rng: random.Random, data: bytes) -> bytes:
    """Nsight exports: thousands of nested NVTX ranges and nested runtime calls on one
    thread, with synchronizing calls inside."""
    depth = rng.choice(DEPTHS[:3])

    def change(conn: sqlite3.Connection) -> None:
        tid = conn.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()
        gtid = tid[0] if tid else (1 << 24) + 1
        start = conn.execute("SELECT MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        start = start or 0
        if "NVTX_EVENTS" in _tables(conn) and rng.random() < 0.5:
            cols = _columns(conn, "NVTX_EVENTS")
            rows = [(start + i, start + 4 * depth - i, f"range{i % 9}", 59, gtid)
                    for i in range(depth)]  # fmt: skip
            names = [c for c in ("start", "end", "text", "eventType", "globalTid") if c in cols]
            conn.executemany(
                f"INSERT INTO NVTX_EVENTS ({','.join(names)}) VALUES "
                f"({','.join('?' * len(names))})",
                [r[: len(names)] for r in rows],
            )
        else:
            cols = _columns(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")
            name_id = conn.execute(
                "SELECT MIN(nameId) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            ).fetchone()[0]
            values = {"start": None, "end": None, "globalTid": gtid, "correlationId": None,
                      "nameId": name_id, "returnValue": 0, "eventClass": 0}  # fmt: skip
            names = [c for c in values if c in cols]
            rows = []
            for i in range(depth):
                values.update(start=start + i, end=start + 4 * depth - i, correlationId=10**7 + i)
                rows.append([values[c] for c in names])
            conn.executemany(
                f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME ({','.join(names)}) VALUES "
                f"({','.join('?' * len(names))})",
                rows,
            )

    return _with_db(data, change)


def sqlite_text_columns(rng: random.Random, data: bytes) -> bytes:
    """Blobs, numbers and empty strings where an export keeps names (TEXT columns)."""

    def change(conn: sqlite3.Connection) -> None:
        for table in _tables(conn):
            for _cid, col, decl, *_ in conn.execute(f'PRAGMA table_info("{table}")').fetchall():
                if "TEXT" in (decl or "").upper() and rng.random() < 0.5:
                    value = rng.choice([b"\x00\xffname", b"", 12345, 2**63 - 1, 1.5, "",
                                        rng.choice(HOSTILE_NAMES)])  # fmt: skip
                    where = rng.choice(["", " WHERE rowid % 3 = 0"])
                    conn.execute(f'UPDATE "{table}" SET "{col}" = ?{where}', (value,))

    return _with_db(data, change)


def sqlite_int64_edges(rng: random.Random, data: bytes) -> bytes:
    """Times, ids and sizes at the edges of int64 (and reals beyond them)."""

    def change(conn: sqlite3.Connection) -> None:
        tables = [t for t in _tables(conn) if t in _BUSY_TABLES] or _tables(conn)
        for _ in range(rng.choice([1, 3])):
            table = rng.choice(tables)
            cols = _columns(conn, table)
            if cols:
                value = rng.choice([*INT64_EDGES[:8], 9.3e18, 1e300])
                value = value if -(2**63) <= value < 2**63 or isinstance(value, float) else 9.3e18
                where = rng.choice(["", " WHERE rowid % 5 = 0", " WHERE rowid = 1"])
                conn.execute(f'UPDATE "{table}" SET "{rng.choice(cols)}" = ?{where}', (value,))

    return _with_db(data, change)


def sqlite_wal(rng: random.Random, data: bytes) -> bytes:
    """The export switched to write-ahead logging (a reader must still leave no -wal or
    -shm file beside it)."""

    def change(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")

    return _with_db(data, change)


def pickle_deep(rng: random.Random, data: bytes) -> bytes:
    """Memory snapshots whose allocations carry stacks thousands of frames deep (the
    same deep stack for many of them, or ever deeper ones)."""
    snap = _snapshot(data)
    if not isinstance(snap, dict):
        return data
    depth = rng.choice(DEPTHS)
    deep = [{"name": f"f{i % 7}", "filename": "x.py", "line": i} for i in range(depth)]
    traces = snap.get("device_traces") or [[]]
    entries = [e for t in traces if isinstance(t, list) for e in t if isinstance(e, dict)]
    # Few entries: each deeper slice costs its frames in the pickle (memo references).
    for e in rng.sample(entries, min(len(entries), rng.choice([1, 10, 50]))):
        e["frames"] = deep if rng.random() < 0.7 else deep[: rng.randrange(1, depth)]
    for seg in snap.get("segments", [])[:20]:
        for b in seg.get("blocks", [])[:20] if isinstance(seg, dict) else []:
            for h in b.get("history", []) or [] if isinstance(b, dict) else []:
                if isinstance(h, dict):
                    h["frames"] = deep
    return pickle.dumps(snap, protocol=4)


def pprof_edges(rng: random.Random, data: bytes) -> bytes:
    """pprof: times, durations, the period and addresses at the edges of int64, and many
    samples whose stacks are ever deeper paths of one chain of locations."""
    sys.path.insert(0, str(ROOT / "src"))
    from aiflame.proto.pyroscope.google.v1 import profile_pb2 as pb

    msg = pb.Profile()
    try:
        msg.ParseFromString(_plain(data))
    except Exception:
        return data
    if rng.random() < 0.5:
        edge = [2**63 - 1, -(2**63), 2**63 - 1000, -1]
        msg.time_nanos = rng.choice(edge)
        msg.duration_nanos = rng.choice(edge)
        msg.period = rng.choice(edge)
        for m in msg.mapping:
            m.memory_start, m.memory_limit = 2**64 - 1, rng.choice([0, 2**64 - 1])
    elif msg.location and msg.sample:
        depth = rng.choice([2_000, 4_000])
        chain = [msg.location[i % len(msg.location)].id for i in range(depth)]
        step = rng.choice([2, 10, 100])  # up to 4 million location ids in 100 KB of gzip
        for k in range(step, depth, step):
            s = msg.sample.add()
            s.location_id[:] = chain[:k]
            s.value[:] = [1] * len(msg.sample_type)
    return gzip.compress(msg.SerializeToString(), mtime=0)


# -- directories (an HPCToolkit measurement directory or database) --------------------------

DIRECTORY_SEEDS: dict[str, list[str]] = {
    "hpctoolkit": [
        "gpu_instructions/hpctoolkit/loops-cuda-nvidiapc-t.m",
        "gpu_instructions/hpctoolkit/loops-cuda-nvidiapc-t.d",
    ],
}
_STRUCT_HEAD = (
    '<?xml version="1.0"?>\n<HPCToolkitStructure i="0" version="4.9" n="">\n'
    '<LM i="2" n="{module}" has-calls="0" v="{{}}">\n<F i="3" n="x.cu">\n'
    '<P i="4" n="main" l="35" v="{{[0xade0-0xade1)}}">\n'
)


def struct_deep(rng: random.Random, data: bytes) -> bytes:
    """An hpcstruct of a few kilobytes (gzip) whose inlined calls or loops nest tens of
    thousands deep, with statements inside."""
    text = _plain(data).decode("utf-8", "replace")
    m = re.search(r'<LM [^>]*n="([^"]*)"', text)
    head = _STRUCT_HEAD.format(module=m.group(1) if m else "x")
    depth = rng.choice([1_000, 40_000])
    tag = rng.choice(['<A l="2" n="f">', '<L l="7">'])
    body = (tag * depth + '<S l="9" v="{[0xa000-0xb000)}"/>' * rng.choice([1, 2000])).encode()
    out = head.encode() + body
    return gzip.compress(out, mtime=0) if data[:2] == b"\x1f\x8b" else out


def struct_numbers(rng: random.Random, data: bytes) -> bytes:
    """hpcstruct line numbers and address ranges at the edges (or not numbers at all)."""
    text = _plain(data)
    edge = rng.choice([b"99999999999999999999999", b"-1", b"x", b"", b"0x", b"1e309"])
    out = re.sub(rb'\bl="\d+"', b'l="' + edge + b'"', text, count=rng.choice([1, 50]))
    if rng.random() < 0.5:
        out = re.sub(rb"0x[0-9a-f]+", b"0x" + b"f" * rng.choice([16, 40]), out, count=30)
    return gzip.compress(out, mtime=0) if data[:2] == b"\x1f\x8b" else out


def binary_int64_edges(rng: random.Random, data: bytes) -> bytes:
    """Binary records: aligned 8-byte fields set to the edges of (u)int64."""
    b = bytearray(data)
    for _ in range(rng.choice([1, 4, 32])):
        i = rng.randrange(0, max(1, len(b) - 8)) & ~7
        value = rng.choice([2**64 - 1, 2**63, 2**63 - 1, 0, 1 << 40])
        b[i : i + 8] = value.to_bytes(8, rng.choice(["big", "little"]))
    return bytes(b)


def mutate_directory(rng: random.Random, seed: Path, into: Path) -> str:
    """Copy the directory ``seed`` to ``into`` and damage one of its files; the mutation's
    name."""
    import shutil

    shutil.copytree(seed, into)
    files = sorted(p for p in into.rglob("*") if p.is_file())
    target = rng.choice(files)
    data = target.read_bytes()
    if ".hpcstruct" in target.name:
        mutator = rng.choice([struct_deep, struct_deep, struct_numbers, *GENERIC])
    else:
        mutator = rng.choice([binary_int64_edges, binary_int64_edges, *GENERIC])
    target.write_bytes(mutator(rng, data) or data)
    return f"{target.relative_to(into)}: {mutator.__name__}"


def directory_seeds() -> dict[str, list[Path]]:
    return {
        fmt: [DATA / p for p in paths if (DATA / p).is_dir()]
        for fmt, paths in DIRECTORY_SEEDS.items()
    }


# -- bombs (built once: big to build, small to store) -------------------------------------


def bombs(cache: Path) -> dict[str, Path]:
    """gzip files of a few hundred KB to 1 MB holding a 1 GiB line, name or JSON token."""
    cache.mkdir(parents=True, exist_ok=True)
    mib = b"x" * (1 << 20)
    specs = {
        "folded-line.txt.gz": (b"a;b 1\na;", b" 1\n"),
        "perf-line.txt.gz": (b"py 1/1 [000] 1.000000: 1 cycles:\n    ffff ", b" (/x.so)\n\n"),
        "kineto-name.json.gz": (
            b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"',
            b'","ts":1,"dur":2,"pid":0,"tid":7,"args":{"correlation":1}}]}',
        ),
        "speedscope-name.json.gz": (
            b'{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":'
            b'{"frames":[{"name":"',
            b'"}]},"profiles":[{"type":"sampled","name":"x","unit":"none","startValue":0,'
            b'"endValue":1,"samples":[[0]],"weights":[1]}]}',
        ),
        "pickle-string.pickle.gz": (
            b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\rdevice_traces\x94]\x94\x8c\x01x\x94"
            b"\x8d" + struct.pack("<Q", 1 << 30),
            b"\x94u.",
        ),
    }
    out = {}
    for name, (head, tail) in specs.items():
        path = cache / name
        if not path.exists():
            with gzip.open(path, "wb", compresslevel=9) as f:
                f.write(head)
                for _ in range(1024):
                    f.write(mib)
                f.write(tail)
        out[name] = path
    return out


def mutators_for(fmt: str) -> list[Mutator]:
    out = list(GENERIC)
    if fmt in TEXT_FORMATS:
        out += [*TEXT, text_int64_edges]
    if fmt in JSON_FORMATS:
        out += JSON * 2 + [json_int64_edges] * 2
    if fmt in ("kineto", "trace-events"):
        out += [deep_slices] * 3
    if fmt == "speedscope":
        out += [speedscope_deep] * 3
    if fmt == "nsys":
        out += SQLITE * 3 + [sqlite_deep, sqlite_text_columns, sqlite_int64_edges, sqlite_wal] * 2
    if fmt == "torch-memory":
        out += PICKLE * 3 + [pickle_deep] * 2
    if fmt == "pprof":
        out += [pprof_values] * 4 + [pprof_edges] * 2
    out += [corrupt_gzip]
    return out


def deep_nesting_for(fmt: str) -> Mutator | None:
    """The mutation that nests ``fmt``'s structure thousands deep."""
    return {"kineto": deep_slices, "trace-events": deep_slices, "speedscope": speedscope_deep,
            "nsys": sqlite_deep, "torch-memory": pickle_deep, "pprof": pprof_edges,
            **dict.fromkeys(TEXT_FORMATS[:5], deep_stack)}.get(fmt)  # fmt: skip


def numeric_edges_for(fmt: str) -> Mutator:
    """The mutation that puts numbers at the edges of int64 (and beyond) into ``fmt``."""
    if fmt in JSON_FORMATS:
        return json_int64_edges
    return {"nsys": sqlite_int64_edges, "torch-memory": pickle_values,
            "pprof": pprof_edges}.get(fmt, text_int64_edges)  # fmt: skip


def mutate(rng: random.Random, fmt: str, seed: bytes) -> tuple[str, bytes]:
    """One mutant of ``seed``: one or two mutations, sometimes gzipped afterwards."""
    data = seed
    names = []
    packed = data[:2] == b"\x1f\x8b"
    if packed:  # damage what is inside (damaged gzip itself is corrupt_gzip's)
        data = gzip.decompress(data)
    for _ in range(rng.choice([1, 1, 2])):
        m = rng.choice(mutators_for(fmt))
        try:
            data = m(rng, data) or data
        except Exception:  # a mutator that does not apply to what an earlier one made
            continue
        names.append(m.__name__)
    if "corrupt_gzip" not in names and rng.random() < (0.6 if packed else 0.15):
        data = gzipped(rng, data)
        names.append("gzipped")
    return "+".join(names), data


def seed_files() -> dict[str, list[Path]]:
    return {fmt: [DATA / p for p in paths if (DATA / p).exists()] for fmt, paths in SEEDS.items()}


__all__ = [
    "bombs",
    "deep_nesting_for",
    "directory_seeds",
    "mutate",
    "mutate_directory",
    "numeric_edges_for",
    "seed_files",
]
