"""LangGraph Agent Server wire types, and the pure conversions between them and runstream's.

The shapes follow what the official SDKs (`langgraph_sdk`, `@langchain/langgraph-sdk`) send
and expect (notes: /work/notes/langgraph-wire.md, sections A and B). Request bodies accept and
ignore fields they don't name: SDKs and servers skew by version (`strict_resume` is sent by
both SDKs and read by no server), and a stock server takes unknown keys too.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from stream_store.events import RunStatus

__all__ = [
    "MAX_PAGE",
    "STREAM_MODES",
    "Assistant",
    "AssistantCount",
    "AssistantSearch",
    "BulkCancel",
    "Checkpoint",
    "HistoryRequest",
    "Run",
    "RunCreate",
    "RunStatusName",
    "StateCheckpointRequest",
    "StateUpdate",
    "Thread",
    "ThreadCount",
    "ThreadCreate",
    "ThreadPatch",
    "ThreadSearch",
    "ThreadState",
    "ThreadStatus",
    "assistant_id_for",
    "engine_messages",
    "run_status",
    "stream_modes",
    "to_langchain_dict",
]

RunStatusName = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
MultitaskStrategy = Literal["reject", "interrupt", "rollback", "enqueue"]

# The stream modes runstream's events can serve; `events`, `debug`, `tasks`, `checkpoints`,
# `tools` and `lifecycle` need graph internals the worker does not store.
STREAM_MODES: tuple[str, ...] = ("values", "updates", "messages", "messages-tuple", "custom")

MAX_PAGE = 1000  # the most items one search, list or history answer holds
Limit = Annotated[int, Meta(ge=1, le=MAX_PAGE)]
Offset = Annotated[int, Meta(ge=0, le=2**62)]  # within Postgres bigint


class Request(msgspec.Struct, kw_only=True):
    """Base of request bodies; unknown fields are ignored (see the module docstring)."""


class RunCreate(Request):
    """Body of `POST /threads/{id}/runs[/stream|/wait]` and the stateless `/runs` twins."""

    assistant_id: str  # a UUID or a graph name
    input: Any = None
    command: dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None  # see `stream_modes`
    stream_subgraphs: bool = False
    stream_resumable: bool | None = None
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    interrupt_before: str | list[str] | None = None
    interrupt_after: str | list[str] | None = None
    multitask_strategy: MultitaskStrategy = "enqueue"
    if_not_exists: Literal["create", "reject"] = "reject"
    on_disconnect: Literal["cancel", "continue"] = "continue"  # stream and wait only
    on_completion: Literal["delete", "keep"] | None = None  # stateless runs only
    after_seconds: float | None = None
    webhook: str | None = None
    feedback_keys: list[str] | None = None
    durability: Literal["sync", "async", "exit"] | None = None


class ThreadCreate(Request):
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"


class ThreadSearch(Request):
    limit: Limit = 10
    offset: Offset = 0
    metadata: dict[str, Any] | None = None
    status: ThreadStatus | None = None
    ids: list[str] | None = None
    sort_by: (
        Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"] | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None


class ThreadCount(Request):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: ThreadStatus | None = None


class AssistantCount(Request):
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None


class ThreadPatch(Request):
    metadata: dict[str, Any] | None = None


class AssistantSearch(Request):
    limit: Limit = 10
    offset: Offset = 0
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None


class HistoryRequest(Request):
    """Body of `POST /threads/{id}/history` (both SDKs use POST)."""

    limit: Limit = 10
    before: str | dict[str, Any] | None = None  # a checkpoint id, or a Checkpoint object
    metadata: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None


class StateCheckpointRequest(Request):
    """Body of `POST /threads/{id}/state/checkpoint`."""

    checkpoint: dict[str, Any]  # {"checkpoint_id", "checkpoint_ns"?, "checkpoint_map"?}
    subgraphs: bool = False


class StateUpdate(Request):
    """Body of `POST /threads/{id}/state` (`threads.update_state`)."""

    values: dict[str, Any] | list[Any] | None = None
    as_node: str | None = None
    checkpoint: dict[str, Any] | None = None  # {"checkpoint_id", ...}: update from there
    checkpoint_id: str | None = None  # deprecated spelling of the same


class BulkCancel(Request):
    """Body of `POST /runs/cancel` (`runs.cancel_many`): a thread's runs by id, or by status."""

    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Literal["pending", "running", "all"] | None = None


class Response(msgspec.Struct, kw_only=True):
    """Base of response bodies: every field is sent, null included, as LangGraph does."""


class Checkpoint(msgspec.Struct, kw_only=True, omit_defaults=True):
    checkpoint_id: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_map: dict[str, Any] | None = None


class ThreadState(Response):
    """A thread's state at one checkpoint (`GET /threads/{id}/state`, history items).

    `checkpoint: null` means "no history" to useStream; `created_at` is the checkpoint's own
    timestamp string (`ts`), as LangGraph passes it through.
    """

    values: dict[str, Any] | list[Any] = {}
    next: list[str] = []
    # {"id", "name", "path", "error": str | None, "interrupts", "checkpoint", "state", "result"}
    tasks: list[dict[str, Any]] = []
    metadata: dict[str, Any] | None = None
    created_at: str | None = None
    checkpoint: Checkpoint | None = None
    parent_checkpoint: Checkpoint | None = None
    interrupts: list[dict[str, Any]] = []  # {"id", "value"[, "response_schema"]}
    checkpoint_id: str | None = None  # deprecated duplicates that LangGraph still sends
    parent_checkpoint_id: str | None = None


