"""Real eBPF tests: they load BPF programs into this machine's kernel.

They need root, a kernel with BTF and the system's libbpf.so.1; elsewhere they are
skipped, unless AIFLAME_REQUIRE_EBPF=1 (CI runs as root on a BTF kernel), where a missing
capability is a failure.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("AIFLAME_REQUIRE_EBPF") == "1"


@pytest.fixture(scope="session")
def ebpf() -> None:
    from aiflame.collectors.ebpf.support import unavailable_reason

    reason = unavailable_reason()
    if reason:
        if REQUIRED:
            pytest.fail(f"AIFLAME_REQUIRE_EBPF=1 but {reason}")
        pytest.skip(f"eBPF tests: {reason}")
