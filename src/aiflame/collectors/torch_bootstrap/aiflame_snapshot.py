"""GPU memory snapshots on request, inside the program: started by the bootstrap
(``sitecustomize``) when ``AIFLAME_SNAPSHOT=1`` is set, for ``aiflame agent``.

At start it takes a free real-time signal for its handler and says which in
``/tmp/aiflame-snapshot-<pid>.json`` (``{"signal": N}``), in the program's own file
system (the agent reads it through ``/proc/PID/root``, so a container needs nothing
mounted). The agent writes a request id into ``/tmp/aiflame-snapshot-<pid>.request`` and
sends the signal; the handler runs on the main thread at its next bytecode, takes
``torch.cuda.memory._snapshot()`` (the snapshot ``torch.cuda.memory._dump_snapshot``
writes, which ``aiflame memory`` and pytorch.org/memory_viz read) and writes it, pickled,
to ``/tmp/aiflame-snapshot-<pid>-<id>.pickle`` (renamed into place when complete), or one
line saying why not to ``...-<id>.error``.

Allocation stacks are in a snapshot only for what was allocated while the allocator
recorded its history: ``AIFLAME_SNAPSHOT_HISTORY=N`` turns that on (``torch.cuda.memory.
_record_memory_history(max_entries=N)``) when the program first imports torch; otherwise
the program's own call does. The program's own handler of that signal, if it installs one
later, wins: the agent sends the signal only while the kernel says the process catches it.
Runs in the target's interpreter: standard library only; never raises into the program.
"""

import contextlib
import json
import os
import sys

ENV = "AIFLAME_SNAPSHOT"
ENV_HISTORY = "AIFLAME_SNAPSHOT_HISTORY"
DIRECTORY = "/tmp"


def _path(pid, suffix):
    return os.path.join(DIRECTORY, f"aiflame-snapshot-{pid}{suffix}")


def _write(path, data, mode="wb"):
    tmp = f"{path}.tmp"
    with open(tmp, mode) as f:
        f.write(data)
    os.replace(tmp, path)


def _safe_id(text):
    return "".join(c for c in text.strip() if c.isalnum() or c in "-_")[:64] or "0"


def _on_signal(signum, frame):
    pid = os.getpid()
    try:
        with open(_path(pid, ".request")) as f:
            rid = _safe_id(f.read(200))
    except OSError:
        return  # not a request of the agent's
    try:
        torch = sys.modules.get("torch")
        if torch is None:
            raise RuntimeError("the program has not imported torch")
        import pickle

        snapshot = torch.cuda.memory._snapshot()
        _write(_path(pid, f"-{rid}.pickle"), pickle.dumps(snapshot, protocol=4))
    except Exception as e:
        with contextlib.suppress(OSError):
            _write(_path(pid, f"-{rid}.error"), f"{type(e).__name__}: {e}\n", "w")


def _remove(*paths):
    for p in paths:
        with contextlib.suppress(OSError):
            os.unlink(p)


def _record_history(max_entries):
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.memory._record_memory_history(max_entries=max_entries)
    except Exception:
        pass  # a snapshot without stacks is still a snapshot


def start(torch_imported_hook):
    """Take a signal and announce it; ``torch_imported_hook(fn)`` runs ``fn`` once the
    program has imported torch (the bootstrap's import finder)."""
    import signal

    if not hasattr(signal, "SIGRTMIN"):
        return
    signum = None
    # from the top: the profiler window of aiflame record takes the lowest free ones
    for n in range(int(signal.SIGRTMAX) - 1, int(signal.SIGRTMIN) + 4, -1):
        if signal.getsignal(n) in (signal.SIG_DFL, None):
            signal.signal(n, _on_signal)
            signum = n
            break
    if signum is None:
        return
    announced = _path(os.getpid(), ".json")
    try:
        _write(announced, json.dumps({"signal": signum}), "w")
    except OSError:
        return
    import atexit

    atexit.register(_remove, announced, _path(os.getpid(), ".request"))
    try:
        entries = int(os.environ.get(ENV_HISTORY) or 0)
    except ValueError:
        entries = 0
    if entries > 0:
        torch_imported_hook(lambda: _record_history(entries))
