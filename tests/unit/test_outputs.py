"""Outputs never clobber and never crash: every failure to write is one line and leaves no
file; devices, FIFOs and symbolic links are written through, never replaced; files get the
user's umask, and an existing file keeps its mode."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiflame.cli.output import write_output, write_outputs
from aiflame.errors import AiflameError

FOLDED = "main;forward;aten::mm 3\nmain;forward;aten::add 2\n"
WRITTEN = "main;forward;aten::add 2\nmain;forward;aten::mm 3\n"  # as convert sorts it
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, devices)")


def aiflame(*args: str, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args], capture_output=True, timeout=120, **kw
    )


def one_error_line(r: subprocess.CompletedProcess, *fragments: str) -> str:
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("aiflame: error: "), err
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def no_temporary_files(directory: Path) -> None:
    assert not [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def folded(tmp_path: Path) -> Path:
    p = tmp_path / "in.folded"
    p.write_text(FOLDED)
    return p


@contextlib.contextmanager
def mounted(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


# -- failures: one line, nothing left -----------------------------------------------------


@ROOT_ONLY
def test_full_disk(tmp_path, folded):
    with mounted(tmp_path / "small", "size=64k") as small:
        big = tmp_path / "big.folded"
        big.write_text("".join(f"f{i};g{i};h{i} {i}\n" for i in range(3000)))
        r = aiflame("flamegraph", str(big), "-o", str(small / "x.html"))
        one_error_line(r, "x.html", "no space left on device")
        assert not (small / "x.html").exists()
        no_temporary_files(small)


@ROOT_ONLY
def test_read_only_file_system(tmp_path, folded):
    with mounted(tmp_path / "ro", "ro,size=64k") as ro:
        r = aiflame("convert", str(folded), "-o", str(ro / "x.folded"))
        one_error_line(r, "read-only file system")


@ROOT_ONLY
def test_immutable_file_is_left_alone(tmp_path, folded):
    out = tmp_path / "kept.folded"
    out.write_text("before\n")
    if subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i does not work on this file system")
    try:
        r = aiflame("convert", str(folded), "-o", str(out))
        one_error_line(r, "kept.folded", "not permitted")
        assert out.read_text() == "before\n"
        no_temporary_files(tmp_path)
    finally:
        subprocess.run(["chattr", "-i", str(out)], check=False)


def test_a_name_longer_than_255_bytes(tmp_path, folded):
    r = aiflame("convert", str(folded), "-o", str(tmp_path / ("é" * 130 + ".folded")))
    one_error_line(r, "file name too long")
    no_temporary_files(tmp_path)


def test_a_long_name_that_fits_still_works(tmp_path, folded):
    """The temporary file beside it must fit in 255 bytes too."""
    out = tmp_path / ("n" * 240 + ".folded")
    r = aiflame("convert", str(folded), "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    assert out.read_text() == WRITTEN


@pytest.mark.parametrize("command", [["convert", "-o", "-", "-f", "folded"], ["info"]])
def test_stdout_on_a_full_device(folded, command):
    with open("/dev/full", "wb") as full:
        r = subprocess.run(
            [sys.executable, "-m", "aiflame", command[0], str(folded), *command[1:]],
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    one_error_line(r, "no space left on device")


def test_directory_as_output(tmp_path, folded):
    one_error_line(
        aiflame("convert", str(folded), "-f", "folded", "-o", str(tmp_path)), "is a directory"
    )


def test_a_failure_while_writing_leaves_nothing(tmp_path):
    out = tmp_path / "out.folded"

    def chunks() -> Iterator[bytes]:
        yield b"a;b 1\n"
        raise AiflameError("input went bad half way")

    with pytest.raises(AiflameError):
        write_output(str(out), chunks())
    assert not out.exists()
    no_temporary_files(tmp_path)


def test_an_interrupt_while_writing_leaves_the_old_file(tmp_path):
    out = tmp_path / "out.folded"
    out.write_text("old\n")

    def chunks() -> Iterator[bytes]:
        yield b"new\n"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_output(str(out), chunks())
    assert out.read_text() == "old\n"
    no_temporary_files(tmp_path)


# -- devices, FIFOs, links: written through ---------------------------------------------------


@pytest.fixture
def dev_null(tmp_path) -> Path:
    """A device node like /dev/null: as root, one of our own (should the code under test
    rename over it, only that copy is lost); otherwise the real one, which a user cannot
    replace anyway."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return node


def test_dev_null_stays_a_device(folded, dev_null):
    before = os.stat(dev_null)
    r = aiflame("convert", str(folded), "-f", "folded", "-o", str(dev_null))
    assert r.returncode == 0, r.stderr.decode()
    after = os.stat(dev_null)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_a_symlink_to_a_device_stays(tmp_path, folded, dev_null):
    link = tmp_path / "link-to-null"
    link.symlink_to(dev_null)
    r = aiflame("convert", str(folded), "-f", "folded", "-o", str(link))
    assert r.returncode == 0, r.stderr.decode()
    assert link.is_symlink() and stat.S_ISCHR(os.stat(dev_null).st_mode)


