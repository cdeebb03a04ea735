"""Functions of a source file by line: from its code objects, its .pyc when it can be trusted."""

from __future__ import annotations

import os
import py_compile
import sys
import textwrap
from pathlib import Path

import pytest

from aiflame.symbolize.pyclass import ClassResolver, Function, split_owner

SOURCE = textwrap.dedent(
    """\
    import functools


    class Outer:
        class Inner:
            @functools.cache
            def method(self):
                return [x for x in range(3)]

        def helper(self):
            def nested():
                return 1

            return nested()


    def free(a):
        return lambda: a
    """
)


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "mod.py"
    path.write_text(SOURCE)
    return path


def test_functions_by_line_with_their_classes(module: Path):
    r = ClassResolver()
    f = str(module)
    assert r.function_at(f, 7) == Function(6, 8, "method", "Outer.Inner")  # from the decorator
    assert r.function_at(f, 6).name == "method"
    # a comprehension has its own code object before 3.12 (PEP 709 inlines it since)
    comprehension = r.function_at(f, 8)
    assert comprehension.name == ("<listcomp>" if sys.version_info < (3, 12) else "method")
    assert r.function_at(f, 11) == Function(11, 12, "nested", "")  # inside a function: bare
    assert r.function_at(f, 14) == Function(10, 14, "helper", "Outer")
    assert r.function_at(f, 18).name == "<lambda>"
    assert r.function_at(f, 17) == Function(17, 18, "free", "")
    assert r.function_at(f, 1) is None  # module code
    assert r.class_of(f, 10, "helper") == "Outer" and r.class_of(f, 10, "other") is None


def test_split_owner():
    assert split_owner("A.B.m") == ("A.B", "m")
    assert split_owner("f") == ("", "f")
    assert split_owner("f.<locals>.C.m") == ("", "m")


def _same_size_and_mtime(path: Path, text: str) -> None:
    """Rewrite ``path`` keeping the size and mtime a .pyc is checked against."""
    stat = path.stat()
    assert len(text) == stat.st_size
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_pyc_of_the_source_is_read_instead_of_compiling(module: Path):
    py_compile.compile(str(module), doraise=True)
    # A source changed behind the .pyc's back (same size and mtime, as the interpreter
    # checks): the names come from the .pyc, so it is what was read.
    _same_size_and_mtime(module, SOURCE.replace("def free(a)", "def eerf(a)"))
    assert ClassResolver().function_at(str(module), 17).name == "free"


def test_a_stale_or_writable_pyc_is_not_trusted(module: Path):
    pyc = Path(py_compile.compile(str(module), doraise=True))
    _same_size_and_mtime(module, SOURCE.replace("def free(a)", "def eerf(a)"))
    os.chmod(pyc, 0o666)  # anyone could have written it: compile the source instead
    assert ClassResolver().function_at(str(module), 17).name == "eerf"
    os.chmod(pyc, 0o644)
    module.write_text(SOURCE.replace("def free(a)", "def other_name(a)"))  # size changed
    assert ClassResolver().function_at(str(module), 17).name == "other_name"


def test_hash_checked_pyc(module: Path):
    mode = py_compile.PycInvalidationMode.CHECKED_HASH
    py_compile.compile(str(module), doraise=True, invalidation_mode=mode)
    assert ClassResolver().function_at(str(module), 17).name == "free"
    _same_size_and_mtime(module, SOURCE.replace("def free(a)", "def eerf(a)"))
    assert ClassResolver().function_at(str(module), 17).name == "eerf"  # the hash differs


def test_unreadable_and_odd_files(tmp_path: Path):
    r = ClassResolver()
    assert r.function_at(str(tmp_path / "missing.py"), 3) is None
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    assert r.function_at(str(bad), 1) is None
    warns = tmp_path / "warns.py"
    warns.write_text('def f():\n    return "\\d"\n')  # an invalid escape: no warning printed
    assert r.function_at(str(warns), 2).name == "f"
    assert ClassResolver(enabled=False).function_at(str(warns), 2) is None


def test_a_changed_file_is_indexed_again(tmp_path: Path):
    """Indexes are cached by path and checked against the file's modification time and
    size: a long-running profiler sees the source as it is now."""
    src = tmp_path / "net.py"
    src.write_text("class Net:\n    def forward(self):\n        return 1\n")
    resolver = ClassResolver()
    assert resolver.class_of(str(src), 2, "forward") == "Net"
    src.write_text("\n\nclass Other:\n    def forward(self):\n        return 1\n")
    os.utime(src, ns=(1, 1))  # a modification time of its own, whatever the clock says
    assert resolver.class_of(str(src), 4, "forward") == "Other"
    assert resolver.class_of(str(src), 2, "forward") is None


def test_the_cache_is_bounded(tmp_path: Path):
    resolver = ClassResolver(max_files=2)
    for i in range(4):
        src = tmp_path / f"m{i}.py"
        src.write_text(f"class C{i}:\n    def f(self):\n        return {i}\n")
        assert resolver.class_of(str(src), 2, "f") == f"C{i}"
    assert len(resolver._files) == 2
