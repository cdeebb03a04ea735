"""The line record prints when writing the profile keeps the user waiting."""

from __future__ import annotations

import io
import time

from aiflame.cli.progress import TailProgress


def test_nothing_is_printed_when_it_ends_in_time():
    out = io.StringIO()
    progress = TailProgress(delay=0.5, stream=out)
    progress("naming the eBPF samples' frames")
    progress("building the profile")
    progress.done()
    time.sleep(0.7)
    assert out.getvalue() == ""


def test_the_step_under_way_then_every_later_one():
    out = io.StringIO()
    progress = TailProgress(delay=0.05, stream=out)
    progress("naming the eBPF samples' frames")
    progress("reading the PyTorch profiler's trace")
    time.sleep(0.3)
    progress("writing x.html")
    progress.done()
    assert out.getvalue().splitlines() == [
        "aiflame: reading the PyTorch profiler's trace…",
        "aiflame: writing x.html…",
    ]
