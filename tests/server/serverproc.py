"""A real ``aiflame server`` process (subprocess, embedded chDB store) for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, store: Path, args: list[str] | None = None, port: int | None = None) -> None:
        self.store = store
        self.args = args or []
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = store.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 90.0, ssl_context=None) -> ServerProcess:
        env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [
            sys.executable,
            "-m",
            "aiflame",
            "server",
            "--store",
            f"chdb://{self.store}",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--log-level",
            "warning",
            *self.args,
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(
                    self.url + "/ready", timeout=2, context=ssl_context
                ) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the server did not start: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
