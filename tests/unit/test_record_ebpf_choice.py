"""How ``aiflame record`` picks the eBPF sampler: auto (one note when it cannot), --ebpf
(required: an error), --no-ebpf, --all; without loading anything into the kernel."""

from __future__ import annotations

import pytest

from aiflame.cli.main import main
from aiflame.collectors import session as session_module
from aiflame.collectors.ebpf import support
from aiflame.collectors.session import RecordOptions, Session
from aiflame.errors import AiflameError

WHY = "eBPF needs root (or CAP_BPF and CAP_PERFMON)"


@pytest.fixture
def no_ebpf(monkeypatch):
    monkeypatch.setattr(support, "unavailable_reason", lambda: WHY)


def test_auto_falls_back_to_pyspy_with_one_note(no_ebpf):
    session = Session(RecordOptions(ebpf="auto"))
    try:
        session._start_ebpf(follow_children=True)
        assert session.ebpf is None
        assert session.notes == [f"eBPF collector unavailable ({WHY}); CPU stacks from py-spy only"]
        assert [name for name, _ in session._configs()] == ["cpu"]
    finally:
        session.cleanup()


def test_native_stream_only_without_ebpf(no_ebpf):
    session = Session(RecordOptions(ebpf="auto", native_rate=None, native_fallback=2))
    try:
        session._start_ebpf(follow_children=True)
        assert [(n, c.rate) for n, c in session._configs()] == [("cpu", 99), ("native", 2)]
    finally:
        session.cleanup()


def test_required_ebpf_is_an_error_before_anything_runs(no_ebpf, tmp_path, capsys):
    marker = tmp_path / "ran"
    code = main(["record", "--ebpf", "-o", str(tmp_path / "x.folded"), "--", "touch", str(marker)])
    assert code == 1
    assert capsys.readouterr().err.strip().endswith(f"the eBPF collector cannot run: {WHY}")
    assert not marker.exists()  # the program was never started


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--all", "--pid", "1"], "--all records every process: give no --pid and no command"),
        (["--all", "--", "true"], "--all records every process"),
        (["--all", "--no-ebpf"], "--all needs the eBPF sampler: drop --no-ebpf"),
    ],
)
def test_all_option_errors(argv, message, capsys):
    assert main(["record", *argv]) == 1
    assert message in capsys.readouterr().err


def test_ebpf_and_no_ebpf_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["record", "--ebpf", "--no-ebpf", "--", "true"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_all_without_ebpf_support_is_an_error(no_ebpf, capsys):
    assert main(["record", "--all", "-d", "1"]) == 1
    assert f"the eBPF collector cannot run: {WHY}" in capsys.readouterr().err


def test_without_ebpf_a_missing_py_spy_is_an_error_before_anything_runs(
    no_ebpf, monkeypatch, tmp_path, capsys
):
    def not_installed() -> str:
        raise AiflameError("py-spy is not installed; install it with: pip install py-spy")

    monkeypatch.setattr(session_module, "find_pyspy", not_installed)
    marker = tmp_path / "ran"
    code = main(["record", "-o", str(tmp_path / "x.folded"), "--", "touch", str(marker)])
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("aiflame: error: py-spy is not installed"), err
    assert err.endswith(f"eBPF cannot run either: {WHY}"), err  # why no sampler is left
    assert not marker.exists()
