"""Regenerate the py-spy fixtures of tests/unit/test_pyspy.py (needs torch and py-spy).

Runs a small CPU training loop (a conv net, so oneDNN JIT kernels run) with oneDNN's perf
map enabled, attaches ``py-spy record --native --idle`` for a few seconds once torch is
imported, and keeps the speedscope output and the perf map under stable names.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
WORKLOAD = r"""
import sys, threading, time
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 3, 32, 32); y = torch.randint(0, 4, (8,))
def sleeper():
    time.sleep(30)
threading.Thread(target=sleeper, name="sleeper", daemon=True).start()
def train_step():
    opt.zero_grad(); nn.functional.cross_entropy(model(x), y).backward(); opt.step()
train_step()
print("ready", flush=True)
t0 = time.time()
while time.time() - t0 < float(sys.argv[1]):
    train_step()
"""


GIL_WORKLOAD = r"""
import threading, time
def spin():
    t0 = time.time()
    while time.time() - t0 < 3:
        sum(i * i for i in range(1000))
def sleeper():
    time.sleep(3)
def waiter(ev):
    ev.wait(3)
ev = threading.Event()
ts = [threading.Thread(target=spin, name=f"spin{i}") for i in range(2)]
ts.append(threading.Thread(target=sleeper, name="sleeper"))
ts.append(threading.Thread(target=waiter, args=(ev,), name="waiter"))
[t.start() for t in ts]
print("ready", flush=True)
[t.join() for t in ts]
"""


def record_gil() -> None:
    """Two threads fighting for the GIL, one sleeping, one waiting on an Event."""
    target = subprocess.Popen(
        [sys.executable, "-c", GIL_WORKLOAD], stdout=subprocess.PIPE, text=True
    )
    assert target.stdout.readline().strip() == "ready"
    out = HERE / "pyspy-gil.speedscope.json"
    subprocess.run(
        [
            "py-spy",
            "record",
            "--pid",
            str(target.pid),
            "--native",
            "--idle",
            "--rate",
            "20",
            "--duration",
            "2",
            "--format",
            "speedscope",
            "--output",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    target.wait()


def main() -> None:
    env = dict(os.environ, ONEDNN_JIT_PROFILE="2", OMP_NUM_THREADS="1")
    target = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, "8"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert target.stdout.readline().strip() == "ready"
    out = HERE / "pyspy-native.speedscope.json"
    subprocess.run(
        [
            "py-spy",
            "record",
            "--pid",
            str(target.pid),
            "--native",
            "--idle",
            "--rate",
            "20",
            "--duration",
            "3",
            "--format",
            "speedscope",
            "--output",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    target.wait()
    time.sleep(0.1)
    shutil.copy(f"/tmp/perf-{target.pid}.map", HERE / "pyspy-native.perf.map")
    (HERE / "pyspy-native.pid").write_text(f"{target.pid}\n")
    record_gil()


if __name__ == "__main__":
    main()
