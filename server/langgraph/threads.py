"""LangGraph's thread routes: create, get, search, update, delete, state and history."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated, Any

import structlog
from litestar import Controller, delete, get, patch, post
from litestar.params import Body, Parameter

from stream_store.errors import Conflict, NotFound
from stream_store.quotas import CallerQuotas
from stream_store.threads import delete_thread

from .. import inputs
from ..auth import Caller
from ..errors import ApiError
from ..resources import Resources
from ..threads import owned_thread
from .state_writes import checked_checkpoint_id, copy_thread, update_state
from .views import (
    assistant,
    graph_of_assistant,
    state_at,
    state_history,
    thread_state,
    thread_view,
)
from .wire import (
    MAX_PAGE,
    Assistant,
    AssistantCount,
    AssistantSearch,
    HistoryRequest,
    StateCheckpointRequest,
    StateUpdate,
    Thread,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadSearch,
    ThreadState,
)

__all__ = ["AssistantsController", "ThreadsController", "info", "ok"]

logger = structlog.get_logger()


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
        metadata = body.metadata or {}
        inputs.metadata(metadata, resources.settings)
        thread_id = inputs.object_id(body.thread_id, "thread") if body.thread_id else None
        await quotas.take_submit(caller.owner)
        thread = await resources.records.create_thread(caller.owner, metadata, thread_id)
        if thread is None:
            existing = await resources.records.get_thread(str(thread_id), caller.owner)
            if body.if_exists == "do_nothing" and existing is not None:
                return await thread_view(resources, existing)
            raise Conflict(f"Thread with ID {thread_id} already exists", code="thread_exists")
        logger.info("thread created", thread_id=thread.thread_id, dialect="langgraph")
        return await thread_view(resources, thread)

    @post("/search", status_code=200, summary="The caller's threads, newest first")
    async def search(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[ThreadSearch | None, Body()] = None,
    ) -> list[Thread]:
        body = data or ThreadSearch()
        threads = await resources.records.search_threads(
            caller.owner,
            metadata=body.metadata or {},
            status=body.status,
            limit=body.limit,
            offset=body.offset,
            ids=[inputs.object_id(i, "thread") for i in body.ids] if body.ids else None,
        )
        return [await thread_view(resources, t) for t in threads]

    @post("/count", status_code=200, summary="How many of the caller's threads match")
    async def count(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[ThreadCount | None, Body()] = None,
    ) -> int:
        body = data or ThreadCount()
        if body.values:
            raise ApiError(422, "invalid_request", "counting threads by values is not supported")
        return await resources.records.count_threads(
            caller.owner, metadata=body.metadata or {}, status=body.status
        )

    @get("/{thread_id:str}", summary="A thread, with its current values")
    async def read(self, thread_id: str, resources: Resources, caller: Caller) -> Thread:
        return await thread_view(resources, await owned_thread(resources, thread_id, caller))

    @patch("/{thread_id:str}", summary="Merge metadata into a thread")
    async def update(
        self, thread_id: str, data: ThreadPatch, resources: Resources, caller: Caller
    ) -> Thread:
        thread = await owned_thread(resources, thread_id, caller)
        metadata = {**thread.metadata, **(data.metadata or {})}
        inputs.metadata(metadata, resources.settings)
        updated = await resources.records.update_thread_metadata(
            thread.thread_id, caller.owner, data.metadata or {}
        )
        if updated is None:
            raise NotFound(f"thread {thread_id} not found")
        return await thread_view(resources, updated)

    @delete("/{thread_id:str}", status_code=204, summary="Delete a thread, its runs and state")
    async def remove(self, thread_id: str, resources: Resources, caller: Caller) -> None:
        thread = await owned_thread(resources, thread_id, caller)
        # LangGraph's interrupted run is over; runstream's waits for a resume: end it first.
        for run in await resources.records.thread_runs(thread.thread_id, caller.owner):
            if run.status == "interrupted":
                await resources.lifecycle.cancel(run)
        await delete_thread(resources.records, resources.events, thread.thread_id, caller.owner)

    @get("/{thread_id:str}/state", summary="The thread's current state")
    async def state(self, thread_id: str, resources: Resources, caller: Caller) -> ThreadState:
        return await thread_state(resources, await owned_thread(resources, thread_id, caller))

    @post("/{thread_id:str}/state", status_code=200, summary="Write the thread's state")
    async def update_state(
        self, thread_id: str, data: StateUpdate, resources: Resources, caller: Caller
    ) -> dict[str, Any]:
        thread = await owned_thread(resources, thread_id, caller)
        return await update_state(resources, thread, data)

    @post("/{thread_id:str}/copy", status_code=200, summary="Copy a thread with its state")
    async def copy(self, thread_id: str, resources: Resources, caller: Caller) -> Thread:
        thread = await owned_thread(resources, thread_id, caller)
        return await thread_view(resources, await copy_thread(resources, thread))

    @get("/{thread_id:str}/state/{checkpoint_id:str}", summary="The thread's state at a checkpoint")
    async def state_at_id(
        self, thread_id: str, checkpoint_id: str, resources: Resources, caller: Caller
    ) -> ThreadState:
        thread = await owned_thread(resources, thread_id, caller)
        return await state_at(resources, thread, checked_checkpoint_id(checkpoint_id))

    @post(
        "/{thread_id:str}/state/checkpoint",
        status_code=200,
        summary="The thread's state at a checkpoint (given as an object)",
    )
    async def state_at_checkpoint(
        self, thread_id: str, data: StateCheckpointRequest, resources: Resources, caller: Caller
    ) -> ThreadState:
        thread = await owned_thread(resources, thread_id, caller)
        checkpoint_id = data.checkpoint.get("checkpoint_id")
        if not isinstance(checkpoint_id, str):
            raise ApiError(422, "invalid_request", "checkpoint.checkpoint_id must be a string")
        return await state_at(resources, thread, checked_checkpoint_id(checkpoint_id))

    @get("/{thread_id:str}/history", summary="The thread's past states, newest first")
    async def history(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 10,
        before: Annotated[str | None, Parameter(required=False)] = None,
    ) -> list[ThreadState]:
        thread = await owned_thread(resources, thread_id, caller)
        return await state_history(resources, thread, limit, before)

    @post("/{thread_id:str}/history", status_code=200, summary="The thread's past states")
    async def search_history(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        data: Annotated[HistoryRequest | None, Body()] = None,
    ) -> list[ThreadState]:
        body = data or HistoryRequest()
        before = body.before.get("checkpoint_id") if isinstance(body.before, dict) else body.before
        thread = await owned_thread(resources, thread_id, caller)
        return await state_history(resources, thread, body.limit, before)


def _assistants(resources: Resources, query: AssistantSearch | AssistantCount) -> list[Assistant]:
    """The assistants (one per graph) that match a search's graph id, name and metadata."""
    found = [assistant(name, resources.started_at) for name in resources.graphs.names()]
    return [
        a
        for a in found
        if query.graph_id in (None, a.graph_id)
        and query.name in (None, a.name)
        and (query.metadata or {}).items() <= a.metadata.items()
    ]


