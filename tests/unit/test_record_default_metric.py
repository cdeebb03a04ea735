"""Which metric a recorded page opens on when eBPF and py-spy both sampled the program."""

from __future__ import annotations

import pytest

from aiflame.collectors.session import CPU_SAMPLES, PYTHON_SAMPLES, Session
from aiflame.model import FrameKind, ProfileBuilder


def profile(truncated: int, total: int, python_samples: float):
    b = ProfileBuilder([CPU_SAMPLES, PYTHON_SAMPLES])
    native = b.stack([b.frame("gc_collect_main", FrameKind.NATIVE)])
    python = b.stack([b.frame("step (train.py:9)", FrameKind.PYTHON)])
    b.add(native, [10.0, 0.0])
    b.add(python, [0.0, python_samples])
    b.meta["truncated_user_stacks"] = [truncated, total]
    return b.build()


@pytest.fixture
def session():
    s = Session.__new__(Session)  # the choice needs no recorder running
    s.notes = []
    return s


def test_python_view_first_when_ebpf_stacks_are_cut_short(session):
    assert session._default_metric(profile(95, 100, 40.0)) == "python-samples"
    assert "python-samples" in session.notes[0] and "95%" in session.notes[0]


def test_ebpf_view_first_when_its_stacks_are_whole_or_py_spy_saw_nothing(session):
    assert session._default_metric(profile(10, 100, 40.0)) == "cpu-samples"
    assert session._default_metric(profile(95, 100, 0.0)) == "cpu-samples"
    assert session.notes == []
