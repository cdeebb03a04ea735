"""CPU priority of the server's background work.

A push is answered once it is decoded and in the write-ahead log; committing batches to the
store, the store's insert pipelines and trace analysis can wait. On a busy host the
threads that answer requests should get the CPU first, so the background runs at a higher
nice value: Linux keeps nice per thread, and threads a thread creates (the store engine's
pipeline threads started from the writer's inserts) inherit it. Raising one's own nice
value needs no privilege.
"""

from __future__ import annotations

import contextlib
import os
import threading

BACKGROUND_NICE = 10  # about a tenth of the CPU of a nice-0 thread when both want it


def lower_this_thread(nice: int = BACKGROUND_NICE) -> None:
    """Run the calling thread (and the threads it starts) at ``nice``, if that is lower
    priority than it has; never fails (a platform without per-thread nice keeps it)."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
