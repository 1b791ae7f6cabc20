"""LangGraph's thread routes: create, get, search, update, delete, state and history."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from litestar import Controller, delete, get, patch, post
from litestar.params import Body, Parameter
from litestar.response import Stream

from server import inputs
from server.access.threads import (
    create_thread,
    new_thread_filters,
    reach_thread,
    thread_listing_filters,
    thread_not_found,
    threads_to_prune,
)
from server.callers.auth import Caller
from server.callers.budgets import QUERY, WRITE
from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.inputs import InvalidId
from server.resources import Resources
from stream_store.errors import Conflict
from stream_store.thread_deletion import delete_langgraph_threads

from .follow import StreamModeQuery
from .state_writes import checked_checkpoint_id, copy_thread, update_state
from .statuses import THREAD_STATUS, thread_status
from .thread_search import search_threads
from .thread_stream import thread_stream_response
from .views import (
    state_at,
    state_history,
    thread_state,
    thread_view,
)
from .wire import (
    MAX_PAGE,
    HistoryRequest,
    StateCheckpointRequest,
    StateUpdate,
    Thread,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadPrune,
    ThreadSearch,
    ThreadState,
)

__all__ = ["ThreadsController"]

logger = structlog.get_logger()

MAX_CHECKPOINT_NS_CHARS = 1000  # a subgraph's namespace: `node:task_id` per level, `|` between


def _before(before: str | dict[str, Any] | None) -> str | None:
    """History's `before`: a checkpoint id, or a checkpoint object holding one, checked as a
    checkpoint id is everywhere (a UUID; 422 otherwise). An integer id reached the
    checkpointer's query and was a 500."""
    if isinstance(before, dict):
        before = before.get("checkpoint_id")
        if before is not None and not isinstance(before, str):
            raise ApiError(422, "invalid_request", "before.checkpoint_id must be a string")
    return checked_checkpoint_id(before) if before else None


