"""`X-Trace-ID`: a trace id the client names its work by, carried through runstream (issue 33,
the seed's convention), beside W3C `traceparent` (OpenTelemetry's, `stream_store/tracing.py`).

A request's trace id is the client's `X-Trace-ID` when it sends one, which must be a bounded
token of safe characters (1-128 of `A-Z a-z 0-9 . _ : + / = -`, as `X-Request-ID`'s): any other
value is refused, 400 `invalid_trace_id` (a trace id the client relies on is never replaced in
silence). Without one, a new random id is made. Either way it is

- returned on every HTTP answer of both APIs (`X-Trace-ID`, beside `X-Request-ID`), errors and
  event streams included (the answer to a refused one carries a new id);
- in every log line of the request (`x_trace_id`, structlog's context variables);
- stored with each run the request submits (`x_trace_id`: `server/v1/runs.py` `record_run`), so
  the worker logs the run's attempts with it and its evaluations are recorded with it.

Like the request id, it is made once, on first use, and kept in the request's scope state.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from typing import Any

import structlog
from litestar import Request
from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.types import Message, Scope

from .errors import ApiError

__all__ = [
    "TRACE_ID_HEADER",
    "add_trace_id_header",
    "bind_trace_id",
    "current_trace_id",
    "is_trace_id",
    "trace_id",
]

TRACE_ID_HEADER = "X-Trace-ID"
_STATE_KEY = "x_trace_id"
_REFUSED_KEY = "x_trace_id_refused"
_SAFE = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")
# The trace id of the request being handled (None outside one: a cron's run makes its own)
_CURRENT: ContextVar[str | None] = ContextVar("runstream_x_trace_id", default=None)


def is_trace_id(value: str) -> bool:
    """Whether `value` is a trace id runstream takes."""
    return _SAFE.fullmatch(value) is not None


def trace_id(scope: Scope) -> str:
    """The request's trace id: the client's when it is valid, else a new one (and the client's
    noted as refused); the same on every call."""
    state = scope.setdefault("state", {})
    known = state.get(_STATE_KEY)
    if known is None:
        sent = Headers.from_scope(scope).get(TRACE_ID_HEADER)
        if sent is not None and is_trace_id(sent):
            known = sent
        else:
            known = uuid.uuid4().hex
            state[_REFUSED_KEY] = sent is not None
        state[_STATE_KEY] = known
    return str(known)


def current_trace_id() -> str | None:
    """The trace id of the request this code runs for, if any."""
    return _CURRENT.get()


async def bind_trace_id(request: Request[Any, Any, Any]) -> None:
    """Before every request (after `bind_request_id`, which starts its log context): its trace
    id in the log context and for the runs it submits; 400 for a malformed `X-Trace-ID`."""
    found = trace_id(request.scope)
    _CURRENT.set(found)
    structlog.contextvars.bind_contextvars(x_trace_id=found)
    if request.scope["state"].get(_REFUSED_KEY):
        raise ApiError(
            400,
            "invalid_trace_id",
            f"{TRACE_ID_HEADER} must be 1 to 128 characters of A-Z a-z 0-9 . _ : + / = -",
        )


async def add_trace_id_header(message: Message, scope: Scope) -> None:
    """`before_send` hook: the trace id on every HTTP answer, errors and event streams included."""
    if message["type"] == "http.response.start":
        MutableScopeHeaders.from_message(message)[TRACE_ID_HEADER] = trace_id(scope)
