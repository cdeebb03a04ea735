"""A memory-snapshot pickle cannot exhaust the machine: both readers (the streaming one
and the restricted unpickler) do work and take memory in proportion to the pickle's size,
and say which limit a pickle breaks in one line; a corrupt memo index is "corrupt", not
"out of memory"; running out of memory anyway is one line, never a traceback."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiflame.errors import InputError
from aiflame.sources.inputs import Input
from aiflame.sources.torch_memory import importer as torch_memory
from aiflame.sources.torch_memory.bounds import PickleLimit, check_opcodes, check_size
from limited import GIB, limit_command, run_limited

SNAPSHOT = (
    Path(__file__).parents[1] / "data" / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"
)
BINGET = b"h"
LONG_BINGET = b"j"


def _str(s: str) -> bytes:
    data = s.encode()
    return b"\x8c" + bytes([len(data)]) + data + b"\x94"  # SHORT_BINUNICODE, MEMOIZE


class Writer:
    """Protocol 4 opcodes by hand, counting memo slots (MEMOIZE after each new object)."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.out.write(b"\x80\x04")
        self.memo = 0

    def raw(self, data: bytes) -> None:
        self.out.write(data)

    def s(self, text: str) -> None:
        self.raw(_str(text))
        self.memo += 1

    def new(self, op: bytes) -> int:
        """An empty dict or list, memoized; its memo slot."""
        self.raw(op + b"\x94")
        self.memo += 1
        return self.memo - 1

    def refs(self, index: int, n: int) -> None:
        """``n`` references to memo slot ``index``."""
        self.raw((LONG_BINGET + struct.pack("<I", index)) * n)

    def data(self) -> bytes:
        return self.out.getvalue() + b"."


def reference_bomb(n: int = 1000) -> bytes:
    """{"segments": [seg] * n, ...} with seg["blocks"] = [block] * n: a few kilobytes that
    are a million blocks to walk."""
    w = Writer()
    w.new(b"}")
    w.raw(b"(")
    w.s("segments")
    w.new(b"]")
    w.raw(b"(")  # the segments' items
    seg = w.new(b"}")
    w.raw(b"(")
    for key, value in (("device", 0), ("address", 0), ("total_size", 8), ("stream", 0)):
        w.s(key)
        w.raw(b"K" + bytes([value]))
    w.s("blocks")
    w.new(b"]")
    w.raw(b"(")  # the blocks' items
    block = w.new(b"}")
    w.raw(b"(")
    for key in ("size", "requested_size", "address"):
        w.s(key)
        w.raw(b"K\x01")
    w.s("state")
    w.s("active_allocated")
    w.raw(b"u")  # the block's items
    w.refs(block, n - 1)
    w.raw(b"e")  # the blocks: the block n times
    w.raw(b"u")  # the segment's items
    w.refs(seg, n - 1)
    w.raw(b"e")  # the segments: the segment n times
    w.s("device_traces")
    w.new(b"]")
    w.raw(b"u")
    return w.data()


def nested_bomb(n: int = 200, levels: int = 4) -> bytes:
    """allocator_settings = [[[[1] * n] * n] * n] * n: 1.6 billion elements."""
    w = Writer()
    w.new(b"}")
    w.raw(b"(")
    w.s("segments")
    w.new(b"]")
    w.s("device_traces")
    w.new(b"]")
    w.s("allocator_settings")
    inner = w.new(b"]")
    w.raw(b"(" + b"K\x01" * n + b"e")
    for _ in range(levels - 1):
        w.raw(b"0")  # POP: the inner list lives on in the memo
        outer = w.new(b"]")
        w.raw(b"(")
        w.refs(inner, n)
        w.raw(b"e")
        inner = outer
    w.raw(b"u")
    return w.data()


def _read(path: Path, stream: bool = True) -> dict:
    return torch_memory.read_snapshot(Input(str(path)), stream=stream)


def _refused(path: Path, stream: bool) -> str:
    try:
        _read(path, stream)
    except InputError as e:
        return str(e)
    return "read"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("bomb", ["references", "nested"])
def test_bombs_are_refused_quickly_in_little_memory(tmp_path, bomb, stream):
    data = reference_bomb() if bomb == "references" else nested_bomb()
    assert len(data) < 20_000
    assert pickle.loads(data)["segments"] is not None  # a valid pickle, that unfolds
    path = tmp_path / "bomb.pickle"
    path.write_bytes(data)
    outcome = run_limited(_refused, path, stream, memory=512 << 20, timeout=60)
    assert outcome.status == "ok", outcome
    assert "objects once its references are followed" in outcome.value
    assert "AIFLAME_MAX_OBJECTS_PER_BYTE" in outcome.value
    assert outcome.seconds < 20


