"""LangGraph Agent Server wire types (the conversions to and from runstream's: `conversions.py`).

The shapes follow what the official SDKs (`langgraph_sdk`, `@langchain/langgraph-sdk`) send
and expect (docs/langgraph.md). Request bodies accept and
ignore fields they don't name: SDKs and servers skew by version (`strict_resume` is sent by
both SDKs and read by no server), and a stock server takes unknown keys too.

One Struct per request and answer shape the SDKs use (threads, runs, assistants, crons, store),
kept together so that the wire format is read in one place.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from stream_store import assistant_records, cron_records, limits

__all__ = [
    "MAX_PAGE",
    "Assistant",
    "AssistantCount",
    "AssistantCreate",
    "AssistantLatest",
    "AssistantPatch",
    "AssistantSearch",
    "AssistantVersion",
    "AssistantVersions",
    "BulkCancel",
    "Checkpoint",
    "Cron",
    "CronCount",
    "CronCreate",
    "CronPatch",
    "CronRun",
    "CronSearch",
    "HistoryRequest",
    "Run",
    "RunCreate",
    "RunStatusName",
    "StateCheckpointRequest",
    "StateUpdate",
    "StoreDelete",
    "StoreListNamespaces",
    "StorePut",
    "StoreSearch",
    "Thread",
    "ThreadCount",
    "ThreadCreate",
    "ThreadPatch",
    "ThreadPrune",
    "ThreadSearch",
    "ThreadState",
    "ThreadStatus",
]

RunStatusName = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]
# What a thread search may `select` (LangGraph's `ThreadSelectField`).
ThreadField = Literal[
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "status",
    "values",
    "interrupts",
]
MultitaskStrategy = Literal["reject", "interrupt", "rollback", "enqueue"]
OnRunCompleted = Literal["delete", "keep"]
Durability = Literal["sync", "async", "exit"]
CronField = Literal[
    "cron_id",
    "assistant_id",
    "thread_id",
    "on_run_completed",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "payload",
    "user_id",
    "next_run_date",
    "metadata",
    "enabled",
]

AssistantField = Literal[
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "created_at",
    "updated_at",
    "metadata",
    "version",
]

MAX_PAGE = 1000  # the most items one search, list or history answer holds
Limit = Annotated[int, Meta(ge=1, le=MAX_PAGE)]
Offset = Annotated[int, Meta(ge=0, le=2**62)]  # within Postgres bigint
# Store bounds that Postgres's own types set: a depth is an `integer` once the store adds its
# owner label, and a TTL (minutes) becomes an `interval` written as "<seconds> seconds", which
# Postgres cannot read in the exponent form Python gives tiny and huge floats. One second to a
# hundred years.
STORE_MAX_DEPTH = 2**31 - 2
STORE_MIN_TTL_MINUTES = 1 / 60
STORE_MAX_TTL_MINUTES = 100 * 365 * 24 * 60


# Where a run stops, as LangGraph takes it: before (after) every node, or the nodes named; a node
# the graph lacks is ignored, as LangGraph's server does.
Breakpoints = Literal["*"] | list[str]


class Request(msgspec.Struct, kw_only=True):
    """Base of request bodies; unknown fields are ignored (see the module docstring)."""


class CronRun(Request):
    """The fields of a run request that a cron keeps as its `payload`, and both `CronCreate`
    and `CronPatch` take: None where a run has a default, which applies when the slot runs."""

    input: Any = None
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    interrupt_before: Breakpoints | None = None
    interrupt_after: Breakpoints | None = None
    multitask_strategy: MultitaskStrategy | None = None
    stream_mode: str | list[str] | None = None  # see `stream_modes`
    stream_subgraphs: bool | None = None
    stream_resumable: bool | None = None
    durability: Durability | None = None
    # POSTed the run when it ends (server/langgraph/webhooks.py, runner/webhooks.py)
    webhook: str | None = None


class RunCreate(CronRun, kw_only=True):
    """Body of `POST /threads/{id}/runs[/stream|/wait]` and the stateless `/runs` twins: a
    cron's run fields with their defaults, and what only a run asked now takes."""

    assistant_id: str  # a UUID or a graph name
    multitask_strategy: MultitaskStrategy = "enqueue"
    stream_subgraphs: bool = False
    command: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    if_not_exists: Literal["create", "reject"] = "reject"
    on_disconnect: Literal["cancel", "continue"] = "continue"  # stream and wait only
    on_completion: Literal["delete", "keep"] | None = None  # stateless runs only
    after_seconds: float | None = None
    feedback_keys: list[str] | None = None


class CronCreate(CronRun, kw_only=True):
    """Body of `POST /runs/crons` and `POST /threads/{id}/runs/crons`: the schedule, and the
    run each slot submits."""

    schedule: str
    assistant_id: str
    on_run_completed: OnRunCompleted | None = None  # stateless crons only
    end_time: datetime | None = None
    enabled: bool = True
    timezone: str | None = None  # IANA; null: UTC


