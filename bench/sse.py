"""A light SSE reader over raw asyncio streams, cheap enough to run thousands per process.

It speaks just enough HTTP/1.1 for `GET /v1/runs/{id}/events` and LangGraph's join stream
(`GET /threads/{t}/runs/{r}/stream`): one request per connection, a chunked (or
close-delimited) body, and SSE framing with LF or CRLF line ends (`id:`, `event:`, `data:`
lines, comments). Events stay bytes: load generators count and compare ids without decoding
JSON. `batches()` yields everything one socket read delivered, so a caller takes one clock
reading per read, not per event. `SseParser` is the framing alone, for bodies read otherwise
(httpx).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = [
    "LANGGRAPH_TERMINAL",
    "TERMINAL",
    "SseError",
    "SseEvent",
    "SseParser",
    "SseStream",
    "ViewerResult",
    "event_position",
    "follow",
    "run_stream_events",
]

READ_SIZE = 256 * 1024
TERMINAL = (b"done", b"error")
LANGGRAPH_TERMINAL = (b"end", b"error")  # LangGraph's stream ends with `end` (or `error`)


class SseError(RuntimeError):
    """The server answered something other than 200 text/event-stream."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"SSE attach answered {status}: {body[:300]!r}")
        self.status = status


@dataclass(frozen=True, slots=True)
class SseEvent:
    id: bytes
    event: bytes
    data: bytes


def event_position(event_id: bytes) -> tuple[int, int]:
    """A Redis stream id `<ms>-<seq>` as a comparable pair."""
    ms, _, seq = event_id.partition(b"-")
    return int(ms), int(seq)


class SseParser:
    """SSE framing: `feed` bytes of a body, get the complete events in them (comments skipped;
    an event without `id:` has id b"")."""

    def __init__(self) -> None:
        self._text = b""

    def feed(self, payload: bytes) -> list[SseEvent]:
        text = self._text + payload
        held = b"\r" if text.endswith(b"\r") else b""  # maybe half of a CRLF: wait for more
        blocks = text[: len(text) - len(held)].replace(b"\r\n", b"\n").split(b"\n\n")
        self._text = blocks.pop() + held
        events = []
        for block in blocks:
            event_id = name = b""
            data: list[bytes] = []
            for line in block.split(b"\n"):
                if line.startswith(b"id:"):
                    event_id = line[3:].strip()
                elif line.startswith(b"event:"):
                    name = line[6:].strip()
                elif line.startswith(b"data:"):
                    value = line[5:]
                    data.append(value[1:] if value.startswith(b" ") else value)
            if name:
                events.append(SseEvent(event_id, name, b"\n".join(data)))
        return events


