"""A line on stderr when the work after a recording keeps the user waiting.

Once the program has exited, ``aiflame record`` usually writes the profile within a second.
When it takes longer (a big PyTorch trace to read, many libraries to symbolize, a loaded
machine), silence looks like a hang: after ``delay`` seconds the step under way is printed,
and every later step as it starts.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO


class TailProgress:
    def __init__(self, delay: float = 2.0, stream: TextIO | None = None) -> None:
        self.delay = delay
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._step: str | None = None
        self._shown = False
        self._timer: threading.Timer | None = None

    def __call__(self, step: str) -> None:
        """The step starting now; the first one starts the clock."""
        with self._lock:
            self._step = step
            if self._shown:
                self._print(step)
            elif self._timer is None:
                self._timer = threading.Timer(self.delay, self._late)
                self._timer.daemon = True
                self._timer.start()

    def done(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._step = None

    def _late(self) -> None:
        with self._lock:
            if self._step is not None and not self._shown:
                self._shown = True
                self._print(self._step)

    def _print(self, step: str) -> None:
        try:
            clear = "\r\x1b[K" if self.stream.isatty() else ""  # the live status line
            self.stream.write(f"{clear}aiflame: {step}…\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
