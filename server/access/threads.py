"""Threads, as every path reaches them: `/v1`, LangGraph's routes, and the runs, crons and
streams that name one (the order of the rules: `server/access/__init__.py`)."""

from __future__ import annotations

from typing import Any

import structlog

from stream_store.errors import NotFound
from stream_store.metadata_filters import matches
from stream_store.thread_records import ThreadRecord

from .. import inputs
from ..auth import Caller
from ..resources import Resources

__all__ = ["allowed_on_thread", "reach_thread", "thread_listing_filters", "thread_not_found"]


def thread_not_found(thread_id: str) -> NotFound:
    """The answer for a thread the caller may not see: the one for a thread that is not there."""
    return NotFound(f"thread {thread_id} not found")


async def reach_thread(
    resources: Resources,
    caller: Caller,
    thread_id: str,
    action: str = "read",
    value: dict[str, Any] | None = None,
    *,
    langgraph: bool = False,
) -> ThreadRecord:
    """The caller's thread `thread_id`, once the project's `threads` handler allowed `action`
    on it; bound to the log context. `value`: what else the handler is shown (it may change
    it, as a metadata update's changes); `langgraph`: with its LangGraph status.

    Raises:
        InvalidInput: `thread_id` is not an id.
        NotFound: unknown, another owner's, or left out by the handler's filter.
        ApiError: the handler refused.
    """
    thread_id = inputs.object_id(thread_id, "thread")
    thread = await resources.thread_records.get_thread(thread_id, caller.owner, langgraph=langgraph)
    if thread is None:
        raise thread_not_found(thread_id)
    await allowed_on_thread(caller, thread, action, value)
    structlog.contextvars.bind_contextvars(thread_id=thread.thread_id)
    return thread


async def allowed_on_thread(
    caller: Caller, thread: ThreadRecord, action: str, value: dict[str, Any] | None = None
) -> None:
    """The project's `threads` handler on `action` on the caller's own `thread` (a run's, a
    cron's): a filter it returns must match the thread's metadata.

    Raises:
        ApiError: the handler refused.
        NotFound: the thread is left out by the filter.
    """
    if caller.rules is None:
        return
    shown = value if value is not None else {}
    shown.setdefault("thread_id", thread.thread_id)
    filters = await caller.authorize("threads", action, shown)
    if not matches(thread.metadata, filters):
        raise thread_not_found(thread.thread_id)


async def thread_listing_filters(
    caller: Caller, value: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The filter the project's `threads` `search` handler puts on a listing of the caller's
    threads (None: none).

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("threads", "search", value if value is not None else {})
