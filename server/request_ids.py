"""Request ids: one per request, in the `X-Request-ID` answer header, the log and error bodies.

A client may send its own `X-Request-ID` (1-128 characters from `A-Z a-z 0-9 . _ : + / = -`,
so it is safe in a header, a log line and JSON); anything else is replaced by a new random id.
The id is made once, on first use, and kept in the request's scope state, so the error
handlers, the log context and the answer header all give the same one, also for answers the
router makes itself (404, 405) before any handler or middleware runs.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import structlog
from litestar import Request
from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.types import Message, Scope

__all__ = [
    "REQUEST_ID_HEADER",
    "add_request_id_header",
    "bind_request_id",
    "request_id",
    "request_started_ms",
]

REQUEST_ID_HEADER = "X-Request-ID"
_STATE_KEY = "request_id"
_STARTED_KEY = "request_started_ms"
_SANE = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")


def request_id(scope: Scope) -> str:
    """The request's id: the client's, when it is sane, else a new one; the same on every call."""
    state = scope.setdefault("state", {})
    known = state.get(_STATE_KEY)
    if known is None:
        sent = Headers.from_scope(scope).get(REQUEST_ID_HEADER, "")
        known = sent if _SANE.fullmatch(sent) else uuid.uuid4().hex
        state[_STATE_KEY] = known
    return str(known)


def request_started_ms(scope: Scope) -> int:
    """When the request began (Unix milliseconds): noted before its handler runs
    (`bind_request_id`), else now; the same on every call."""
    state = scope.setdefault("state", {})
    return int(state.setdefault(_STARTED_KEY, int(time.time() * 1000)))


async def bind_request_id(request: Request[Any, Any, Any]) -> None:
    """`before_request` hook: a fresh log context for the request, carrying its id; the
    request's start noted (`request_started_ms`)."""
    request_started_ms(request.scope)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id(request.scope))


async def add_request_id_header(message: Message, scope: Scope) -> None:
    """`before_send` hook: the id on every HTTP answer, errors and event streams included.
    Async: Litestar runs a sync hook in a thread, for every body chunk of every stream."""
    if message["type"] == "http.response.start":
        MutableScopeHeaders.from_message(message)[REQUEST_ID_HEADER] = request_id(scope)