def test_a_bomb_through_the_command_line(tmp_path):
    path = tmp_path / "bomb.pickle"
    path.write_bytes(reference_bomb())
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "memory", str(path), "-o", str(tmp_path / "m.html")],
        capture_output=True,
        timeout=120,
        preexec_fn=limit_command(2 * GIB),
    )
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "objects once its references are followed" in err
    assert not (tmp_path / "m.html").exists()


P4 = b"\x80\x04}\x94(\x8c\x08segments\x94"  # protocol 4: {"segments": ...
P2 = b"\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01"  # protocol 2: the same
CORRUPT = {
    "long memo store": (P4 + b"]r\xff\xff\xff\xffu.", "memo index 4,294,967,295"),
    "text memo store": (b"(dp99999999999\nS'segments'\np1\n(lp2\ns.", "memo index 99,999,999,999"),
    "protocol 2 store": (P2 + b"]r\x00\x00\x00\x10u.", "memo index 268,435,456"),
    "a 1 TiB string": (P4 + b"\x8d" + struct.pack("<Q", 1 << 40) + b"x", "longer than 64 MiB"),
    "a 2 GiB bytes": (P2 + b"B\xff\xff\xff\x7fx", "longer than 64 MiB"),
    "a 4 EiB frame": (b"\x80\x04\x95" + struct.pack("<Q", 1 << 62) + b"}\x94.", "truncated"),
    "a fetch from nowhere": (P2 + b"j\xff\xff\xff\x00u.", "corrupt"),
}


@pytest.mark.parametrize("name", CORRUPT)
def test_corrupt_indices_and_lengths_are_corrupt_not_out_of_memory(tmp_path, name):
    data, says = CORRUPT[name]
    path = tmp_path / "bad.pickle"
    path.write_bytes(data)
    for stream in (True, False):
        outcome = run_limited(_refused, path, stream, memory=512 << 20, timeout=60)
        assert outcome.status == "ok", (name, outcome)
        assert says in outcome.value and "out of memory" not in outcome.value, outcome.value


def test_a_list_inside_itself(tmp_path):
    a: list = []
    a.append(a)
    path = tmp_path / "cycle.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": a}, protocol=4))
    for stream in (True, False):
        assert "contains itself" in _refused(path, stream)


def test_code_is_still_refused(tmp_path):
    path = tmp_path / "code.pickle"
    path.write_bytes(
        b"\x80\x04}\x94(\x8c\x08segments\x94\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R\x94u."
    )
    assert "refused to load: the pickle asks for os.system" in _refused(path, True)


def test_frames_shared_by_every_event_are_walked_once(tmp_path):
    """One frame list of 20,000 frames referenced by 20,000 events: named once."""
    frames = [{"name": f"f{i}", "filename": "x.py", "line": i} for i in range(20_000)]
    trace = [
        {"action": "alloc", "addr": 4096 * i, "size": 512, "stream": 0, "frames": frames}
        for i in range(20_000)
    ]
    snap = {"segments": [], "device_traces": [trace]}
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    start = time.monotonic()
    profile = torch_memory.load(Input(str(path)), resolve_classes=False)
    assert time.monotonic() - start < 30
    assert len(profile) == 20_000


def test_the_real_snapshot_is_within_every_limit():
    raw = gzip.decompress(SNAPSHOT.read_bytes())
    check_opcodes(raw)
    for stream in (True, False):
        check_size(_read(SNAPSHOT, stream), len(raw))


def test_check_size_counts_references_as_copies():
    block = {"size": 1}
    blocks = [block] * 1000
    data = {"segments": [{"blocks": blocks}] * 1000}
    with pytest.raises(PickleLimit, match="objects"):
        check_size(data, 1_000)  # 2 million elements and more: beyond the floor
    check_size(data, 100_000)  # ... but within 32 per byte of a 100 KB pickle


def test_running_out_of_memory_is_one_line(tmp_path):
    """A real but large input under a small address space: 'out of memory', no traceback."""
    path = tmp_path / "many.folded"
    with open(path, "w") as f:
        for i in range(300_000):
            f.write(f"main;mod{i % 1000};fn{i};leaf{i} {i + 1}\n")
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "flamegraph", str(path), "-o", str(tmp_path / "x.html")],
        capture_output=True,
        timeout=300,
        preexec_fn=limit_command(160 << 20),
    )
    err = r.stderr.decode()
    if r.returncode == 0:
        pytest.skip("the input fitted in the limit on this machine")
    assert "Traceback" not in err and err.strip().splitlines() == [
        "aiflame: error: out of memory while running 'flamegraph' (the input needs more than"
        " is available)"
    ]
    assert not (tmp_path / "x.html").exists()
