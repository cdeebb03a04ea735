"""How many processes collapse a large perf script file: one per CPU idle right now."""

from __future__ import annotations

import os

import pytest

from aiflame.sources.perf import parallel as perf_parallel


@pytest.fixture
def cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    return 4


def loadavg(monkeypatch, tmp_path, running: int, one_minute: float = 9.0) -> None:
    path = tmp_path / "loadavg"
    # A one-minute average still high from an earlier command, but few tasks running now.
    path.write_text(f"{one_minute:.2f} 5.00 3.00 {running}/300 12345\n")
    monkeypatch.setattr(perf_parallel, "LOADAVG", str(path))


def test_idle_now_uses_every_cpu_whatever_the_lagging_average(monkeypatch, tmp_path, cpus):
    loadavg(monkeypatch, tmp_path, running=1)  # only this process
    assert perf_parallel.default_jobs() == cpus


def test_busy_cpus_are_left_alone(monkeypatch, tmp_path, cpus):
    loadavg(monkeypatch, tmp_path, running=3)  # this one and two others
    assert perf_parallel.default_jobs() == 2
    loadavg(monkeypatch, tmp_path, running=9)
    assert perf_parallel.default_jobs() == 1


def test_without_proc_the_load_average_decides(monkeypatch, tmp_path, cpus):
    monkeypatch.setattr(perf_parallel, "LOADAVG", str(tmp_path / "missing"))
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    assert perf_parallel.default_jobs() == 1
