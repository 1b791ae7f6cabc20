"""LangGraph's run routes: create, stream, wait, join, list, get, cancel, delete (cancelling
many at once: `bulk_cancel.py`).

One engine, two dialects: a run made here is a runstream run (the same records, stream,
workers and lifecycle as `/v1`). Making it from a request is `submit.py`'s; following it, as
LangGraph's SSE stream or its outcome, is `follow.py`'s.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from litestar import Controller, Response, delete, get, post
from litestar.params import Parameter
from litestar.response import Stream

from server import inputs
from server.access.runs import reach_run
from server.access.threads import reach_thread
from server.callers.auth import Caller
from server.callers.budgets import WRITE
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.errors import Conflict, NotFound
from stream_store.run_status import ACTIVE
from wire.events import RunStatus

from .follow import StreamModeQuery, modes_of, run_paths, stream_response, wait_response
from .rejoin import opens, resume_point
from .request_keys import RequestStamp
from .statuses import is_over, run_status
from .submit import submit, submit_batch
from .views import run_view
from .wire import MAX_PAGE, Run, RunCreate

__all__ = ["RunsController", "StatelessRunsController"]


async def _create(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    data: RunCreate,
    thread_id: str | None,
    stamp: RequestStamp,
) -> Response[Run]:
    run = await submit(resources, quotas, caller, data, thread_id, stamp)
    return Response(run_view(run), headers={"Content-Location": run_paths(run)["Content-Location"]})


async def _create_stream(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    data: RunCreate,
    thread_id: str | None,
    stamp: RequestStamp,
) -> Stream:
    run = await submit(resources, quotas, caller, data, thread_id, stamp)
    return await stream_response(
        resources,
        quotas,
        caller,
        run,
        modes=modes_of(run, None),
        after="0-0",
        cancel_on_disconnect=data.on_disconnect == "cancel",
    )


async def _create_wait(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    data: RunCreate,
    thread_id: str | None,
    stamp: RequestStamp,
) -> Stream:
    run = await submit(resources, quotas, caller, data, thread_id, stamp)
    return await wait_response(resources, run, data.on_disconnect == "cancel")


class RunsController(Controller):
    path = "/threads/{thread_id:str}/runs"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create a background run")
    async def create(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> Response[Run]:
        return await _create(resources, quotas, caller, data, thread_id, stamp)

    @post("/stream", status_code=200, summary="Create a run and stream it")
    async def create_stream(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> Stream:
        return await _create_stream(resources, quotas, caller, data, thread_id, stamp)

    @post("/wait", status_code=200, summary="Create a run and wait for its outcome")
    async def create_wait(
        self,
        thread_id: str,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> Stream:
        return await _create_wait(resources, quotas, caller, data, thread_id, stamp)

    @get("/", summary="A thread's runs, newest first")
    async def list_runs(
        self,
        thread_id: str,
        resources: Resources,
        caller: Caller,
        limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 10,
        offset: Annotated[int, Parameter(ge=0)] = 0,
        status: Annotated[str | None, Parameter(query="status", required=False)] = None,
    ) -> list[Run]:
        thread = await reach_thread(resources, caller, thread_id)
        runs = [
            run_view(r)
            for r in reversed(
                await resources.run_records.thread_runs(thread.thread_id, caller.owner)
            )
        ]
        if status:
            runs = [r for r in runs if r.status == status]
        return runs[offset : offset + limit]

    @get("/{run_id:str}", summary="A run")
    async def read(self, thread_id: str, run_id: str, resources: Resources, caller: Caller) -> Run:
        return run_view(await reach_run(resources, caller, run_id, thread_id=thread_id))

    @get("/{run_id:str}/join", summary="Wait for a run's outcome")
    async def join(
        self,
        thread_id: str,
        run_id: str,
        resources: Resources,
        caller: Caller,
        cancel_on_disconnect: inputs.FlagQuery = None,
    ) -> Stream:
        run = await reach_run(resources, caller, run_id, thread_id=thread_id)
        return await wait_response(
            resources,
            run,
            inputs.flag(cancel_on_disconnect, "cancel_on_disconnect"),
            stored=is_over(run.status),
        )

    @get("/{run_id:str}/stream", summary="Join a run's stream (Last-Event-ID resumes)")
    async def join_stream(
        self,
        thread_id: str,
        run_id: str,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stream_mode: StreamModeQuery = None,
        cancel_on_disconnect: inputs.FlagQuery = None,
        last_event_id_header: inputs.LastEventIdHeader = None,
        last_event_id_query: inputs.LastEventIdQuery = None,
    ) -> Stream:
        run = await reach_run(resources, caller, run_id, thread_id=thread_id)
        resume_from = inputs.last_event_id(last_event_id_header, last_event_id_query)
        after, partly_sent = resume_point(resume_from)
        asked = [m for m in (stream_mode or []) if m]
        return await stream_response(
            resources,
            quotas,
            caller,
            run,
            modes=modes_of(run, asked),
            after=after,
            cancel_on_disconnect=inputs.flag(cancel_on_disconnect, "cancel_on_disconnect"),
            partly_sent=partly_sent,
            opening=opens(resume_from),
        )

    @post("/{run_id:str}/cancel", status_code=202, summary="Cancel a run", dependencies=WRITE)
    async def cancel(
        self,
        thread_id: str,
        run_id: str,
        resources: Resources,
        caller: Caller,
        wait: inputs.FlagQuery = None,
        action: Annotated[str | None, Parameter(required=False)] = None,
    ) -> Response[Any] | Stream:
        shown = {"action": action or "interrupt", "metadata": {"run_ids": [run_id], "status": None}}
        run = await reach_run(resources, caller, run_id, "update", shown, thread_id=thread_id)
        if is_over(run.status):
            # an engine run paused at interrupt() is, to LangGraph, a run that ended (`success`)
            status = run_status(run.status)
            raise NotFound(f"No matching runs to cancel: run {run_id} is {status}")
        try:
            # `rollback` (LangGraph): the run goes too, with the checkpoints it wrote
            run = await resources.lifecycle.cancel(run, rollback=action == "rollback")
        except Conflict:
            raise NotFound(f"No matching runs to cancel: run {run_id} already ended") from None
        if inputs.flag(wait, "wait"):
            # 200 and `{}` once the run is over, as LangGraph: the JS SDK resolves on the body
            return await wait_response(
                resources, run, False, rollback=action == "rollback", values=False
            )
        return Response(None, status_code=202)

    @delete("/{run_id:str}", status_code=204, summary="Delete a finished run", dependencies=WRITE)
    async def delete_run(
        self, thread_id: str, run_id: str, resources: Resources, caller: Caller
    ) -> None:
        run = await reach_run(resources, caller, run_id, "delete", thread_id=thread_id)
        if run.status == RunStatus.INTERRUPTED:
            # LangGraph's run ended at its interrupt (`success`); runstream's waits: end it
            with contextlib.suppress(Conflict):
                run = await resources.lifecycle.cancel(run)
        if run.status in ACTIVE:
            raise Conflict(f"run {run_id} is {run.status}; cancel it first", code="run_active")
        await resources.run_records.delete_run(run.run_id, caller.owner)
        await resources.events.delete([run.run_id])


class StatelessRunsController(Controller):
    """`/runs/...`: each run gets a new thread, kept afterwards (runstream keeps every run)."""

    path = "/runs"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create a background run on a new thread")
    async def create(
        self,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> Response[Run]:
        return await _create(resources, quotas, caller, data, None, stamp)

    @post("/stream", status_code=200, summary="Stream a run on a new thread")
    async def create_stream(
        self,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> Stream:
        return await _create_stream(resources, quotas, caller, data, None, stamp)

    @post("/wait", status_code=200, summary="Run on a new thread and wait for its outcome")
    async def create_wait(
        self,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> Stream:
        return await _create_wait(resources, quotas, caller, data, None, stamp)

    @post("/batch", status_code=200, summary="Create background runs, each on a new thread")
    async def create_batch(
        self,
        data: list[RunCreate],
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        stamp: RequestStamp,
    ) -> list[Run]:
        runs = await submit_batch(resources, quotas, caller, data, stamp)
        return [run_view(run) for run in runs]
