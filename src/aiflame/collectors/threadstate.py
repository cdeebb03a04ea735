"""Thread state of a sampled stack: ``active``, ``idle`` (blocked in a wait) or ``gil-wait``.

py-spy knows each thread's state when it samples it, but ``py-spy record`` writes stacks
only. The state is therefore read back from the stack itself, which is reliable once native
frames are present: a thread that waits sits in a blocking call (``clock_nanosleep``,
``epoll_wait``, a futex, a semaphore, a condition variable). A condition-variable wait
entered straight from Python code or from libpython is CPython taking the GIL: py-spy hides
libpython's own ``take_gil``/``PyEval_RestoreThread`` frames, and Python-level locks use
semaphores, not condition variables. A condition-variable wait under a C/C++ extension frame
could be either, so it counts as plain ``idle``.

Without native frames only a few Python-level waits are recognisable (threading, selectors).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aiflame.model.frames import Frame, FrameKind

ACTIVE, IDLE, GIL_WAIT = "active", "idle", "gil-wait"

_COND_WAITS = {"pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait"}
_WAITS = _COND_WAITS | {
    "nanosleep",
    "clock_nanosleep",
    "usleep",
    "sleep",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "pselect6",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "futex_wait",
    "futex_abstimed_wait",
    "futex_abstimed_wait_common",
    "futex_abstimed_wait_cancelable",
    "do_futex_wait",
    "pthread_join",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "accept",
    "accept4",
    "recv",
    "recvfrom",
    "recvmsg",
    "read",
    "readv",
    "wait4",
    "waitpid",
    "waitid",
    "sigwait",
    "sigwaitinfo",
    "sigtimedwait",
    "pause",
    "msgrcv",
    "semop",
    "semtimedop",
    "io_getevents",
    # libpython entry points of blocking calls (py-spy keeps these)
    "PyThread_acquire_lock_timed",
    "time_sleep",
    "select_select",
    "select_epoll_poll",
    "select_poll_poll",
}
_CPP_WAIT = re.compile(r"condition_variable(?:_any)?::(?:wait|__wait_until)|this_thread::sleep")
_SYSTEM_LIBS = re.compile(r"^(?:libc|libpthread|ld-linux[\w-]*|libdl|librt)[.-]|^\[vdso\]$")
_PY_WAITS = {
    ("wait", "threading.py"),
    ("_wait_for_tstate_lock", "threading.py"),
    ("select", "selectors.py"),
    ("poll", "selectors.py"),
}


def normalize(name: str) -> str:
    """glibc's internal aliases to the public name: ``___pthread_cond_timedwait64``."""
    name = name.split("@", 1)[0].lstrip("_")
    if name.startswith("GI_"):
        name = name[3:].lstrip("_")
    if name.startswith("libc_"):
        name = name[5:]
    if name.endswith("64") and name[:-2] in _WAITS:
        name = name[:-2]
    return name


def _is_system(frame: Frame) -> bool:
    """A frame of libc & co., or one that could not be named (no symbols there)."""
    if frame.kind == FrameKind.PYTHON:
        return False
    return bool(_SYSTEM_LIBS.match(frame.module)) or frame.name.startswith(("0x", "["))


def _is_python_runtime(frame: Frame) -> bool:
    return frame.kind == FrameKind.PYTHON or frame.module.startswith(("libpython", "python"))


def classify(frames: Sequence[Frame]) -> str:
    """State of the thread whose stack is ``frames`` (root first)."""
    if not frames:
        return ACTIVE
    leaf = frames[-1]
    if leaf.kind == FrameKind.PYTHON:
        base = leaf.file.rsplit("/", 1)[-1]
        # "Condition > wait (threading.py:320)", "Condition.wait" or "wait": the function.
        short = leaf.name.split(" (", 1)[0].rsplit(" > ", 1)[-1].rsplit(".", 1)[-1]
        return IDLE if (short, base) in _PY_WAITS else ACTIVE
    # The system-library suffix of the stack (what libc runs on the caller's behalf).
    i = len(frames)
    while i > 0 and _is_system(frames[i - 1]):
        i -= 1
    names = [normalize(f.name) for f in frames[i:]]
    caller = frames[i - 1] if i > 0 else None
    if caller is not None and caller.kind != FrameKind.PYTHON:
        caller_name = normalize(caller.name)
        if caller_name in _WAITS or _CPP_WAIT.search(caller.name):
            names.append(caller_name)
            i -= 1
            caller = frames[i - 1] if i > 0 else None
    if not any(n in _WAITS or _CPP_WAIT.search(n) for n in names):
        return ACTIVE
    cond_wait = any(n in _COND_WAITS for n in names)
    gil = caller is not None and _is_python_runtime(caller) and normalize(caller.name) not in _WAITS
    return GIL_WAIT if cond_wait and gil else IDLE