class Thread(Response):
    thread_id: str
    created_at: datetime
    updated_at: datetime
    state_updated_at: datetime
    metadata: dict[str, Any] = {}
    status: ThreadStatus = "idle"
    config: dict[str, Any] = {}
    values: Any = None  # null for a thread no run has written
    interrupts: dict[str, list[dict[str, Any]]] = {}  # task id -> its interrupts
    error: Any = None


class Assistant(Response):
    """The one "system" assistant LangGraph registers per graph."""

    assistant_id: str
    graph_id: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]  # {"created_by": "system"} for the graph's own assistant
    version: int
    created_at: datetime
    updated_at: datetime


class Run(Response):
    run_id: str
    thread_id: str
    assistant_id: str
    created_at: datetime
    updated_at: datetime
    status: RunStatusName
    multitask_strategy: MultitaskStrategy = "enqueue"
    langsmith_session_name: str | None = None
    metadata: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}


_ASSISTANT_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


def assistant_id_for(graph: str) -> str:
    """The id LangGraph gives a graph's system assistant, so ids match a stock server's."""
    return str(uuid.uuid5(_ASSISTANT_NAMESPACE, graph))


# An engine run stopped at interrupt() is, to LangGraph, a run that ended (`success`) on a
# thread left `interrupted`; LangGraph's `interrupted` run is one cancelled on request.
_RUN_STATUSES: dict[str, RunStatusName] = {
    RunStatus.QUEUED: "pending",
    RunStatus.RUNNING: "running",
    RunStatus.INTERRUPTED: "success",
    RunStatus.SUCCEEDED: "success",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "interrupted",
}


def run_status(engine_status: str) -> RunStatusName:
    """LangGraph's status for a run in runstream's `engine_status`.

    Raises:
        ValueError: not a runstream run status.
    """
    try:
        return _RUN_STATUSES[engine_status]
    except KeyError:
        raise ValueError(f"unknown run status {engine_status!r}") from None


def stream_modes(value: str | list[str] | None) -> list[str]:
    """The requested stream modes, in order, without repeats; none means `["values"]`.

    Empty strings are dropped (Python's SDK sends `stream_mode=` for "no mode").

    Raises:
        ValueError: a mode runstream cannot serve; the message names it and the supported ones.
    """
    requested = [value] if isinstance(value, str) else list(value or [])
    modes: list[str] = []
    for mode in requested:
        if not mode or mode in modes:
            continue
        if mode not in STREAM_MODES:
            supported = ", ".join(STREAM_MODES)
            raise ValueError(f"stream mode {mode!r} is not supported; use one of: {supported}")
        modes.append(mode)
    return modes or ["values"]


_INPUT_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
}


def engine_messages(messages: Any) -> list[dict[str, Any]]:
    """runstream input messages (`{"role", "content", "id"?}`) from `input["messages"]` of a
    LangGraph run: one message or a list of them.

    A message is in a LangChain shape: `{"type": "human", "content": ...}`, `{"role": "user",
    ...}` (role, as in LangChain, wins over type), or a bare string (a human message); content
    is a string or a list of content blocks.

    Raises:
        ValueError: any other shape or role, naming the message at fault.
    """
    if messages is None:
        return []
    items = messages if isinstance(messages, list) else [messages]
    return [_engine_message(message, f"input.messages[{i}]") for i, message in enumerate(items)]


def _engine_message(message: Any, where: str) -> dict[str, Any]:
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if not isinstance(message, dict):
        raise ValueError(f"{where} must be a message object or a string")
    kind = message.get("role", message.get("type"))
    if kind == "tool":
        raise ValueError(f"{where}: tool messages are not accepted as input")
    if not isinstance(kind, str) or kind not in _INPUT_ROLES:
        roles = ", ".join(_INPUT_ROLES)
        raise ValueError(f"{where} needs a role (or type) among {roles}, got {kind!r}")
    if message.get("tool_calls"):
        raise ValueError(f"{where}: messages with tool calls are not accepted as input")
    content = message.get("content")
    if not isinstance(content, str) and not (
        isinstance(content, list) and all(isinstance(block, str | dict) for block in content)
    ):
        raise ValueError(f"{where}.content must be a string or a list of content blocks")
    converted = {"role": _INPUT_ROLES[kind], "content": content}
    message_id = message.get("id")
    if message_id is not None:
        if not isinstance(message_id, str) or not message_id:
            raise ValueError(f"{where}.id must be a non-empty string")
        converted["id"] = message_id
    return converted


_LANGCHAIN_TYPES = {"user": "human", "assistant": "ai", "system": "system", "tool": "tool"}


def to_langchain_dict(message: Mapping[str, Any]) -> dict[str, Any]:
    """A runstream wire message (`stream_store.events.WireMessage` as a dict) as LangGraph
    serialises a LangChain message, key order included."""
    kind = _LANGCHAIN_TYPES.get(message["role"], message["role"])
    converted: dict[str, Any] = {
        "content": message["content"],
        "additional_kwargs": {},
        "response_metadata": {},
        "type": kind,
        "name": None,
        "id": message["id"],
    }
    if kind == "ai":
        converted["tool_calls"] = [
            {**call, "type": call.get("type", "tool_call")}
            for call in message.get("tool_calls") or []
        ]
        converted["invalid_tool_calls"] = []
        converted["usage_metadata"] = None
    elif kind == "tool":
        converted["tool_call_id"] = message.get("tool_call_id")
        converted["artifact"] = None
        converted["status"] = "success"
    return converted
