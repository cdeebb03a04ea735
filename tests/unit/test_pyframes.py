"""Python frames named alike whether py-spy sampled them or the PyTorch profiler traced them."""

from __future__ import annotations

import textwrap

import pytest

from aiflame.symbolize.pyframes import PythonNaming, display_name, split_qualname

SOURCE = textwrap.dedent(
    """\
    import functools


    class Net:
        @functools.lru_cache
        def forward(self, x):
            y = x + 1
            return y

        def helper(self):
            def inner():
                return 1
            return inner()


    def step(net):
        return net.forward(1)
    """
)


@pytest.mark.parametrize(
    ("qualname", "expected"),
    [
        ("Net.forward", ("Net", "forward")),
        ("Outer.Inner.method", ("Outer.Inner", "method")),
        ("step", (None, "step")),
        ("<module>", (None, "<module>")),
        ("Net.helper.<locals>.inner", (None, "inner")),
        ("f.<locals>.C.m", (None, "m")),
    ],
)
def test_split_qualname(qualname, expected):
    assert split_qualname(qualname) == expected


@pytest.fixture
def project(tmp_path):
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "model.py").write_text(SOURCE)
    return tmp_path


def test_sampled_and_traced_frames_get_the_same_name_file_and_line(project):
    naming = PythonNaming([str(project)])
    file = str(project / "app" / "model.py")
    # py-spy: qualified name, absolute file, the line running now (inside the body).
    sampled = naming.sampled("Net.forward", file, 7)
    # The profiler: bare name, path relative to sys.path, co_firstlineno (the decorator).
    traced = naming.traced("forward", "app/model.py", 5)
    assert sampled == traced
    assert sampled.name == "Net > forward (app/model.py:5)"
    assert sampled.file == file and sampled.line == 5


def test_functions_without_class_and_nested_functions(project):
    naming = PythonNaming([str(project)])
    file = str(project / "app" / "model.py")
    assert naming.sampled("step", file, 17) == naming.traced("step", "app/model.py", 16)
    assert naming.sampled("step", file, 17).name == "step (app/model.py:16)"
    nested = naming.sampled("Net.helper.<locals>.inner", file, 12)
    assert nested.name == "inner (app/model.py:11)"
    assert nested == naming.traced("inner", "app/model.py", 11)


def test_frames_running_when_the_profiler_started_and_module_code(project):
    naming = PythonNaming([str(project)])
    file = str(project / "app" / "model.py")
    # The profiler writes the current line of frames that were running when it started.
    assert naming.traced("step", "app/model.py", 17) == naming.sampled("step", file, 17)
    assert naming.traced("<module>", "app/model.py", 16) == naming.sampled("<module>", file, 4)
    assert naming.sampled("<module>", file, 4).name == "<module> (app/model.py:1)"


def test_unreadable_sources_keep_what_the_recorder_said(tmp_path):
    naming = PythonNaming([str(tmp_path)])
    gone = str(tmp_path / "gone.py")
    assert naming.sampled("Net.forward", gone, 7).name == "Net > forward (gone.py:7)"
    assert naming.traced("forward", "gone.py", 5).name == "forward (gone.py:5)"
    off = PythonNaming([str(tmp_path)], read_sources=False)
    assert off.traced("forward", "gone.py", 5).file == "gone.py"


def test_files_are_relative_to_the_longest_root():
    naming = PythonNaming(["/opt/venv/lib/python3.11/site-packages", "/opt/venv", "/srv"])
    assert naming.relative("/opt/venv/lib/python3.11/site-packages/torch/nn/f.py") == (
        "torch/nn/f.py"
    )
    assert naming.relative("/opt/venv/tool.py") == "tool.py"
    assert naming.relative("/usr/lib/python3.12/threading.py") == "threading.py"
    assert naming.relative("/home/x/dist-packages/np/core.py") == "np/core.py"
    assert naming.relative("/elsewhere/run.py") == "/elsewhere/run.py"


def test_display_name():
    assert display_name("f", None, "a.py", 3) == "f (a.py:3)"
    assert display_name("f", "A.B", "a.py", 3) == "A.B > f (a.py:3)"
    assert display_name("<lambda>", None, "", 0) == "<lambda>"
