"""Sockets in other network namespaces: the agent serves libkineto's abstract endpoint
``@dynolog`` inside every pod's network namespace, so a pod traced on demand needs nothing
mounted (Pod Security "baseline" forbids the hostPath a directory socket needs).

An abstract Unix socket belongs to the network namespace its socket was created in, not to
the thread that binds it. So a thread of its own enters the namespace (``setns`` through
``/proc/PID/ns/net`` of a process in it: the agent runs with ``hostPID``), creates the
socket, and leaves again; the socket is then bound, read and answered from anywhere, and
the namespace lives as long as the socket holds it. ``setns`` needs ``CAP_SYS_ADMIN``.
Only that short-lived thread ever changes namespace: should its way back fail, it ends,
and no other thread of the agent was ever elsewhere.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def net_namespace(pid: int | str, proc: str = "/proc") -> int | None:
    """The inode of the network namespace of process ``pid`` ("self" for the agent's),
    None when it is gone or not ours to look into."""
    try:
        link = os.readlink(f"{proc}/{pid}/ns/net")  # "net:[4026531992]"
    except OSError:
        return None
    try:
        return int(link[link.index("[") + 1 : -1])
    except ValueError:
        return None


def socket_in_namespace(pid: int, kind: int = socket.SOCK_DGRAM) -> socket.socket:
    """A Unix socket created in the network namespace of process ``pid``; OSError when
    it cannot be entered (no CAP_SYS_ADMIN, the process gone)."""
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _in_thread(target, kind)
    finally:
        os.close(target)


def _in_thread(target: int, kind: int) -> socket.socket:
    made: list[socket.socket] = []
    error: list[OSError] = []

    def enter_make_leave() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc.setns(target, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                error.append(OSError(err, f"setns: {os.strerror(err)}"))
                return
            try:
                made.append(socket.socket(socket.AF_UNIX, kind))
            except OSError as e:
                error.append(e)
            finally:
                # back home; if that fails this thread ends here, in the other namespace
                _libc.setns(own, CLONE_NEWNET)
        finally:
            os.close(own)

    thread = threading.Thread(target=enter_make_leave, name="aiflame-netns", daemon=True)
    thread.start()
    thread.join(10)
    if made:
        return made[0]
    raise error[0] if error else OSError("setns: no answer")
