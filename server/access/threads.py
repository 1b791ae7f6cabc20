"""Threads, as every path reaches them: `/v1`, LangGraph's routes, and the runs, crons and
streams that name one (the order of the rules: `server/access/__init__.py`)."""

from __future__ import annotations

from typing import Any

import structlog

from server import inputs
from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.errors import Conflict, NotFound
from stream_store.metadata_filters import matches
from stream_store.thread_records import ThreadRecord

__all__ = [
    "ask_threads",
    "create_thread",
    "new_thread_filters",
    "reach_thread",
    "thread_listing_filters",
    "thread_not_found",
    "threads_to_prune",
]

logger = structlog.get_logger()


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

    As on LangGraph's server the handler is asked before the thread is read, so a refusal is
    the same for an id that does not exist; its filter is matched after.

    Raises:
        InvalidInput: `thread_id` is not an id.
        ApiError: the handler refused.
        NotFound: unknown, another owner's, or left out by the handler's filter.
    """
    thread_id = inputs.object_id(thread_id, "thread")
    filters = await ask_threads(caller, action, thread_id, value)
    thread = await resources.thread_records.get_thread(
        thread_id, caller.owner, latest_run=langgraph
    )
    if thread is None or not matches(thread.metadata, filters):
        raise thread_not_found(thread_id)
    structlog.contextvars.bind_contextvars(thread_id=thread.thread_id)
    return thread


async def ask_threads(
    caller: Caller, action: str, thread_id: str, value: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The project's `threads` handler on `action` on thread `thread_id`: None, or the filter
    the thread's metadata must match. `value` is shown with the thread's id, and may be
    changed by the handler.

    Raises:
        ApiError: the handler refused.
    """
    if caller.rules is None:
        return None
    shown = value if value is not None else {}
    shown.setdefault("thread_id", thread_id)
    return await caller.authorize("threads", action, shown)


async def thread_listing_filters(
    caller: Caller, value: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The filter the project's `threads` `search` handler puts on a listing of the caller's
    threads (None: none).

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("threads", "search", value if value is not None else {})


async def create_thread(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    metadata: dict[str, Any],
    *,
    thread_id: str | None = None,
    if_exists: str = "raise",
    langgraph: bool = False,
) -> ThreadRecord:
    """A new thread of the caller's (both APIs): the project's `threads` `create` handler,
    which may stamp its metadata, then the metadata's bounds, then a submit of the caller's
    budget (the same as runs'). A client-chosen `thread_id` that is taken answers the caller's
    own thread with `if_exists` `do_nothing` (when the handler's filter shows it), else 409.

    Raises:
        ApiError: the handler refused.
        InvalidInput: the metadata is past its bounds.
        LimitReached: the caller's submits are spent.
        Conflict: the id is taken.
    """
    value: dict[str, Any] = {"thread_id": thread_id, "metadata": dict(metadata)}
    if langgraph:
        value["if_exists"] = if_exists
    filters = await new_thread_filters(caller, value)
    stamped = value.get("metadata") or {}
    inputs.metadata(stamped, resources.settings)
    await quotas.take_submit(caller.owner)
    thread = await resources.thread_records.create_thread(
        caller.owner, stamped, thread_id, latest_run=langgraph
    )
    if thread is not None:
        logger.info("thread created", thread_id=thread.thread_id)
        return thread
    existing = await resources.thread_records.get_thread(
        str(thread_id), caller.owner, latest_run=langgraph
    )
    if if_exists == "do_nothing" and existing is not None and matches(existing.metadata, filters):
        return existing
    raise Conflict(f"Thread with ID {thread_id} already exists", code="thread_exists")


async def new_thread_filters(caller: Caller, value: dict[str, Any]) -> dict[str, Any] | None:
    """The project's `threads` `create` handler on a new thread (both APIs, and a copy):
    it may stamp `value["metadata"]`; a filter it returns applies only to an existing thread
    a create with `if_exists: do_nothing` would answer with.

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("threads", "create", value)


async def threads_to_prune(
    resources: Resources, caller: Caller, thread_ids: list[str]
) -> list[str]:
    """The ids a prune may go on with, once the project's `threads` `delete` handler allowed
    it: every one of the caller's threads among them must match its filter, as LangGraph
    checks before pruning any. Unknown ids and another owner's stay in: the prune skips them.

    Raises:
        ApiError: the handler refused.
        NotFound: the filter leaves out one of the caller's threads (nothing is pruned).
    """
    filters = await caller.authorize("threads", "delete", {"thread_ids": thread_ids})
    if filters:
        found = [
            len(
                await resources.thread_records.search_threads(
                    caller.owner,
                    metadata={},
                    limit=max(1, len(thread_ids)),
                    offset=0,
                    ids=thread_ids,
                    auth_filters=narrowed,
                )
            )
            for narrowed in (None, filters)
        ]
        if found[1] < found[0]:
            raise NotFound("threads not found")
    return thread_ids
