"""``--open``: the written page goes to the browser that $BROWSER names (a script here that
records the URL it is given, as Python's webbrowser module runs it); without a browser the
page's file:// URL is printed; commands that would write no page refuse --open up front."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
FOLDED = DATA / "html" / "perf-iperf-stacks-pidtid-01-collapsed-all.txt"
KINETO = DATA / "kineto" / "hta" / "triton_example" / "triton_example.json.gz"
SNAPSHOT = DATA / "memory" / "medium_128_inference_memory_snapshot.pickle.gz"
BEFORE, AFTER = DATA / "diff" / "before.txt", DATA / "diff" / "after.txt"

GUI_VARIABLES = ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "SSH_TTY")


def environment(**env: str) -> dict[str, str]:
    """This environment without any browser or display, plus ``env``; a relative
    PYTHONPATH made absolute, for commands run in another directory."""
    clean = {k: v for k, v in os.environ.items() if k not in GUI_VARIABLES}
    if clean.get("PYTHONPATH"):
        parts = clean["PYTHONPATH"].split(os.pathsep)
        clean["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in parts)
    return {**clean, **env}


def aiflame(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aiflame", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=environment(**env),
    )


@pytest.fixture
def browser(tmp_path: Path) -> tuple[str, Path]:
    """A $BROWSER command that writes the URL it was asked to open to a file."""
    log = tmp_path / "opened.txt"
    script = tmp_path / "fake-browser"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{log}"\n')
    script.chmod(0o755)
    return str(script), log


@pytest.mark.parametrize(
    ("command", "page"),
    [
        (["flamegraph", str(FOLDED), "-o", "{out}/flame.html"], "flame.html"),
        (["convert", str(FOLDED), "-o", "{out}/conv.html"], "conv.html"),
        (["diff", str(BEFORE), str(AFTER), "-o", "{out}/diff.html"], "diff.html"),
        (["memory", str(SNAPSHOT), "-o", "{out}/mem.html"], "mem.html"),
        (["analyze", str(KINETO), "-o", "{out}/report.html"], "report.html"),
    ],
)
def test_open_sends_the_written_page_to_browser(tmp_path, browser, command, page):
    command_line, log = browser
    args = [a.format(out=tmp_path) for a in command]
    result = aiflame(*args, "--open", BROWSER=command_line)
    assert result.returncode == 0, result.stderr
    url = (tmp_path / page).resolve().as_uri()
    assert log.read_text().splitlines() == [url]
    assert f"aiflame: opened {url}" in result.stderr


def test_without_browser_the_url_is_printed(tmp_path, browser):
    _, log = browser
    out = tmp_path / "flame.html"
    for env in ({}, {"SSH_CONNECTION": "10.0.0.2 50000 10.0.0.1 22"}):
        result = aiflame("flamegraph", str(FOLDED), "-o", str(out), "--open", **env)
        assert result.returncode == 0, result.stderr
        assert f"the page is {out.resolve().as_uri()}" in result.stderr
    assert not log.exists()


def test_a_browser_that_fails_leaves_the_url(tmp_path):
    out = tmp_path / "flame.html"
    result = aiflame("flamegraph", str(FOLDED), "-o", str(out), "--open", BROWSER="/bin/false")
    assert result.returncode == 0, result.stderr
    assert f"the page is {out.resolve().as_uri()}" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["convert", str(FOLDED), "--open", "-o", "{out}/x.folded"], "is not one"),
        (["flamegraph", str(FOLDED), "--open", "-o", "-"], "give -o PAGE.html"),
        (["diff", str(BEFORE), str(AFTER), "--open", "-o", "{out}/x.folded"], "is not one"),
        (["analyze", str(KINETO), "--open"], "give -o PAGE.html"),
        (["record", "--open", "-o", "{out}/x.pb.gz", "--", "true"], "is not one"),
    ],
)
def test_open_without_a_page_is_refused_before_any_work(tmp_path, browser, args, fragment):
    command_line, log = browser
    result = aiflame(*[a.format(out=tmp_path) for a in args], BROWSER=command_line)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiflame: error: --open"), result.stderr
    assert fragment in lines[0]
    assert list(tmp_path.glob("x.*")) == [] and not log.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="py-spy attaching needs Linux")
def test_record_opens_its_page_not_its_pprof_file(tmp_path, browser):
    command_line, log = browser
    prog = tmp_path / "spin.py"
    prog.write_text("import time\nt = time.time()\nwhile time.time() - t < 1.5:\n    pass\n")
    cmd = ["record", "--no-ebpf", "--open", "--", sys.executable, str(prog)]
    result = aiflame(*cmd, cwd=tmp_path, BROWSER=command_line)
    assert result.returncode == 0, result.stderr
    (page,) = tmp_path.glob("aiflame-spin-*.html")
    assert log.read_text().splitlines() == [page.resolve().as_uri()]