class SseStream:
    """One SSE response. Open with `SseStream.open(...)`, read `batches()`, then `close()`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._chunked = True
        self._raw = bytearray()
        self._parser = SseParser()
        self.ended = False

    @classmethod
    async def open(
        cls, base_url: str, path: str, *, last_event_id: bytes | None = None
    ) -> SseStream:
        """Connect, send the GET and read the response head.

        Raises:
            SseError: the answer is not 200.
            OSError: the connection failed.
        """
        parts = urlsplit(base_url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.open_connection(host, port, limit=READ_SIZE)
        head = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
        if last_event_id is not None:
            head += f"Last-Event-ID: {last_event_id.decode()}\r\n"
        writer.write(head.encode() + b"\r\n")
        stream = cls(reader, writer)
        try:
            await stream._read_head()
        except BaseException:
            stream.close()
            raise
        return stream

    async def _read_head(self) -> None:
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        if status != 200:
            body = await asyncio.wait_for(self._reader.read(2000), 5)
            raise SseError(status, body)
        self._chunked = headers.get(b"transfer-encoding") == b"chunked"

    def close(self) -> None:
        self._writer.transport.abort()

    async def __aenter__(self) -> SseStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _dechunk(self, data: bytes) -> bytes:
        raw = self._raw
        raw += data
        out: list[bytes] = []
        pos = 0
        while True:
            eol = raw.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(bytes(raw[pos:eol]).split(b";")[0], 16)
            if size == 0:
                self.ended = True
                pos = len(raw)
                break
            start = eol + 2
            end = start + size
            if len(raw) < end + 2:
                break
            out.append(bytes(raw[start:end]))
            pos = end + 2
        del raw[:pos]
        return b"".join(out)

    async def batches(self) -> AsyncIterator[list[SseEvent]]:
        """The events of each socket read (pings skipped), until the response ends."""
        while not self.ended:
            data = await self._reader.read(READ_SIZE)
            if not data:
                self.ended = True
                break
            payload = self._dechunk(data) if self._chunked else data
            if payload:
                events = self._parser.feed(payload)
                if events:
                    yield events


@dataclass
class ViewerResult:
    """What one viewer saw of one run."""

    path: str
    events: int = 0
    first_id: bytes = b""
    last_id: bytes = b""
    terminal: bool = False
    out_of_order: int = 0  # ids not strictly after the previous one: duplicates or reordering
    reconnects: int = 0
    error: str | None = None
    latency_ms: Counter[int] = field(default_factory=Counter)  # receipt - XADD, live events
    first_live_at: float = 0.0  # time.time() of the first event after the stream's first
    last_at: float = 0.0


async def follow(
    base_url: str,
    path: str,
    *,
    on_first: asyncio.Event | None = None,
    max_reconnects: int = 20,
    last_event_id: bytes | None = None,
    terminal: tuple[bytes, ...] = TERMINAL,
) -> ViewerResult:
    """Read a run's stream to its terminal event, reconnecting with Last-Event-ID if cut off.

    Latency (wall-clock ms at receipt minus the ms part of the event id, which Redis stamped at
    XADD) is recorded for every event but the stream's first, the `run`/`queued` written at
    submit (LangGraph's join stream: its `metadata`), which viewers read back when they attach.
    `last_event_id` goes with the first request (LangGraph's `-1`: from the start); `terminal`
    names the events that end the stream. Events without an id (LangGraph's `metadata`) are
    counted but neither ordered nor timed.
    """
    result = ViewerResult(path)
    last = (0, 0)
    last_id = last_event_id
    latency = result.latency_ms
    while True:
        try:
            stream = await SseStream.open(base_url, path, last_event_id=last_id)
        except (OSError, SseError, asyncio.IncompleteReadError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            return result
        result.error = None
        try:
            async for batch in stream.batches():
                now = time.time()
                now_ms = int(now * 1000)
                for event in batch:
                    first = result.events == 0
                    if event.id:
                        ms, _, seq = event.id.partition(b"-")
                        position = (int(ms), int(seq))
                        if position <= last:
                            result.out_of_order += 1
                        last = position
                        last_id = result.last_id = event.id
                        if not first:
                            latency[now_ms - position[0]] += 1
                    if first:
                        result.first_id = event.id
                        if on_first is not None:
                            on_first.set()
                    elif not result.first_live_at:
                        result.first_live_at = now
                    result.events += 1
                    if event.event in terminal:
                        result.terminal = True
                result.last_at = now
        except (OSError, asyncio.IncompleteReadError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            stream.close()
        if result.terminal or result.reconnects >= max_reconnects:
            return result
        result.reconnects += 1


async def run_stream_events(
    http: httpx.AsyncClient, thread_id: str, body: dict[str, Any]
) -> AsyncIterator[SseEvent]:
    """The events of `POST /threads/{thread_id}/runs/stream` (LangGraph API), as they come;
    a status other than 200 is an error naming it."""
    path = f"/threads/{thread_id}/runs/stream"
    async with http.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"runs/stream answered {response.status_code}: {response.text}")
        parser = SseParser()
        async for data in response.aiter_raw():
            for event in parser.feed(data):
                yield event
