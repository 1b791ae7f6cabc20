"""Runs, as every path reaches them. A run is reached through its thread, as on LangGraph's
server: the project's `threads` handler decides, with LangGraph's action for each operation
(read: `read`; cancel: `update`; resume and every new run: `create_run`; delete: `delete`)."""

from __future__ import annotations

import uuid
from typing import Any

import structlog

from server import inputs
from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from server.trace_ids import current_trace_id
from stream_store.errors import NotFound
from stream_store.metadata_filters import matches
from stream_store.run_records import RunRecord
from stream_store.run_submit import Created, NewRun
from stream_store.tracing import run_attributes, traceparent_of

from .threads import ask_threads, thread_not_found

__all__ = ["allowed_runs", "prepare_run", "reach_run", "record_run", "run_not_found"]

logger = structlog.get_logger()


def run_not_found(run_id: str) -> NotFound:
    return NotFound(f"run {run_id} not found")


async def reach_run(
    resources: Resources,
    caller: Caller,
    run_id: str,
    action: str = "read",
    value: dict[str, Any] | None = None,
    *,
    thread_id: str | None = None,
) -> RunRecord:
    """The caller's run `run_id` (on `thread_id`, when a path names its thread), once the
    project's `threads` handler allowed `action` on the run's thread; bound to the log context.

    With the thread in the path (LangGraph's routes) the handler is asked first, as on
    LangGraph's server; by the run's id alone (`/v1`) it is asked once the run, and so its
    thread, is known.

    Raises:
        InvalidInput: an id is malformed.
        ApiError: the handler refused.
        NotFound: unknown, another owner's, on another thread, or its thread is left out by
            the handler's filter.
    """
    run_id = inputs.object_id(run_id, "run")
    shown = {"run_id": run_id, **(value or {})}
    filters = None
    if thread_id is not None:
        thread_id = inputs.object_id(thread_id, "thread")
        filters = await ask_threads(caller, action, thread_id, shown)
    run = await resources.run_reads.owned_run(run_id, caller.owner)
    if run is None or thread_id not in (None, run.thread_id):
        raise run_not_found(run_id)
    if caller.rules is not None:
        if thread_id is None:
            filters = await ask_threads(caller, action, run.thread_id, shown)
        if filters:
            thread = await resources.thread_records.get_thread(run.thread_id, caller.owner)
            if thread is None or not matches(thread.metadata, filters):
                raise run_not_found(run_id)
    structlog.contextvars.bind_contextvars(run_id=run.run_id, thread_id=run.thread_id)
    return run


async def prepare_run(
    resources: Resources, caller: Caller, new: NewRun, value: dict[str, Any]
) -> None:
    """Before a run is recorded (both dialects, crons included): the project's `threads`
    `create_run` handler (LangGraph calls it for every run), whose metadata changes land on the
    run and whose filter the run's thread must match; then the signed-in user into the run's
    `configurable`, which the worker hands the graph (runner/execute.py).

    Raises:
        ApiError: the handler refused.
        NotFound: the run's thread is left out by the filter.
    """
    if caller.rules is not None:
        value = {
            "thread_id": new.thread_id,
            "run_id": None,
            "status": "pending",
            "metadata": new.metadata,
            **value,
        }
        filters = await caller.authorize("threads", "create_run", value)
        new.metadata = dict(value.get("metadata") or {})
        if filters and new.thread_id is not None:
            thread = await resources.thread_records.get_thread(new.thread_id, caller.owner)
            if thread is not None and not matches(thread.metadata, filters):
                raise thread_not_found(new.thread_id)
    if caller.user is not None:
        configurable = dict(new.config.get("configurable") or {})
        configurable["langgraph_auth_user"] = caller.user.record()
        configurable["langgraph_auth_permissions"] = caller.user.permissions
        new.config = {**new.config, "configurable": configurable}


async def allowed_runs(
    resources: Resources,
    caller: Caller,
    runs: list[RunRecord],
    action: str,
    value: dict[str, Any],
) -> list[RunRecord]:
    """Of the caller's `runs` (a bulk operation's), those the project's `threads` handler
    allows `action` on: asked once, as LangGraph asks for a bulk cancel, and its filter
    applied to each run's thread (a run whose thread it leaves out is skipped, as an unknown
    one).

    Raises:
        ApiError: the handler refused.
    """
    if caller.rules is None:
        return runs
    filters = await caller.authorize("threads", action, value)
    if not filters or not runs:
        return runs
    thread_ids = sorted({run.thread_id for run in runs})
    found = await resources.thread_records.search_threads(
        caller.owner,
        metadata={},
        limit=len(thread_ids),
        offset=0,
        ids=thread_ids,
        auth_filters=filters,
    )
    kept = {thread.thread_id for thread in found}
    return [run for run in runs if run.thread_id in kept]


async def record_run(
    resources: Resources, quotas: CallerQuotas, new: NewRun, **log_fields: str
) -> Created:
    """Take a submit from the owner's budget and record `new` in the run's trace (both
    dialects): this span (a child of the request's, which continues the client's
    `traceparent`) is stored with the run, and every attempt of the run is its child."""
    with resources.tracer.start_as_current_span("submit run") as span:
        new.traceparent = traceparent_of(span)
        # the request's `X-Trace-ID` (server/trace_ids.py); a run no request submits (a cron's)
        # gets one of its own
        new.x_trace_id = current_trace_id() or uuid.uuid4().hex
        await quotas.take_submit(new.owner)
        created = await resources.lifecycle.submit(new)
        run = created.run
        span.set_attributes(run_attributes(run))
        structlog.contextvars.bind_contextvars(run_id=run.run_id, thread_id=run.thread_id)
        replayed = not created.created
        logger.info(
            "run replayed by idempotency key" if replayed else "run submitted", **log_fields
        )
    return created
