"""Whether the store can write now, as the writer last found it; said once in the log.

The writer reports every commit (and every probe while the store fails); ``/ready`` fails
while the store cannot write, so a load balancer sends the pushes elsewhere, and the pushes
that do arrive are answered 503 with ``Retry-After``. A failure is logged when it starts
(and once a minute while it lasts), the recovery when the store writes again: a disk that
fills up is one line in the log, not one per push.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("aiflame.server")

PROBE_EVERY_S = 5.0  # while failing with nothing to retry, the writer tries a small write
_REMIND_S = 60.0


class StoreHealth:
    def __init__(self, name: str = "store") -> None:
        self.name = name  # in the log: "store", "wal"
        self._lock = threading.Lock()
        self.failing_since: float | None = None  # time.monotonic()
        self.last_error = ""
        self.failures = 0  # commits and probes that failed, ever (a metric)
        self._reminded = 0.0

    @property
    def ok(self) -> bool:
        return self.failing_since is None

    def failed(self, error: BaseException | str, what: str = "writing") -> None:
        text = _one_line(error)
        now = time.monotonic()
        with self._lock:
            self.failures += 1
            self.last_error = text
            if self.failing_since is None:
                self.failing_since = now
                self._reminded = now
                log.error(
                    "%s: %s failed: %s (answering 503 and retrying; /ready fails meanwhile)",
                    self.name,
                    what,
                    text,
                )
            elif now - self._reminded >= _REMIND_S:
                self._reminded = now
                log.error("store: still failing after %.0f s: %s", now - self.failing_since, text)

    def succeeded(self) -> None:
        if self.failing_since is None:
            return
        with self._lock:
            since = self.failing_since
            if since is None:
                return
            self.failing_since = None
            log.warning("store: writing again after %.0f s of failures", time.monotonic() - since)

    def retry_after_s(self) -> int:
        return int(PROBE_EVERY_S) * 2


def _one_line(error: BaseException | str) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
