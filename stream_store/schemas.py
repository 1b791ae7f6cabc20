"""Request and response bodies of the HTTP API (docs/protocol.md 3 Endpoints), as msgspec Structs.

Event payloads live in `stream_store.events`; these are the REST shapes around them. Litestar
validates request bodies against these types, and the OpenAPI schema is generated from them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from stream_store.events import WireMessage
from stream_store.limits import GRAPH_NAME_MAX_CHARS, MESSAGE_ID_MAX_CHARS

__all__ = [
    "ErrorBody",
    "ErrorDetail",
    "EvaluationList",
    "EvaluationOut",
    "InputMessage",
    "ResumeRequest",
    "RunConfig",
    "RunCreate",
    "RunInput",
    "RunList",
    "RunOut",
    "ThreadCreate",
    "ThreadDetail",
    "ThreadList",
    "ThreadOut",
]


class Body(msgspec.Struct, forbid_unknown_fields=True):
    """Base of request bodies: an unknown field is a mistake worth a 400, not a silent no-op."""


class InputMessage(Body):
    role: Literal["user", "assistant", "system"]
    content: Annotated[str, Meta(min_length=1)]  # RUNSTREAM_MAX_MESSAGE_CHARS (server.inputs)
    id: Annotated[str, Meta(min_length=1, max_length=MESSAGE_ID_MAX_CHARS)] | None = None


class RunInput(Body):
    messages: Annotated[list[InputMessage], Meta(min_length=1)]  # RUNSTREAM_MAX_RUN_MESSAGES


class RunConfig(Body):
    configurable: dict[str, Any] = {}


class RunCreate(Body):
    input: RunInput
    graph: Annotated[str, Meta(min_length=1, max_length=GRAPH_NAME_MAX_CHARS)] = "chat"
    thread_id: uuid.UUID | None = None
    metadata: dict[str, Any] = {}
    config: RunConfig = msgspec.field(default_factory=RunConfig)
    multitask: Literal["reject", "enqueue"] = "reject"


class ResumeRequest(Body):
    resume: Any


class ThreadCreate(Body):
    metadata: dict[str, Any] = {}


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


class EvaluationList(msgspec.Struct):
    evaluations: list[EvaluationOut]
