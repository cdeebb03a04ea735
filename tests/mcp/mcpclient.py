"""A session of the MCP SDK's own client with ``aiflame mcp``, for synchronous tests: the
client's event loop runs in a thread of its own; ``call`` waits for each answer."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[2] / "src"


def aiflame_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(SRC))


class Session:
    """``async with Client(server)`` held open in a thread; ``server`` as Client takes it."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._stop: asyncio.Event | None = None
        self.client: Any = None
        self._done: Any = None

    def __enter__(self) -> Session:
        from mcp import Client

        self.thread.start()
        ready = threading.Event()
        failed: list[BaseException] = []

        async def hold() -> None:
            self._stop = asyncio.Event()
            try:
                async with Client(self.server, read_timeout_seconds=300) as c:
                    self.client = c
                    ready.set()
                    await self._stop.wait()
            except BaseException as e:  # surfaced in __enter__
                failed.append(e)
                ready.set()

        self._done = asyncio.run_coroutine_threadsafe(hold(), self.loop)
        ready.wait(120)
        if failed:
            raise failed[0]
        assert self.client is not None, "the MCP session did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._done is not None:
            self._done.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def run(self, coro: Any, timeout: float = 300) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def tools(self) -> list[Any]:
        return list(self.run(self.client.list_tools()).tools)

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return self.run(self.client.call_tool(name, args))

    def answer(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """The structured answer of a call that must succeed (and its text equals it)."""
        r = self.call(name, args)
        assert not r.is_error, r.content[0].text if r.content else r
        assert json.loads(r.content[0].text) == r.structured_content
        return dict(r.structured_content)


def stdio_server(*args: str) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable, args=["-m", "aiflame", "mcp", *args], env=aiflame_env()
    )
