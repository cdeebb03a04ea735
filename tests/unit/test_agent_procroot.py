"""Another process's /tmp through /proc/PID/root: links it made are never followed (they
would be resolved from the agent's root, the host's), FIFOs never block the reader."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from aiflame.agent import procroot


@pytest.fixture
def names():
    made: list[Path] = []

    def name(kind: str) -> str:
        n = f"aiflame-test-{kind}-{uuid.uuid4().hex[:8]}"
        made.append(Path("/tmp") / n)
        return n

    yield name
    for p in made:
        if p.is_symlink() or p.exists():
            p.unlink()


def test_links_are_not_followed(tmp_path, names):
    secret = tmp_path / "shadow"
    secret.write_text("root:secret\n")
    link = names("link")
    os.symlink(secret, f"/tmp/{link}")
    with procroot.tmp_dir(os.getpid()) as d:
        assert not procroot.exists(d, link)
        with pytest.raises(OSError):
            procroot.open_read(d, link)
        procroot.write_new(d, link, b"request-1")  # replaces the link, not its target
    assert secret.read_text() == "root:secret\n"
    assert not Path(f"/tmp/{link}").is_symlink()
    assert Path(f"/tmp/{link}").read_bytes() == b"request-1"


def test_a_fifo_is_refused_without_blocking(names):
    fifo = names("fifo")
    os.mkfifo(f"/tmp/{fifo}")
    with procroot.tmp_dir(os.getpid()) as d:
        assert not procroot.exists(d, fifo)
        with pytest.raises(OSError, match="not a regular file"):
            procroot.open_read(d, fifo)


def test_a_regular_file_is_read(names):
    name = names("file")
    Path(f"/tmp/{name}").write_bytes(b'{"signal": 60}')
    with procroot.tmp_dir(os.getpid()) as d:
        assert procroot.exists(d, name)
        with procroot.open_read(d, name) as f:
            assert f.read() == b'{"signal": 60}'
        procroot.remove(d, name)
    assert not Path(f"/tmp/{name}").exists()