def _where(checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    """Where in the thread a `checkpoint` object points: its `checkpoint_ns` (a subgraph's
    namespace, as a task's `checkpoint` or a subgraph state's gives it), `checkpoint_map` (the
    ids of its parents' checkpoints) and `checkpoint_id`, each checked (422 otherwise)."""
    checkpoint = checkpoint or {}
    where: dict[str, Any] = {}
    namespace = checkpoint.get("checkpoint_ns")
    if namespace is not None:
        if not isinstance(namespace, str) or len(namespace) > MAX_CHECKPOINT_NS_CHARS:
            raise ApiError(
                422,
                "invalid_request",
                f"checkpoint.checkpoint_ns must be a string of at most"
                f" {MAX_CHECKPOINT_NS_CHARS} characters",
            )
        where["checkpoint_ns"] = namespace
    parents = checkpoint.get("checkpoint_map")
    if parents is not None:
        if not isinstance(parents, dict) or not all(
            isinstance(ns, str) and isinstance(parent, str) for ns, parent in parents.items()
        ):
            raise ApiError(
                422, "invalid_request", "checkpoint.checkpoint_map must map strings to ids"
            )
        where["checkpoint_map"] = {ns: checked_checkpoint_id(p) for ns, p in parents.items()}
    checkpoint_id = checkpoint.get("checkpoint_id")
    if checkpoint_id is not None:
        if not isinstance(checkpoint_id, str):
            raise ApiError(422, "invalid_request", "checkpoint.checkpoint_id must be a string")
        where["checkpoint_id"] = checked_checkpoint_id(checkpoint_id)
    return where


class ThreadsController(Controller):
    path = "/threads"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create a thread (optionally with its id)")
    async def create(
        self,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        data: Annotated[ThreadCreate | None, Body()] = None,
    ) -> Thread:
        body = data or ThreadCreate()
        thread_id = inputs.object_id(body.thread_id, "thread") if body.thread_id else None
        thread = await create_thread(
            resources,
            quotas,
            caller,
            dict(body.metadata or {}),
            thread_id=thread_id,
            if_exists=body.if_exists or "raise",
            langgraph=True,
        )
        return await thread_view(resources, thread)

    @post(
        "/search",
        status_code=200,
        summary="The caller's threads, most recently updated first",
        dependencies=QUERY,
    )
    async def search(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[ThreadSearch | None, Body()] = None,
    ) -> list[Any]:
        body = data or ThreadSearch()
        ids = _search_ids(body.ids) if body.ids else None
        filters = await thread_listing_filters(
            caller,
            {
                "metadata": body.metadata or {},
                "values": body.values or {},
                "status": body.status,
                "limit": body.limit,
                "offset": body.offset,
                "ids": ids,
            },
        )
        return await search_threads(resources, caller.owner, body, ids, filters)

    @post(
        "/count",
        status_code=200,
        summary="How many of the caller's threads match",
        dependencies=QUERY,
    )
    async def count(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[ThreadCount | None, Body()] = None,
    ) -> int:
        body = data or ThreadCount()
        if body.values:
            raise ApiError(422, "invalid_request", "counting threads by values is not supported")
        filters = await thread_listing_filters(
            caller, {"metadata": body.metadata or {}, "status": body.status}
        )
        return await resources.searched_threads(caller.owner).count_threads(
            caller.owner,
            metadata=body.metadata or {},
            named=(THREAD_STATUS, body.status),
            auth_filters=filters,
        )

    @post(
        "/prune",
        status_code=200,
        summary="Delete threads, or all their checkpoints but the latest",
        dependencies=WRITE,
    )
    async def prune(
        self, data: ThreadPrune, resources: Resources, caller: Caller
    ) -> dict[str, int]:
        """`delete`: as `DELETE /threads/{id}` for each, in one transaction under the threads'
        locks. `keep_latest`: each thread keeps only its current state (LangGraph's
        checkpointer prunes the rest; history then shows one state). Ids that are unknown or
        another caller's are skipped and not counted, as a missing thread is. A thread with a
        queued or running run refuses the whole prune (409) before anything changes."""
        ids = list(dict.fromkeys(inputs.object_id(i, "thread") for i in data.thread_ids))
        ids = await threads_to_prune(resources, caller, ids)
        if data.strategy == "delete":
            count = await delete_langgraph_threads(
                resources.thread_records, resources.lifecycle, caller.owner, ids
            )
            logger.info("threads pruned", count=count, strategy=data.strategy)
            return {"pruned_count": count}
        threads = await resources.thread_records.search_threads(
            caller.owner, metadata={}, limit=max(1, len(ids)), offset=0, ids=ids
        )
        if busy := [t.thread_id for t in threads if thread_status(t) == "busy"]:
            raise Conflict(
                f"threads with a queued or running run cannot be pruned: {', '.join(busy)}",
                code="thread_busy",
            )
        await resources.checkpointer.aprune([t.thread_id for t in threads], strategy="keep_latest")
        logger.info("threads pruned", count=len(threads), strategy=data.strategy)
        return {"pruned_count": len(threads)}

    @get("/{thread_id:str}", summary="A thread, with its current values")
    async def read(self, thread_id: str, resources: Resources, caller: Caller) -> Thread:
        thread = await reach_thread(resources, caller, thread_id, langgraph=True)
        return await thread_view(resources, thread)

    @patch("/{thread_id:str}", summary="Merge metadata into a thread", dependencies=WRITE)
    async def update(
        self, thread_id: str, data: ThreadPatch, resources: Resources, caller: Caller
    ) -> Thread:
        value: dict[str, Any] = {"metadata": dict(data.metadata or {})}
        thread = await reach_thread(resources, caller, thread_id, action="update", value=value)
        changes = value.get("metadata") or {}  # as the project's handler left them
        metadata = {**thread.metadata, **changes}
        inputs.metadata(metadata, resources.settings)
        updated = await resources.thread_records.update_thread_metadata(
            thread.thread_id, caller.owner, changes, latest_run=True
        )
        if updated is None:
            raise thread_not_found(thread_id)
        return await thread_view(resources, updated)

    @delete(
        "/{thread_id:str}",
        status_code=204,
        summary="Delete a thread, its runs and state",
        dependencies=WRITE,
    )
    async def remove(self, thread_id: str, resources: Resources, caller: Caller) -> None:
        """As LangGraph's: the thread's queued and running runs are cancelled and go with it
        (observed on `langgraph dev`: 204; a viewer of the running run gets the end; `runs.get`
        is 404 after), as does an interrupted run (runstream's own would wait for a resume);
        their viewers get `cancelled` and the end. A worker still running one is fenced
        (`stream_store.thread_records.delete_langgraph_threads`)."""
        thread = await reach_thread(resources, caller, thread_id, action="delete")
        ids = [thread.thread_id]
        if not await delete_langgraph_threads(
            resources.thread_records,
            resources.lifecycle,
            caller.owner,
            ids,
            with_active_runs=True,
        ):
            raise thread_not_found(thread_id)  # deleted meanwhile

    @get("/{thread_id:str}/stream", summary="The thread's runs as one stream (Last-Event-ID)")
    async def join_stream(
        self,
        thread_id: str,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stream_mode: StreamModeQuery = None,
        stream_modes: Annotated[  # the name LangGraph's API reference gives it
            list[str] | None, Parameter(query="stream_modes", required=False)
        ] = None,
        last_event_id_header: inputs.LastEventIdHeader = None,
        last_event_id_query: inputs.LastEventIdQuery = None,
    ) -> Stream:
        thread = await reach_thread(resources, caller, thread_id)
        return await thread_stream_response(
            resources,
            quotas,
            caller,
            thread,
            modes=[*(stream_mode or []), *(stream_modes or [])],
            last_event_id=inputs.last_event_id(last_event_id_header, last_event_id_query),
        )

    @get("/{thread_id:str}/state", summary="The thread's current state")
    async def state(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        subgraphs: inputs.FlagQuery = None,
    ) -> ThreadState:
        thread = await reach_thread(resources, caller, thread_id)
        return await thread_state(resources, thread, inputs.flag(subgraphs, "subgraphs"))

    @post(
        "/{thread_id:str}/state",
        status_code=200,
        summary="Write the thread's state",
        dependencies=WRITE,
    )
    async def update_state(
        self, thread_id: str, data: StateUpdate, resources: Resources, caller: Caller
    ) -> dict[str, Any]:
        thread = await reach_thread(resources, caller, thread_id, action="update")
        return await update_state(resources, thread, data)

    @post(
        "/{thread_id:str}/copy",
        status_code=200,
        summary="Copy a thread with its state",
        dependencies=WRITE,
    )
    async def copy(self, thread_id: str, resources: Resources, caller: Caller) -> Thread:
        thread = await reach_thread(resources, caller, thread_id)
        await new_thread_filters(caller, {"thread_id": None})  # as LangGraph asks
        return await thread_view(resources, await copy_thread(resources, thread))

    @get("/{thread_id:str}/state/{checkpoint_id:str}", summary="The thread's state at a checkpoint")
    async def state_at_id(
        self,
        thread_id: str,
        checkpoint_id: str,
        resources: Resources,
        caller: Caller,
        subgraphs: inputs.FlagQuery = None,
    ) -> ThreadState:
        thread = await reach_thread(resources, caller, thread_id)
        checked = checked_checkpoint_id(checkpoint_id)
        return await state_at(
            resources, thread, checked, subgraphs=inputs.flag(subgraphs, "subgraphs")
        )

    @post(
        "/{thread_id:str}/state/checkpoint",
        status_code=200,
        summary="The thread's state at a checkpoint (given as an object)",
    )
    async def state_at_checkpoint(
        self, thread_id: str, data: StateCheckpointRequest, resources: Resources, caller: Caller
    ) -> ThreadState:
        where = _where(data.checkpoint)
        thread = await reach_thread(resources, caller, thread_id)
        checkpoint_id = where.pop("checkpoint_id", None)
        if checkpoint_id is None and not where.get("checkpoint_ns"):
            # as `RemoteGraph.aget_state` asks: the latest, as LangGraph
            return await thread_state(resources, thread, data.subgraphs)
        return await state_at(resources, thread, checkpoint_id, where, data.subgraphs)

    @get(
        "/{thread_id:str}/history",
        summary="The thread's past states, newest first",
        dependencies=QUERY,
    )
    async def history(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 10,
        before: Annotated[str | None, Parameter(required=False)] = None,
    ) -> list[ThreadState]:
        checked = _before(before)
        thread = await reach_thread(resources, caller, thread_id)
        return await state_history(resources, thread, limit, checked)

    @post(
        "/{thread_id:str}/history",
        status_code=200,
        summary="The thread's past states",
        dependencies=QUERY,
    )
    async def search_history(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        data: Annotated[HistoryRequest | None, Body()] = None,
    ) -> list[ThreadState]:
        body = data or HistoryRequest()
        before = _before(body.before)
        where = _where(body.checkpoint)  # a subgraph's history: its `checkpoint_ns`
        thread = await reach_thread(resources, caller, thread_id)
        return await state_history(resources, thread, body.limit, before, where)


def _search_ids(ids: list[str]) -> list[str]:
    """A search's thread ids; a malformed one is 400 here, as LangGraph's server answers it
    (a malformed id elsewhere is 422, `api.py`)."""
    checked = []
    for thread_id in ids:
        try:
            checked.append(inputs.object_id(thread_id, "thread"))
        except InvalidId:
            raise ApiError(400, "invalid_id", f"Invalid thread ID {thread_id[:80]}") from None
    return checked
