"""A PyTorch program for the agent's memory snapshot test. Usage: snapshot_model.py READY
[SNAPSHOT.pickle.gz]. With a snapshot file, ``torch.cuda.memory._snapshot`` answers with it
(a real snapshot recorded on a GPU: this machine has none, and the CPU wheel has no CUDA
allocator to snapshot); without, the CPU wheel's own call runs and fails."""

import gzip
import pickle
import sys
import time
from pathlib import Path

import torch

if len(sys.argv) > 2:
    with gzip.open(sys.argv[2], "rb") as f:
        recorded = pickle.load(f)
    torch.cuda.memory._snapshot = lambda *a, **k: recorded

w = torch.randn(64, 64)
Path(sys.argv[1]).write_text("ready")
end = time.time() + 120
while time.time() < end:
    w = torch.tanh(w @ w.T / 64)
    time.sleep(0.01)
