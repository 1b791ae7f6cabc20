"""`/v1/threads`: conversations that outlive runs, processes and restarts."""

from __future__ import annotations

from typing import Annotated

import msgspec
import structlog
from litestar import Controller, Response, delete, get, post
from litestar.params import Body, Parameter

from server import inputs
from server.access.threads import create_thread, reach_thread, thread_listing_filters
from server.callers.auth import Caller
from server.callers.budgets import WRITE
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from server.v1.bodies import RunCreate, ThreadCreate
from stream_store.messages import thread_messages, to_wire_message
from stream_store.thread_deletion import delete_thread
from stream_store.thread_records import ThreadRecord
from wire.responses import EvaluationList, RunList, RunOut, ThreadDetail, ThreadList, ThreadOut

from .runs import IdempotencyHeader, evaluation_list, run_out, submit_run

__all__ = ["ThreadsController"]

logger = structlog.get_logger()


def thread_out(thread: ThreadRecord) -> ThreadOut:
    return ThreadOut(
        thread_id=thread.thread_id,
        title=thread.title,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        status=thread.status,
        metadata=thread.metadata,
    )


class ThreadsController(Controller):
    path = "/v1/threads"
    tags = ["threads"]

    @post("/", status_code=201, summary="Create an empty thread")
    async def create(
        self,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        data: Annotated[ThreadCreate | None, Body()] = None,
    ) -> ThreadOut:
        metadata = dict(data.metadata if data else {})
        return thread_out(await create_thread(resources, quotas, caller, metadata))

    @get("/", summary="The caller's threads, newest first")
    async def list_threads(
        self,
        resources: Resources,
        caller: Caller,
        limit: Annotated[int, Parameter(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Parameter(required=False)] = None,
    ) -> ThreadList:
        before = inputs.decode_cursor(cursor) if cursor else None
        filters = await thread_listing_filters(caller, {"metadata": {}, "limit": limit})
        threads = await resources.thread_records.list_threads(
            caller.owner, limit + 1, before, auth_filters=filters
        )
        page, more = threads[:limit], len(threads) > limit
        last = page[-1] if page else None
        next_cursor = (
            inputs.encode_cursor(last.created_at, last.thread_id) if more and last else None
        )
        return ThreadList(threads=[thread_out(t) for t in page], next_cursor=next_cursor)

    @get("/{thread_id:str}", summary="A thread and its messages")
    async def read(self, thread_id: str, resources: Resources, caller: Caller) -> ThreadDetail:
        thread = await reach_thread(resources, caller, thread_id)
        saved = await thread_messages(resources.checkpointer, thread.thread_id)
        messages = [to_wire_message(m) for m in saved]
        return ThreadDetail(**msgspec.structs.asdict(thread_out(thread)), messages=messages)

    @get("/{thread_id:str}/runs", summary="The thread's runs, oldest first")
    async def runs(self, thread_id: str, resources: Resources, caller: Caller) -> RunList:
        thread = await reach_thread(resources, caller, thread_id)
        runs = await resources.run_records.thread_runs(thread.thread_id, caller.owner)
        return RunList(runs=[run_out(resources, run) for run in runs])

    @get(
        "/{thread_id:str}/evaluations",
        summary="What the graphs of the thread's runs recorded of their own work, oldest first",
    )
    async def evaluations(
        self, thread_id: str, resources: Resources, caller: Caller
    ) -> EvaluationList:
        thread = await reach_thread(resources, caller, thread_id)
        found = await resources.evaluations.for_thread(thread.thread_id, caller.owner)
        return evaluation_list(found)

    @post("/{thread_id:str}/runs", status_code=202, summary="Start a run on the thread")
    async def create_run(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        idempotency_key: IdempotencyHeader = None,
    ) -> Response[RunOut]:
        return await submit_run(
            resources,
            quotas,
            caller,
            data,
            path_thread_id=inputs.object_id(thread_id, "thread"),
            idempotency_key=idempotency_key,
        )

    @delete(
        "/{thread_id:str}", status_code=204, summary="Delete a thread for good", dependencies=WRITE
    )
    async def remove(self, thread_id: str, resources: Resources, caller: Caller) -> None:
        thread = await reach_thread(resources, caller, thread_id, "delete")
        await delete_thread(
            resources.thread_records, resources.events, thread.thread_id, caller.owner
        )
        logger.info("thread deleted")
