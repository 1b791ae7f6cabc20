"""A bare ASGI event-stream server for the `sse_floor` scenario: what one SSE write per viewer
per event costs uvicorn alone, with no framework and no runstream.

`python -m uvicorn bench.bare_sse:app` (uvicorn's defaults, httptools and uvloop, as
`runstream serve` runs it).
`GET /sse` streams; `POST /tick/<n>` broadcasts `n` events, one every `TICK_S` (env, default
0.01 s), then ends every stream; `GET /cpu` answers `(process CPU seconds, writes so far)`.
`BARE_SSE_MODE` (env) picks how an event reaches the viewers:

- `task` (default): each viewer's request task waits on a future of its own and writes when
  woken, as runstream's viewers do (`server/streaming/feed.py`);
- `direct`: the broadcasting task calls every viewer's ASGI `send` itself, with no wake-up.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

__all__ = ["app"]

FRAME = b'id: 1700000000000-0\nevent: token\ndata: {"text":"hello ","index":12345}\n\n'
_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
}


class BareSse:
    def __init__(self, mode: str, tick_s: float) -> None:
        self.mode = mode
        self.tick_s = tick_s
        self.waiting: list[asyncio.Future[bytes | None]] = []  # `task` mode
        self.senders: list[tuple[Any, asyncio.Future[None]]] = []  # `direct` mode
        self.writes = 0
        self.tickers: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path: str = scope["path"]
        if path == "/cpu":
            await self._answer(send, repr((time.process_time(), self.writes)).encode())
        elif path.startswith("/tick/"):
            ticker = asyncio.create_task(self._broadcast(int(path.rsplit("/", 1)[1])))
            self.tickers.add(ticker)
            ticker.add_done_callback(self.tickers.discard)
            await self._answer(send, b"ok")
        else:
            await send(_START)
            await self._stream(send)

    async def _stream(self, send: Any) -> None:
        loop = asyncio.get_running_loop()
        if self.mode == "direct":
            ended: asyncio.Future[None] = loop.create_future()
            self.senders.append((send, ended))
            await ended
            return
        while True:
            woken: asyncio.Future[bytes | None] = loop.create_future()
            self.waiting.append(woken)
            frame = await woken
            if frame is None:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            self.writes += 1

    async def _broadcast(self, events: int) -> None:
        for index in range(events + 1):
            await asyncio.sleep(self.tick_s)
            last = index == events
            if self.mode == "direct":
                body = b"" if last else FRAME
                for send, ended in self.senders:
                    await send({"type": "http.response.body", "body": body, "more_body": not last})
                    if last:
                        ended.set_result(None)
                    else:
                        self.writes += 1
                if last:
                    self.senders.clear()
                continue
            woken, self.waiting = self.waiting, []
            for future in woken:
                future.set_result(None if last else FRAME)

    @staticmethod
    async def _answer(send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


app = BareSse(os.environ.get("BARE_SSE_MODE", "task"), float(os.environ.get("TICK_S", "0.01")))
