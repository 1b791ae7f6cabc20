"""Response bodies of the `/v1` HTTP API (docs/protocol.md 3 Endpoints), as msgspec Structs.

The server answers with them and the client decodes them; the event payloads inside a stream
are in `wire.events`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from .events import WireMessage

__all__ = [
    "ErrorBody",
    "ErrorDetail",
    "EvaluationList",
    "EvaluationOut",
    "RunList",
    "RunOut",
    "ThreadDetail",
    "ThreadList",
    "ThreadOut",
    "WebhookAttemptOut",
    "WebhookList",
    "WebhookOut",
]


class ErrorDetail(msgspec.Struct):
    code: str
    message: str
    request_id: str  # also the answer's X-Request-ID header; quote it when reporting a problem


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


class RunOut(msgspec.Struct):
    run_id: str
    thread_id: str
    graph: str
    status: str
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_event_id: str | None
    error: dict[str, Any] | None
    interrupt: Any
    stream_url: str
    metadata: dict[str, Any]
    multitask: str
    trace_id: str | None = None  # the run's OpenTelemetry trace; null when not traced
    # the `X-Trace-ID` of the request that submitted it (given or made); null for older runs
    x_trace_id: str | None = None


class ThreadOut(msgspec.Struct):
    thread_id: str
    title: str | None
    created_at: datetime
    updated_at: datetime
    status: str
    metadata: dict[str, Any]


class ThreadDetail(ThreadOut):
    messages: list[WireMessage] = []


class ThreadList(msgspec.Struct):
    threads: list[ThreadOut]
    next_cursor: str | None


class RunList(msgspec.Struct):
    runs: list[RunOut]


class EvaluationOut(msgspec.Struct):
    """A graph's grade of its own work in a run (runner/evaluations.py)."""

    run_id: str
    thread_id: str
    owner: str  # whose it is: the run's owner (the API key's or the signed-in user's)
    key: str  # unique within the run
    kind: str
    score: float  # 0 to 1
    passed: bool | None
    detail: dict[str, Any] | None
    graph: str
    attempt: int  # the attempt that recorded it
    trace_id: str | None  # the run's OpenTelemetry trace; null when not traced
    created_at: datetime
    # The run's answer (the id of its final assistant message, as in its `done` event) once the
    # run has succeeded with one; null before
    message_id: str | None
    # the run's `X-Trace-ID` (the submitting request's, given or made); null for older runs
    x_trace_id: str | None = None


class EvaluationList(msgspec.Struct):
    evaluations: list[EvaluationOut]


class WebhookAttemptOut(msgspec.Struct):
    """One POST of a webhook: when, and the receiver's status code or why there was none."""

    at: datetime
    status_code: int | None
    error: str | None  # null for a 2xx


class WebhookOut(msgspec.Struct):
    """A run's webhook delivery (a LangGraph run's `webhook`, runner/webhooks.py)."""

    url: str
    state: str  # "pending" (retries to come), "delivered" (a 2xx), "failed" (gave up)
    attempts: list[WebhookAttemptOut]
    next_attempt_at: datetime | None  # while pending
    created_at: datetime  # when the run ended


class WebhookList(msgspec.Struct):
    webhooks: list[WebhookOut]