class AssistantsController(Controller):
    """Each registered graph is an assistant, with LangGraph's id for it."""

    path = "/assistants"
    tags = ["langgraph"]

    @post("/search", status_code=200, summary="The assistants (one per graph)")
    async def search(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantSearch | None, Body()] = None,
    ) -> list[Assistant]:
        body = data or AssistantSearch()
        return _assistants(resources, body)[body.offset : body.offset + body.limit]

    @post("/count", status_code=200, summary="How many assistants match")
    async def count(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantCount | None, Body()] = None,
    ) -> int:
        return len(_assistants(resources, data or AssistantCount()))

    @get("/{assistant_id:str}/graph", summary="The assistant's graph: nodes and edges")
    async def graph(
        self,
        assistant_id: str,
        resources: Resources,
        caller: Caller,
        xray: Annotated[str | None, Parameter(required=False)] = None,
    ) -> dict[str, Any]:
        name = graph_of_assistant(resources, assistant_id)
        depth: bool | int = False
        if xray is not None:
            if xray.lower() in ("true", "false"):
                depth = xray.lower() == "true"
            elif xray.isdigit():
                depth = int(xray)
            else:
                raise ApiError(422, "invalid_request", "xray must be true, false or a number")
        drawable = await resources.graphs.get(name, resources.checkpointer).aget_graph(xray=depth)
        return drawable.to_json()

    @get("/{assistant_id:str}", summary="An assistant, by its id or its graph's name")
    async def read(self, assistant_id: str, resources: Resources, caller: Caller) -> Assistant:
        return assistant(graph_of_assistant(resources, assistant_id), resources.started_at)

    @get("/{assistant_id:str}/schemas", summary="The assistant's graph's JSON schemas")
    async def schemas(
        self, assistant_id: str, resources: Resources, caller: Caller
    ) -> dict[str, Any]:
        name = graph_of_assistant(resources, assistant_id)
        graph = resources.graphs.get(name, resources.checkpointer)
        return {
            "graph_id": name,
            "input_schema": graph.get_input_jsonschema(),
            "output_schema": graph.get_output_jsonschema(),
            "state_schema": graph.get_input_jsonschema(),
            "config_schema": None,
            "context_schema": None,
        }


@get("/ok", tags=["langgraph"], summary="LangGraph's liveness answer")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@get("/info", tags=["langgraph"], summary="Server information, as LangGraph gives it")
async def info() -> dict[str, Any]:
    return {
        "version": version("runstream"),
        "flags": {"assistants": True, "crons": False, "langsmith": False},
        "host": {"kind": "runstream", "project_id": None, "revision_id": None},
    }
