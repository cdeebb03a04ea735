"""The record bootstrap (sitecustomize) in real interpreters, with a stand-in ``torch``.

The stand-in only records which profiler calls were made and on which thread, which is what
the bootstrap's logic decides; the real PyTorch profiler runs in tests/integration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aiflame.collectors.session import BOOTSTRAP_DIR

FAKE_TORCH = {
    "torch/__init__.py": "from torch import nn",
    "torch/autograd/__init__.py": "",
    "torch/autograd/profiler.py": """
        import json, os, threading
        CALLS = []
        def _call(what):
            CALLS.append((what, threading.current_thread().name))
        class profile:
            def __init__(self, use_kineto=False, with_stack=False, use_cpu=True, use_device=None):
                if os.environ.get("FAKE_FAIL"):
                    raise RuntimeError("no profiler here")
                self.use_device = use_device
                self.options = {"with_stack": with_stack, "kineto": use_kineto, "cpu": use_cpu}
            def _prepare_trace(self):
                _call("prepare")
            def _start_trace(self):
                _call("start")
            def __exit__(self, *exc):
                _call("stop")
            def export_chrome_trace(self, path):
                with open(path, "w") as f:
                    json.dump({"traceEvents": [], "calls": CALLS, **self.options}, f)
    """,
    "torch/nn/__init__.py": "from torch.nn.modules.module import Module",
    "torch/nn/modules/__init__.py": "",
    "torch/nn/modules/module.py": """
        _hooks = {}
        class _Handle:
            def __init__(self, key):
                self.key = key
            def remove(self):
                _hooks.pop(self.key, None)
        def register_module_forward_pre_hook(hook):
            _hooks[id(hook)] = hook
            return _Handle(id(hook))
        class Module:
            def __call__(self, *args):
                for hook in (*_hooks.values(),):
                    hook(self, args)
                return args
    """,
    "torch/profiler.py": """
        class ProfilerActivity:
            CPU = "ProfilerActivity.CPU"
            CUDA = "ProfilerActivity.CUDA"
        def supported_activities():
            return {ProfilerActivity.CPU}
    """,
}


@pytest.fixture
def fake_torch(tmp_path):
    root = tmp_path / "site"
    for name, text in FAKE_TORCH.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run(tmp_path, program, extra_path=(), **env):
    out = tmp_path / "rec"
    out.mkdir(exist_ok=True)
    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.update(
        AIFLAME_RECORD_DIR=str(out),
        PYTHONPATH=os.pathsep.join([BOOTSTRAP_DIR, *map(str, extra_path)]),
        **env,
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program), "arg1"],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc, out


def files(out: Path) -> set[str]:
    return {p.name.replace(str(p.name.split("-")[1].split(".")[0]), "PID") for p in out.iterdir()}


def trace(out: Path) -> dict:
    [path] = [p for p in out.glob("torch-*.json") if not p.name.endswith(".meta.json")]
    return json.loads(path.read_text())


def test_program_without_torch_is_unaffected(tmp_path):
    program = "import sys; print('hello', sys.argv[1:]); sys.exit(3)"
    plain = subprocess.run([sys.executable, "-c", program, "arg1"], capture_output=True, text=True)
    proc, out = run(tmp_path, program, AIFLAME_TORCH_WINDOW="5", RANK="2")
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, plain.stdout, plain.stderr)
    assert files(out) == {"proc-PID.json"}
    info = json.loads(next(out.glob("proc-*.json")).read_text())
    assert info["pid"] > 0 and info["argv"] == ["-c", "arg1"] and info["rank"] == "2"


BUSY = """
def busy(seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        sum(range(1000))
"""


def test_window_opens_at_the_first_module_call_on_the_main_thread(tmp_path, fake_torch):
    program = (
        "import time, torch\nfrom torch.autograd import profiler\n"
        + BUSY
        + """
busy(0.5)                      # imports, building the model: not in the window
assert profiler.CALLS == [], profiler.CALLS
torch.nn.Module()(1)           # the first forward opens it
assert [c[0] for c in profiler.CALLS] == ["prepare", "start"], profiler.CALLS
busy(1.0)                      # the window (0.3 s) closes in here
print("done")
"""
    )
    proc, out = run(tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="0.3")
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    assert files(out) == {"proc-PID.json", "torch-PID.json", "torch-PID.meta.json"}
    t = trace(out)
    assert t["calls"] == [[call, "MainThread"] for call in ("prepare", "start", "stop")]
    assert t["with_stack"] is True and t["kineto"] is True and t["cpu"] is True
    timings = json.loads(next(out.glob("*.meta.json")).read_text())
    assert {"start_s", "stop_s", "export_s"} <= set(timings) and timings["activities"] == ["CPU"]


def test_a_first_call_off_the_main_thread_still_starts_it_on_the_main_thread(tmp_path, fake_torch):
    program = (
        "import threading, time, torch\n"
        + BUSY
        + """
threading.Thread(target=torch.nn.Module(), args=(1,)).start()
busy(1.0)
"""
    )
    proc, out = run(tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="0.3")
    assert proc.returncode == 0, proc.stderr
    assert trace(out)["calls"] == [[c, "MainThread"] for c in ("prepare", "start", "stop")]


def test_program_ending_inside_the_window_still_exports(tmp_path, fake_torch):
    program = "import sys, torch\ntorch.nn.Module()(1)\nsys.exit(3)\n"
    proc, out = run(tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="60")
    assert proc.returncode == 3
    assert [c[0] for c in trace(out)["calls"]] == ["prepare", "start", "stop"]
    assert not list(out.glob("*.pending"))


def test_delay_after_the_first_module_call(tmp_path, fake_torch):
    program = (
        "import time, torch\nfrom torch.autograd import profiler\n"
        + BUSY
        + """
torch.nn.Module()(1)
busy(0.2)
assert profiler.CALLS == [], profiler.CALLS  # not started yet
busy(1.0)
"""
    )
    proc, out = run(
        tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="0.2", AIFLAME_TORCH_DELAY="0.6"
    )
    assert proc.returncode == 0, proc.stderr
    assert [c[0] for c in trace(out)["calls"]] == ["prepare", "start", "stop"]


def test_a_program_without_module_calls_gets_the_fallback_window(tmp_path, fake_torch):
    program = "import time, torch\n" + BUSY + "busy(1.0)\n"
    proc, out = run(
        tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="0.2", AIFLAME_TORCH_FALLBACK="0.3"
    )
    assert proc.returncode == 0, proc.stderr
    assert trace(out)["calls"] == [[c, "MainThread"] for c in ("prepare", "start", "stop")]


def test_a_program_starting_its_own_profiler_stops_ours_first(tmp_path, fake_torch):
    program = """
        import torch
        from torch.autograd import profiler
        torch.nn.Module()(1)
        profiler.profile()._prepare_trace()   # what torch.profiler.profile().start() does
        print(profiler.CALLS)
    """
    proc, out = run(tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="60")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("('stop', 'MainThread'), ('prepare', 'MainThread')]")
    assert [c[0] for c in trace(out)["calls"]] == ["prepare", "start", "stop"]


def test_profiler_failure_is_reported_not_raised(tmp_path, fake_torch):
    program = "import torch\ntorch.nn.Module()(1)\nprint('ok')\n"
    proc, out = run(tmp_path, program, [fake_torch], AIFLAME_TORCH_WINDOW="1", FAKE_FAIL="1")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")
    [err] = out.glob("torch-*.error")
    assert "start: RuntimeError: no profiler here" in err.read_text()


def test_the_shadowed_sitecustomize_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins; builtins.OTHER_SITE = 1\n")
    proc, _ = run(tmp_path, "import builtins; print(builtins.OTHER_SITE)", [other])
    assert proc.stdout == "1\n", proc.stderr
