"""`POST /runs/cancel`: LangGraph's cancel of many runs, by id or by status."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import structlog
from litestar import Controller, post
from litestar.params import Parameter

from server import inputs
from server.access.runs import allowed_runs
from server.callers.auth import Caller
from server.callers.budgets import WRITE
from server.resources import Resources
from stream_store.errors import Conflict, NotFound
from stream_store.limits import BULK_CANCEL_MAX_RUNS
from stream_store.run_records import RunRecord

from .statuses import BULK_CANCEL_STATUSES, is_over
from .submit import unprocessable
from .wire import BulkCancel

__all__ = ["BulkCancelController"]

logger = structlog.get_logger()


async def _bulk_targets(
    resources: Resources, caller: Caller, body: BulkCancel, action: str | None
) -> list[RunRecord]:
    """The runs a bulk cancel names, by status or by id: of the ids, those that are the
    caller's (on `thread_id`, if given), looked up in one query. Unknown ids and another
    caller's are skipped alike, as LangGraph skips unknown ones; 404 when none is left."""
    thread_id = inputs.object_id(body.thread_id, "thread") if body.thread_id else None
    # what LangGraph's `threads` `update` handler is shown for a bulk cancel
    shown: dict[str, Any] = {
        "thread_id": thread_id,
        "action": action or "interrupt",
        "metadata": {"run_ids": body.run_ids, "status": body.status},
    }
    if body.status is not None:
        if body.run_ids:
            raise unprocessable("give run_ids or status, not both")
        runs = await resources.run_records.working_runs(
            caller.owner, BULK_CANCEL_STATUSES[body.status]
        )
        runs = [r for r in runs if thread_id in (None, r.thread_id)]
        return await allowed_runs(resources, caller, runs, "update", shown)
    if not body.run_ids:
        raise unprocessable("give thread_id and run_ids, or status")
    if len(body.run_ids) > BULK_CANCEL_MAX_RUNS:
        raise unprocessable(
            f"run_ids holds {len(body.run_ids)} ids; the limit is {BULK_CANCEL_MAX_RUNS}"
            " per request"
        )
    ids = list(dict.fromkeys(inputs.object_id(run_id, "run") for run_id in body.run_ids))
    runs = [
        run
        for run in await resources.run_records.get_runs(ids)
        if run.owner == caller.owner and thread_id in (None, run.thread_id)
    ]
    runs = await allowed_runs(resources, caller, runs, "update", shown)
    if not runs:
        raise NotFound("No runs found to cancel.")
    return runs


class BulkCancelController(Controller):
    path = "/runs/cancel"
    tags = ["langgraph"]

    @post("/", status_code=204, summary="Cancel runs by id or by status", dependencies=WRITE)
    async def cancel_many(
        self,
        data: BulkCancel,
        resources: Resources,
        caller: Caller,
        action: Annotated[str | None, Parameter(required=False)] = None,
    ) -> None:
        if action not in (None, "interrupt", "rollback"):
            raise unprocessable("action must be interrupt or rollback")
        for run in await _bulk_targets(resources, caller, data, action):
            if is_over(run.status):
                continue  # over already (to LangGraph, an interrupted run is over too)
            with contextlib.suppress(Conflict):  # it ended meanwhile
                await resources.lifecycle.cancel(run, rollback=action == "rollback")
        logger.info("runs cancelled in bulk", thread_id=data.thread_id, status=data.status)
