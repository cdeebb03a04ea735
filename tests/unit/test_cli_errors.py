"""Bad input: one clear error line naming the file, non-zero exit, no partial output."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

FOLDED = "main;forward;aten::mm 3\nmain;forward;aten::add 2\n"


def aiflame(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    err = result.stderr.decode()
    assert result.returncode != 0
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("aiflame: error: ")
    for f in fragments:
        assert f in lines[0]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    p = tmp_path / "good.folded"
    p.write_text(FOLDED)
    return p


def test_missing_file(tmp_path):
    out = tmp_path / "out.folded"
    r = aiflame("convert", str(tmp_path / "nope.txt"), "-o", str(out))
    assert_one_line_error(r, "nope.txt", "no such file")
    assert not out.exists()


def test_unknown_format(tmp_path):
    bad = tmp_path / "random.bin"
    bad.write_bytes(bytes(range(256)) * 10)
    out = tmp_path / "out.folded"
    r = aiflame("convert", str(bad), "-o", str(out))
    assert_one_line_error(r, "random.bin", "unknown format")
    assert not out.exists()


def test_truncated_gzip(tmp_path):
    data = gzip.compress((FOLDED * 5000).encode())
    bad = tmp_path / "cut.folded.gz"
    bad.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out.folded"
    r = aiflame("convert", str(bad), "-o", str(out))
    assert_one_line_error(r, "cut.folded.gz", "truncated")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]  # no temporary file left behind either


def test_empty_input(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    r = aiflame("info", str(empty))
    assert_one_line_error(r, "empty.txt", "empty")


def test_only_garbage_lines(tmp_path):
    bad = tmp_path / "words.txt"
    bad.write_text("hello world\nthis is not a profile\n")
    r = aiflame("convert", str(bad), "-f", "folded", "-o", "-")
    assert_one_line_error(r, "words.txt")


def test_directory_as_input(tmp_path):
    r = aiflame("info", str(tmp_path))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr.decode()


def test_output_directory_missing(tmp_path, good):
    r = aiflame("convert", str(good), "-o", str(tmp_path / "no" / "such" / "out.folded"))
    assert_one_line_error(r, "does not exist")


def test_unknown_metric(tmp_path, good):
    out = tmp_path / "x.folded"
    r = aiflame("convert", str(good), "-o", str(out), "--metric", "gpu-time")
    assert_one_line_error(r, "gpu-time")
    assert not out.exists()


def test_output_format_unknown(tmp_path, good):
    r = aiflame("convert", str(good), "-o", str(tmp_path / "x.weird"))
    assert_one_line_error(r, "-f")


def test_good_conversion_via_stdin_and_gzip(tmp_path):
    gz = tmp_path / "p.folded.gz"
    gz.write_bytes(gzip.compress(FOLDED.encode()))
    r1 = aiflame("convert", str(gz), "-f", "folded", "-o", "-")
    r2 = aiflame("convert", "-", "-f", "folded", "-o", "-", stdin=FOLDED.encode())
    assert r1.returncode == 0 and r2.returncode == 0
    assert (
        r1.stdout.decode()
        == r2.stdout.decode()
        == ("main;forward;aten::add 2\nmain;forward;aten::mm 3\n")
    )


def test_info_describes_profile(good):
    r = aiflame("info", str(good))
    out = r.stdout.decode()
    assert r.returncode == 0
    assert "samples" in out and "total 5" in out
    assert "stacks:      2 distinct" in out


def test_info_of_several_inputs_describes_them_merged(good, tmp_path):
    (tmp_path / "second.folded").write_text(FOLDED)
    r = aiflame("info", str(good), str(tmp_path / "second.folded"))
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    assert out.startswith("sources:     2 inputs, merged:")
    assert "total 10" in out and "stacks:      2 distinct" in out


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("flamegraph", "x.json"), ("-o/--output", "aiflame flamegraph --help")),
        (("convert", "x.json"), ("-o/--output", "aiflame convert --help")),
        (("diff", "a"), ("TEST", "aiflame diff --help")),
        (("memory", "x"), ("-o/--output", "aiflame memory --help")),
        (("flamegraph", "--no-such-flag", "x", "-o", "y.html"), ("--no-such-flag",)),
        (("no-such-command",), ("no-such-command", "aiflame --help")),
    ],
)
def test_usage_mistakes_are_one_line(args, fragments):
    """A missing -o or an unknown flag is one line naming it and where the usage is, not
    argparse's page of usage."""
    r = aiflame(*args)
    assert r.returncode == 2
    assert_one_line_error(r, *fragments)
