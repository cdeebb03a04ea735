"""Fixtures of the server tests: one server for the tests that isolate themselves by tenant."""

from __future__ import annotations

import re

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
    # only the characters a tenant id may hold: a test id with others would be refused as
    # a tenant (a 400) before the request reaches what the test checks
    return "t-" + re.sub(r"[^A-Za-z0-9_.-]", "", request.node.name.replace("[", "-"))[:100]
