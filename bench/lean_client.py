"""POSTs from warm keep-alive connections at a fraction of httpx's client CPU, for `burst`.

A burst's N clients are N browsers on other machines; the bench's are on the server's own two
cores. httpx costs about 1.5 ms of CPU per POST here, so 50 POSTs took 60-90 ms of the same
cores the server and worker need in the burst's first 150 ms (measured per process, 2026-12-05).
h11 (httpx's own HTTP/1.1 state machine) over asyncio streams does the same exchange for a
tenth of that, and the figures are then the server's, not the client's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import h11

__all__ = ["LeanClient"]


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.http = h11.Connection(h11.CLIENT)


class LeanClient:
    """`connections` keep-alive connections to `base_url`; each POST takes a free one."""

    def __init__(self, base_url: str, connections: int) -> None:
        url = urlsplit(base_url)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 80
        self.count = connections
        self._free: asyncio.Queue[_Connection] = asyncio.Queue()

    async def __aenter__(self) -> LeanClient:
        """Open the connections and send one `GET /healthz` on each: warm, as a browser's."""
        for _ in range(self.count):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._free.put_nowait(_Connection(reader, writer))
        answers = await asyncio.gather(*(self._warm() for _ in range(self.count)))
        if any(status != 200 for status in answers):
            raise ConnectionError(f"GET /healthz answered {sorted(set(answers))}")
        return self

    async def _warm(self) -> int:
        # all at once: each call takes a different connection from the queue
        return (await self.request("GET", "/healthz"))[0]

    async def __aexit__(self, *exc: object) -> None:
        while not self._free.empty():
            self._free.get_nowait().writer.close()

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        """The status and JSON body of the answer to `POST path` with `body` as JSON."""
        return await self.request("POST", path, body)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = await self._free.get()
        data = b"" if body is None else json.dumps(body).encode()
        headers = [("host", f"{self.host}:{self.port}"), ("content-length", str(len(data)))]
        if body is not None:
            headers.append(("content-type", "application/json"))
        request = h11.Request(method=method, target=path, headers=headers)
        conn.writer.write(conn.http.send(request) + conn.http.send(h11.Data(data=data)))
        conn.writer.write(conn.http.send(h11.EndOfMessage()))
        status, chunks = 0, []
        while True:
            event = conn.http.next_event()
            if event is h11.NEED_DATA:
                conn.http.receive_data(await conn.reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError(f"the server closed the connection after {method} {path}")
        conn.http.start_next_cycle()
        self._free.put_nowait(conn)
        return status, json.loads(b"".join(chunks))