def test_a_fifo_gets_the_output_as_a_stream(tmp_path, folded):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = aiflame("convert", str(folded), "-f", "folded", "-o", str(fifo))
    reader.join(60)
    assert r.returncode == 0, r.stderr.decode()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got == [WRITTEN.encode()]


def test_a_symlink_to_a_file_writes_the_file(tmp_path, folded):
    target = tmp_path / "real.folded"
    target.write_text("old\n")
    link = tmp_path / "link.folded"
    link.symlink_to(target.name)
    r = aiflame("convert", str(folded), "-o", str(link))
    assert r.returncode == 0, r.stderr.decode()
    assert link.is_symlink()
    assert target.read_text() == WRITTEN


def test_dev_stdout_is_written_in_place(tmp_path, folded):
    """-o /dev/stdout with stdout redirected to a file: that file, not a new one."""
    out = tmp_path / "captured"
    with open(out, "wb") as f:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "aiflame",
                "convert",
                str(folded),
                "-f",
                "folded",
                "-o",
                "/dev/stdout",
            ],
            stdout=f,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    assert r.returncode == 0, r.stderr.decode()
    assert out.read_text() == WRITTEN


@ROOT_ONLY
def test_a_block_device_is_refused(tmp_path, folded):
    node = tmp_path / "disk"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 200))  # an unused loop device
    except OSError as e:
        pytest.skip(f"cannot make a device node here: {e}")
    r = aiflame("convert", str(folded), "-f", "folded", "-o", str(node))
    one_error_line(r, "block device")
    assert stat.S_ISBLK(os.lstat(node).st_mode)


# -- permissions --------------------------------------------------------------------------


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_follow_the_umask(tmp_path, folded, umask, mode):
    out = tmp_path / "new.html"
    r = aiflame("flamegraph", str(folded), "-o", str(out), preexec_fn=lambda: os.umask(umask))
    assert r.returncode == 0, r.stderr.decode()
    assert stat.S_IMODE(out.stat().st_mode) == mode


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755])
def test_an_existing_file_keeps_its_mode(tmp_path, folded, mode):
    out = tmp_path / "old.folded"
    out.write_text("old\n")
    out.chmod(mode)
    r = aiflame("convert", str(folded), "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    assert out.read_text() == WRITTEN
    assert stat.S_IMODE(out.stat().st_mode) == mode


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_a_read_only_file_is_not_replaced(tmp_path, folded):
    out = tmp_path / "old.folded"
    out.write_text("old\n")
    out.chmod(0o444)
    one_error_line(aiflame("convert", str(folded), "-o", str(out)), "permission denied")
    assert out.read_text() == "old\n"


@ROOT_ONLY
def test_an_existing_file_keeps_its_owner(tmp_path, folded):
    out = tmp_path / "theirs.folded"
    out.write_text("old\n")
    os.chown(out, 1234, 5678)
    r = aiflame("convert", str(folded), "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    st = out.stat()
    assert (st.st_uid, st.st_gid) == (1234, 5678)


def test_sigterm_leaves_no_file(tmp_path):
    """A slow conversion terminated half way: no output, no temporary file."""
    big = tmp_path / "big.folded"
    big.write_text("".join(f"a{i % 97};b{i % 89};c{i} {i}\n" for i in range(400_000)))
    out = tmp_path / "out.html"
    p = subprocess.Popen(
        [sys.executable, "-m", "aiflame", "flamegraph", str(big), "-o", str(out)],
        stderr=subprocess.PIPE,
    )
    try:
        p.wait(timeout=1.5)
    except subprocess.TimeoutExpired:
        p.terminate()
    _, err = p.communicate(timeout=120)
    assert "Traceback" not in err.decode()
    if p.returncode == 0:
        pytest.skip("the conversion ended before the signal")
    assert p.returncode == 143, err.decode()
    assert not out.exists()
    no_temporary_files(tmp_path)


def test_output_in_a_missing_directory(tmp_path):
    with pytest.raises(AiflameError, match="does not exist"):
        write_output(str(tmp_path / "gone" / "x.folded"), "a 1\n")


def test_files_that_go_together_are_written_together(tmp_path):
    """A report and its flame page: when the second cannot be written, neither is."""
    first, second = tmp_path / "report.flame.html", tmp_path / "report.html"
    second.mkdir()
    with pytest.raises(AiflameError, match="is a directory"):
        write_outputs([(str(first), "<html>flame</html>"), (str(second), "<html>r</html>")])
    assert not first.exists()
    no_temporary_files(tmp_path)
    second.rmdir()
    write_outputs([(str(first), "flame"), (str(second), "report")])
    assert first.read_text() == "flame" and second.read_text() == "report"
