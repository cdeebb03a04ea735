"""`aiflame record --memory`: its errors come before the program runs, in one line."""

from __future__ import annotations

import argparse

import pytest

from aiflame.cli import main as cli_main
from aiflame.cli import record_memory
from aiflame.errors import AiflameError


def run(capsys, *argv: str) -> tuple[int, str]:
    code = cli_main.main(list(argv))
    return code, capsys.readouterr().err


def test_a_metric_record_memory_does_not_write_is_refused(capsys, tmp_path):
    marker = tmp_path / "ran"
    code, err = run(
        capsys, "record", "--memory", "--metric", "cpu-samples", "--", "touch", str(marker)
    )
    assert code == 1 and not marker.exists()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [
        "aiflame: error: --metric cpu-samples: record --memory writes peak-bytes, "
        "alloc-bytes, alloc-count, failed-alloc-count, failed-alloc-bytes"
    ]


def test_without_ebpf_it_says_why_and_runs_nothing(capsys, tmp_path, monkeypatch):
    import aiflame.collectors.ebpf.support as support

    monkeypatch.setattr(support, "unavailable_reason", lambda: "eBPF needs root (test)")
    marker = tmp_path / "ran"
    code, err = run(capsys, "record", "--memory", "--", "touch", str(marker))
    assert code == 1 and not marker.exists()
    assert (
        err.strip() == "aiflame: error: --memory needs the eBPF collector: eBPF needs root (test)"
    )


def test_check_accepts_the_memory_metrics(monkeypatch):
    import aiflame.collectors.ebpf.support as support

    monkeypatch.setattr(support, "unavailable_reason", lambda: None)
    for metric in (None, *record_memory.METRICS):
        record_memory.check(argparse.Namespace(metric=metric))
    with pytest.raises(AiflameError, match="gpu-time"):
        record_memory.check(argparse.Namespace(metric="gpu-time"))
