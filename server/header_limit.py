"""One bound on a request's head (its request line and headers): `RUNSTREAM_MAX_HEADER_BYTES`,
431 `headers_too_large` past it (docs/security.md, "Signing in").

Kept in two places, for two reasons:

- **In the HTTP server** (`bounded_httptools`, the protocol `runstream serve` and the tests'
  servers run uvicorn with): uvicorn's C parser (httptools) has no bound of its own and joins a
  long header's pieces one by one, so a 24 MB header cost about half a second of the event loop
  before any of runstream's code saw it (and a JWT's decoding seconds more). Counted as the bytes
  arrive, a head is refused once it passes the bound, and never parsed further. uvicorn's
  `h11_max_incomplete_event_size` is not this knob: it applies to the pure-Python h11 parser
  only, which `runstream serve` does not run, and answers 400.
- **In the ASGI app** (`bounded_head`, in front of every route and the project's custom
  routes): the one place every server passes through (another ASGI server, a test's in-process
  one), with the same answer.
"""

from __future__ import annotations

import asyncio
import json

from litestar.types import ASGIApp, HTTPScope, Receive, Scope, Send, WebSocketScope
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["LINGER_S", "bounded_head", "bounded_httptools", "head_bytes", "too_large_message"]

# How long a connection whose head was refused is read (and dropped) after the answer, for the
# client to read it and close.
LINGER_S = 5.0


def too_large_message(max_bytes: int) -> str:
    return (
        f"the request's headers are larger than {max_bytes} bytes"
        " (RUNSTREAM_MAX_HEADER_BYTES); send a shorter token or fewer cookies"
    )


def _answer(max_bytes: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    body = json.dumps(
        {
            "error": {
                "code": "headers_too_large",
                "message": too_large_message(max_bytes),
                "request_id": None,
            }
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        (b"connection", b"close"),
    ]
    return headers, body


def head_bytes(scope: HTTPScope | WebSocketScope) -> int:
    """About the bytes of the request's head: its target and `name: value` lines."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    return size + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


def bounded_head(app: ASGIApp, max_bytes: int) -> ASGIApp:
    """`app`, answering 431 to a request whose head is over `max_bytes` (a websocket's: closed)."""
    headers, body = _answer(max_bytes)

    async def bounded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and head_bytes(scope) > max_bytes:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1009, "reason": ""})
                return
            await send({"type": "http.response.start", "status": 431, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await app(scope, receive, send)

    return bounded


def bounded_httptools(max_bytes: int) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, refusing (431, then closing) a head that passes
    `max_bytes` while it arrives; `uvicorn.Config(http=...)` takes it."""
    headers, body = _answer(max_bytes)
    answer = b"".join(
        [
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            *(name + b": " + value + b"\r\n" for name, value in headers),
            b"\r\n",
            body,
        ]
    )

    class BoundedHttpTools(HttpToolsProtocol):
        # Bytes received since the current request's head began, while it is incomplete. A
        # read that ends one request and begins the next is not counted (the next is at most
        # one read over the bound then).
        _head_bytes = 0
        _in_head = True
        _head_began_now = False
        _refused = False
        _linger: asyncio.TimerHandle | None = None

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # read and dropped, never parsed (`_refuse`)
            super().data_received(data)
            if not self._in_head or self.transport.is_closing():
                return
            if self._head_began_now:
                self._head_began_now = False
                return
            self._head_bytes += len(data)
            if self._head_bytes > max_bytes:
                self._refuse()

        def _refuse(self) -> None:
            """Answer 431 and end the connection. Closed at once, a socket with unread input
            sends a reset, which can make the client drop the answer unread; so the answer
            goes, then the end of our side, and what the client still sends is dropped until
            it closes (at most `LINGER_S`)."""
            self._refused = True
            self.logger.warning("a request's head is over RUNSTREAM_MAX_HEADER_BYTES")
            if self.cycle is not None and not self.cycle.response_complete:
                self.transport.close()  # a response of an earlier request is under way
                return
            self.transport.write(answer)
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            self.transport.write_eof()
            self._linger = self.loop.call_later(LINGER_S, self.transport.abort)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._linger is not None:
                self._linger.cancel()
            super().connection_lost(exc)

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head, self._head_bytes, self._head_began_now = True, 0, True

    return BoundedHttpTools
