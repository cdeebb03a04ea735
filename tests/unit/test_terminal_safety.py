"""Nothing from a profile reaches the terminal raw: escape sequences and control characters
are spelled out, rich markup in a name is printed as it is, bidirectional controls are
shown (a name cannot pose as another) on the terminal and in the page; numpy's warnings do
not come before an error line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aiflame.cli import main as cli_main
from aiflame.errors import AiflameError
from aiflame.model import ProfileBuilder
from aiflame.render.flamedata import unpack
from aiflame.render.html import extract_data, render_html
from aiflame.render.visible import visible, visible_all, visible_data

TRITON = Path(__file__).parents[1] / "data" / "kineto" / "tracelens" / "torch_compile_triton"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def test_visible_spells_out_controls_and_bidi():
    assert visible("plain name (file.py:12)") == "plain name (file.py:12)"
    assert visible("ünïcödé 名前 🙂") == "ünïcödé 名前 🙂"
    assert visible("a\x1b[2Jb") == "a<U+001B>[2Jb"
    assert visible("tab\there\nnewline") == "tab<U+0009>here<U+000A>newline"
    assert (
        visible("c1 \x9b csi, \x85 nel, \x7f del") == "c1 <U+009B> csi, <U+0085> nel, <U+007F> del"
    )
    assert visible("gnp\u202eexe.") == "gnp<U+202E>exe."
    for c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069":
        assert visible(c) == f"<U+{ord(c):04X}>"
    assert visible_all(["ok", "x\x1by"]) == ["ok", "x<U+001B>y"]
    assert visible_data({"k\x07": ["\u202e", 1, None, ("\x1b",)]}) == {
        "k<U+0007>": ["<U+202E>", 1, None, ("<U+001B>",)]
    }


# Kernel names of the real trace, each with a prefix: short, so that tables show them whole.
PREFIXES = ("\x1b]0;pwned\x07", "\x1b[2J", "[bold]k[/bold]", "gnp\u202eexe.", "\x9b31m")


@pytest.fixture(scope="module")
def hostile_trace(tmp_path_factory) -> Path:
    """The real torch.compile trace with its kernels renamed: a hostile prefix each."""
    doc = json.loads(gzip.decompress((TRITON / "trace.json.gz").read_bytes()))
    names: dict[str, str] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            prefix = PREFIXES[len(names) % len(PREFIXES)]
            e["name"] = names.setdefault(e["name"], f"{prefix}{e['name'][-12:]}")
    path = tmp_path_factory.mktemp("hostile") / "trace.json"
    path.write_text(json.dumps(doc))
    return path


def test_analyze_report_prints_names_literally(hostile_trace):
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "analyze", str(hostile_trace)],
        capture_output=True,
        timeout=300,
    )
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    assert not any(c in out for c in RAW), "a control character reached the terminal"
    assert "<U+001B>]0;pwned<U+0007>" in out
    assert "<U+001B>[2J" in out
    assert "[bold]k[/bold]" in out  # rich markup printed, not obeyed
    assert "gnp<U+202E>exe." in out
    assert "<U+009B>31m" in out


def test_analyze_json_keeps_names_as_they_are(hostile_trace, tmp_path):
    """JSON escapes control characters itself: the data stays exact."""
    out = tmp_path / "r.json"
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "analyze", str(hostile_trace), "--json", str(out)],
        capture_output=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr.decode()
    text = out.read_text()
    assert not any(c in text for c in RAW)
    assert "\\u001b]0;pwned\\u0007" in text and "gnp\\u202eexe." in text


def test_error_lines_spell_out_what_the_input_said(tmp_path):
    """A pickle asking for a 'module' named like an escape sequence: the refusal quotes it."""
    bad = tmp_path / "snap.pickle"
    bad.write_bytes(
        b"\x80\x04}\x94(\x8c\x08segments\x94\x8c\x06\x1b]0;x\x07\x8c\x04\x1b[2J\x93)R\x94u."
    )
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "info", str(bad)], capture_output=True, timeout=120
    )
    err = r.stderr.decode()
    assert r.returncode == 1
    assert "refused to load" in err and "<U+001B>" in err
    assert not any(c in err for c in RAW)
    assert len(err.strip().splitlines()) == 1


def test_info_output_is_visible(tmp_path):
    """info quotes the input's path and what the importer says about it."""
    path = tmp_path / "x\x1b[2J.folded"
    path.write_text("a;b 1\n")
    r = subprocess.run(
        [sys.executable, "-m", "aiflame", "info", str(path)], capture_output=True, timeout=120
    )
    assert r.returncode == 0
    assert "\x1b" not in r.stdout.decode() and "<U+001B>[2J" in r.stdout.decode()


def test_the_page_shows_bidi_controls():
    b = ProfileBuilder()
    b.add(b.stack([b.frame("main"), b.frame("gnp\u202eexe."), b.frame("esc\x1b[2J")]), 1)
    header, payload = extract_data(render_html(b.build(), title="t\u202eitle"))
    strings = unpack(header, payload)["strings"]
    assert "gnp<U+202E>exe." in strings and "esc<U+001B>[2J" in strings
    assert not any("\u202e" in s or "\x1b" in s for s in strings)
    assert header["title"] == "t<U+202E>itle"


def test_numpy_warnings_do_not_come_before_the_error_line(monkeypatch, capsys):
    import aiflame.cli.info as info

    def warn_then_fail(args: object) -> int:
        np.float64(1e308) * 10  # RuntimeWarning: overflow encountered
        np.array([0.0]) / 0.0  # RuntimeWarning: invalid value
        raise AiflameError("x.folded: the samples values add up to more than a float holds")

    monkeypatch.setattr(info, "run", warn_then_fail)
    assert cli_main.main(["info", "x.folded"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "aiflame: error: x.folded: the samples values add up to more than a float holds"
    ]


def test_warnings_of_a_command_that_succeeds_are_one_visible_line(monkeypatch, capsys):
    import warnings

    import aiflame.cli.info as info

    def warn(args: object) -> int:
        np.float64(1e308) * 10  # numpy's floating-point warnings are left out
        warnings.warn("odd \x1b[2J thing", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(info, "run", warn)
    assert cli_main.main(["info", "x.folded"]) == 0
    assert capsys.readouterr().err.splitlines() == ["aiflame: warning: odd <U+001B>[2J thing"]


def test_a_bug_is_one_line_too(monkeypatch, capsys):
    import aiflame.cli.info as info

    def bug(args: object) -> int:
        raise KeyError("\x1b]0;name")

    monkeypatch.setattr(info, "run", bug)
    assert cli_main.main(["info", "x.folded"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiflame: internal error: KeyError")
    assert "\x1b" not in lines[0]
