"""Fixtures of the server tests: one server for the tests that isolate themselves by tenant."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "chdb", reason="aiflame server needs the fleet extra: pip install -e '.[fleet]'"
)
pytest.importorskip("uvicorn", reason="aiflame server needs the fleet extra")

from serverproc import ServerProcess


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One server for the tests that isolate themselves by tenant (X-Scope-OrgID)."""
    s = ServerProcess(tmp_path_factory.mktemp("store") / "data").start()
    yield s
    s.stop()


@pytest.fixture
def tenant(request) -> str:
    return "t-" + request.node.name.replace("[", "-").replace("]", "")[:100].replace(" ", "")
