"""The shipped BPF objects are what tools/build_bpf.py makes of their sources, byte for byte."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

import systools

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "src" / "aiflame" / "collectors" / "ebpf" / "objects"
# CI (AIFLAME_REQUIRE_EBPF=1) installs clang: there a missing compiler is a failure.


def _builder():
    spec = importlib.util.spec_from_file_location("build_bpf", ROOT / "tools" / "build_bpf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _need(condition: bool, reason: str) -> None:
    if not condition:
        systools.unavailable(reason)


def test_shipped_objects_match_their_sources(tmp_path):
    build = _builder()
    clang = next((shutil.which(c) for c in build.CLANG_CANDIDATES if shutil.which(c)), None)
    strip = next((shutil.which(c) for c in build.STRIP_CANDIDATES if shutil.which(c)), None)
    _need(
        clang is not None and strip is not None,
        "needs clang and llvm-strip (apt-get install clang llvm)",
    )
    pinned = (SHIPPED / "MANIFEST").read_text().splitlines()[0]
    # Another compiler version emits other (equally valid) bytes: only the pinned one counts.
    _need(pinned == f"clang {build.clang_version(clang)}", f"the objects were built by {pinned}")
    build.build(tmp_path)
    shipped = sorted(p.relative_to(SHIPPED) for p in SHIPPED.rglob("*") if p.is_file())
    rebuilt = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert rebuilt == shipped, "objects/ lists other files than the sources make"
    stale = [str(p) for p in shipped if (SHIPPED / p).read_bytes() != (tmp_path / p).read_bytes()]
    assert not stale, f"stale: {stale} (run python tools/build_bpf.py and commit)"


def test_every_source_has_objects_for_each_arch():
    build = _builder()
    for source in (ROOT / "src/aiflame/collectors/ebpf/bpf").glob("*.bpf.c"):
        stem = source.name.removesuffix(".bpf.c")
        for arch in build.ARCHES:
            assert (SHIPPED / arch / f"{stem}.bpf.o").is_file(), f"{arch}/{stem}.bpf.o missing"


def test_build_errors_are_one_message(tmp_path, monkeypatch):
    build = _builder()
    monkeypatch.setattr(build, "CLANG_CANDIDATES", ("no-such-clang-xyz",))
    with pytest.raises(build.BuildError, match="no-such-clang-xyz"):
        build.build(tmp_path)