class CronPatch(CronRun, kw_only=True):
    """Body of `PATCH /runs/crons/{id}` (`crons.update`): a field left out (or null, which the
    SDK leaves out) stays as it is, except `end_time`, which null clears."""

    schedule: str | None = None
    end_time: datetime | msgspec.UnsetType | None = msgspec.UNSET
    on_run_completed: OnRunCompleted | None = None
    enabled: bool | None = None
    timezone: str | None = None


class CronSearch(Request):
    assistant_id: str | None = None  # a UUID or a graph name
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: Limit = 10
    offset: Offset = 0
    sort_by: (
        Literal[
            "cron_id",
            "assistant_id",
            "thread_id",
            "created_at",
            "updated_at",
            "next_run_date",
            "end_time",
        ]
        | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[CronField] | None = None


class CronCount(Request):
    assistant_id: str | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None


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
    values: dict[str, Any] | None = None  # contained in the thread's current values
    sort_by: (
        Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"] | None
    ) = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[ThreadField] | None = None


class ThreadCount(Request):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: ThreadStatus | None = None


class ThreadPrune(Request):
    thread_ids: Annotated[list[str], Meta(max_length=MAX_PAGE)]
    strategy: Literal["delete", "keep_latest"] = "delete"


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
    name: str | None = None  # a part of the name, in any case
    metadata: dict[str, Any] | None = None
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[AssistantField] | None = None


class AssistantCreate(Request):
    """Body of `POST /assistants` (`assistants.create`)."""

    graph_id: str
    assistant_id: str | None = None  # a UUID; none: a new one
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"
    name: str | None = None  # none: "Untitled", as LangGraph names it
    description: str | None = None


class AssistantPatch(Request):
    """Body of `PATCH /assistants/{id}` (`assistants.update`): a new version, with the fields
    given; `metadata` is merged into the assistant's."""

    graph_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None


class AssistantVersions(Request):
    """Body of `POST /assistants/{id}/versions` (`assistants.get_versions`)."""

    metadata: dict[str, Any] | None = None
    limit: Limit = 10
    offset: Offset = 0


class AssistantLatest(Request):
    """Body of `POST /assistants/{id}/latest` (`assistants.set_latest`)."""

    version: Annotated[int, Meta(ge=1, le=2**31 - 1)]


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


class StorePut(Request):
    """Body of `PUT /store/items` (`store.put_item`)."""

    namespace: list[str]
    key: str
    value: dict[str, Any]
    # the paths to embed, instead of the project's `store.index.fields`; False: none
    index: (
        Literal[False] | Annotated[list[str], Meta(max_length=limits.STORE_INDEX_MAX_FIELDS)] | None
    ) = None
    ttl: Annotated[float, Meta(ge=STORE_MIN_TTL_MINUTES, le=STORE_MAX_TTL_MINUTES)] | None = None


class StoreDelete(Request):
    """Body of `DELETE /store/items` (`store.delete_item`)."""

    key: str
    namespace: list[str] = []


class StoreSearch(Request):
    """Body of `POST /store/items/search` (`store.search_items`)."""

    namespace_prefix: list[str] = []
    filter: dict[str, Any] | None = None
    limit: Limit = 10
    offset: Offset = 0
    # ranks by similarity with the project's `store.index` (ignored without one)
    query: Annotated[str, Meta(max_length=limits.STORE_QUERY_MAX_CHARS)] | None = None
    refresh_ttl: bool | None = None


class StoreListNamespaces(Request):
    """Body of `POST /store/namespaces` (`store.list_namespaces`)."""

    prefix: list[str] | None = None  # a label may be `*`, matching any one label
    suffix: list[str] | None = None
    max_depth: Annotated[int, Meta(ge=1, le=STORE_MAX_DEPTH)] | None = None
    limit: Limit = 100
    offset: Offset = 0


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


# The wire shapes of assistants and crons are their records' (stream_store/assistant_records.py,
# cron_records.py), less what runstream keeps to itself (an owner, a cron's graph), with a field
# redefined where LangGraph names or types it otherwise: it keeps its place.


class Assistant(assistant_records.ActiveVersion, Response, kw_only=True):
    """An assistant: a graph's own (`metadata` `{"created_by": "system"}`), or a caller's."""

    graph: str = msgspec.field(name="graph_id")


class AssistantVersion(assistant_records.AssistantVersion, Response, kw_only=True):
    """One version of an assistant (`assistants.get_versions`)."""

    graph: str = msgspec.field(name="graph_id")


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


class Cron(cron_records.SavedCron, Response, kw_only=True):
    """A cron as LangGraph shows it; `payload` is the run request each slot submits."""

    assistant_id: str  # a cron of a graph's own assistant: that assistant's id
    on_run_completed: OnRunCompleted | None
    user_id: str | None = None  # LangGraph's creator; runstream's callers are owners: null
