"""Request bodies of the `/v1` HTTP API (docs/protocol.md 3 Endpoints), as msgspec Structs.

Only the server reads them: Litestar validates a request against them and the OpenAPI schema is
generated from them. What the server answers, and the client reads, is in
`wire.responses`.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from stream_store.limits import GRAPH_NAME_MAX_CHARS, MESSAGE_ID_MAX_CHARS

__all__ = [
    "Body",
    "InputMessage",
    "ResumeRequest",
    "RunConfig",
    "RunCreate",
    "RunInput",
    "ThreadCreate",
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
    # the graph's settings (its `context_schema`'s fields: docs/protocol.md 3.1), one with
    # `config.configurable` as on LangGraph's routes
    context: dict[str, Any] = {}
    multitask: Literal["reject", "enqueue"] = "reject"


class ResumeRequest(Body):
    resume: Any


class ThreadCreate(Body):
    metadata: dict[str, Any] = {}
