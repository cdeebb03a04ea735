"""gzip amplification bounded: about a megabyte of gzip holding one gigabyte-long line,
name or JSON token, or inflating a thousandfold, is refused in one line naming the limit,
quickly and in little memory (each case runs under an address-space limit)."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hostile_inputs import one_error_line

from limited import GIB, limit_command

MIB = 1 << 20


def gzip_of(path: Path, parts: Iterable[bytes]) -> Path:
    """One gzip member per part (gzip readers read members one after the other), each
    compressed once: a gibibyte of one byte in a megabyte, built in no time."""
    members: dict[bytes, bytes] = {}
    with open(path, "wb") as f:
        for p in parts:
            if p not in members:
                members[p] = gzip.compress(p, mtime=0)
            f.write(members[p])
    return path


def gib_of(byte: bytes) -> Iterable[bytes]:
    chunk = byte * MIB
    return (chunk for _ in range(1024))


def aiflame_limited(*args: str, memory: int = 1 * GIB, env: dict | None = None):
    import os

    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args],
        capture_output=True,
        timeout=120,
        preexec_fn=limit_command(memory),
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bombs")
    return {
        "folded": gzip_of(d / "line.folded.gz", [b"a;b 1\na;", *gib_of(b"x"), b" 1\n"]),
        "perf": gzip_of(
            d / "perf.txt.gz",
            [b"py 1/1 [000] 1.000000: 1 cycles:\n\t    ffff ", *gib_of(b"f"), b" (/x.so)\n\n"],
        ),
        "kineto": gzip_of(
            d / "name.json.gz",
            [
                b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"',
                *gib_of(b"k"),
                b'","ts":1,"dur":2,"pid":0,"tid":7}]}',
            ],
        ),
        "speedscope": gzip_of(
            d / "s.speedscope.json.gz",
            [
                b'{"$schema":"https://www.speedscope.app/file-format-schema.json","shared":'
                b'{"frames":[{"name":"',
                *gib_of(b"n"),
                b'"}]},"profiles":[]}',
            ],
        ),
        "pickle": gzip_of(
            d / "snap.pickle.gz",
            [
                b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x01x\x94\x8d"
                + struct.pack("<Q", 1 << 30),
                *gib_of(b"s"),
                b"\x94u.",
            ],
        ),
    }


@pytest.mark.parametrize(
    ("kind", "fmt", "says"),
    [
        ("folded", None, "a line longer than 64 MiB"),
        ("perf", "perf-script", "a line longer than 64 MiB"),
        ("kineto", None, "an event longer than 64 MiB"),
        ("speedscope", None, "inflates beyond 256 MiB"),
        ("pickle", None, "longer than 64 MiB"),
    ],
)
def test_a_gigabyte_in_a_megabyte(bombs, tmp_path, kind, fmt, says):
    path = bombs[kind]
    assert path.stat().st_size < 8 * MIB
    extra = ["--format", fmt] if fmt else []
    r = aiflame_limited("convert", str(path), *extra, "-f", "folded", "-o", str(tmp_path / "o"))
    line = one_error_line(r, says)
    assert "AIFLAME_" in line  # the setting that raises the limit is named
    assert not (tmp_path / "o").exists()


def test_the_limit_can_be_raised(tmp_path):
    path = tmp_path / "wide.folded"
    path.write_text("a;" + "x" * (2 * MIB) + " 1\n")
    one_error_line(aiflame_limited("info", str(path), env={"AIFLAME_MAX_LINE_MIB": "1"}), "1 MiB")
    r = aiflame_limited("info", str(path), env={"AIFLAME_MAX_LINE_MIB": "4"})
    assert r.returncode == 0, r.stderr.decode()


def test_normal_compression_is_not_refused(tmp_path):
    """A very repetitive but real-looking folded file (the same stacks thousands of times)
    inflates far more than 200x and is read: text streams have no ratio limit."""
    lines = b"".join(
        b"main;train;step;forward;layer%d;aten::mm %d\n" % (i % 8, i) for i in range(64)
    )
    path = gzip_of(tmp_path / "rep.folded.gz", [lines * 20_000])
    r = aiflame_limited("info", str(path))
    assert r.returncode == 0, r.stderr.decode()
