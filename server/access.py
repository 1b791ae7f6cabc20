"""A project's `@auth.on` handlers applied to threads and runs (docs/langgraph.md, "Auth").

Owners already keep callers apart; these add LangGraph's finer rules on top: a refusal (403 or
the handler's status), a metadata filter the thread must match (else it is not found, 404, as
LangGraph answers), metadata a create handler stamps. A caller without rules (API keys, JWTs,
no sign-in) passes through unchanged.
"""

from __future__ import annotations

from typing import Any

from stream_store.assistant_records import AssistantRecord
from stream_store.errors import NotFound
from stream_store.metadata_filters import matches
from stream_store.run_submit import NewRun
from stream_store.thread_records import ThreadRecord

from .auth import Caller
from .langgraph.views import assistant_of
from .resources import Resources

__all__ = [
    "allowed_assistant",
    "check_thread_access",
    "prepare_run",
    "run_assistant",
    "thread_not_found",
]


def thread_not_found(thread_id: str) -> NotFound:
    """The answer for a thread the caller may not see: the one for a thread that is not there."""
    return NotFound(f"thread {thread_id} not found")


async def check_thread_access(
    resources: Resources,
    caller: Caller,
    thread_id: str,
    action: str,
    value: dict[str, Any] | None = None,
    thread: ThreadRecord | None = None,
) -> None:
    """Ask the project's `threads` handler about `action` on the thread; a filter it returns
    must match the thread's metadata (`thread`, or read here when None).

    Raises:
        ApiError: the handler refused.
        NotFound: the thread is filtered out (or missing).
    """
    if caller.rules is None:
        return
    filters = await caller.authorize("threads", action, {"thread_id": thread_id, **(value or {})})
    if not filters:
        return
    if thread is None:
        thread = await resources.thread_records.get_thread(thread_id, caller.owner)
    if thread is None or not matches(thread.metadata, filters):
        raise thread_not_found(thread_id)


async def allowed_assistant(
    resources: Resources,
    caller: Caller,
    assistant_id: str,
    action: str = "read",
    value: dict[str, Any] | None = None,
) -> AssistantRecord:
    """The assistant `assistant_id` names (a graph's, or the caller's), once the project's
    `assistants` handler allowed `action` on it; one its filter leaves out is not found, as
    one that is not there (404).

    Raises:
        ApiError: the handler refused.
        NotFound: no such assistant, or filtered out.
    """
    filters = await caller.authorize(
        "assistants", action, {"assistant_id": assistant_id, **(value or {})}
    )
    assistant = await assistant_of(resources, caller.owner, assistant_id)
    if not matches(assistant.metadata, filters):
        raise NotFound(f"assistant {assistant_id} not found")
    return assistant


async def run_assistant(resources: Resources, caller: Caller, assistant_id: str) -> AssistantRecord:
    """The assistant a run request names. As LangGraph's `Runs.put`, the project's `assistants`
    `read` handler is asked about a created assistant only: a graph's own is everyone's.

    Raises:
        ApiError: the handler refused.
        NotFound: no such assistant, or filtered out.
    """
    assistant = await assistant_of(resources, caller.owner, assistant_id)
    if assistant.owner is not None:
        filters = await caller.authorize(
            "assistants", "read", {"assistant_id": assistant.assistant_id}
        )
        if not matches(assistant.metadata, filters):
            raise NotFound(f"assistant {assistant_id} not found")
    return assistant


async def prepare_run(
    resources: Resources, caller: Caller, new: NewRun, value: dict[str, Any]
) -> None:
    """Before a run is recorded: the project's `threads.create_run` handler (LangGraph calls it
    for every run), whose metadata changes land on the run and whose filter the run's thread
    must match; then the signed-in user into the run's `configurable`, which the worker hands
    the graph (runner/execute.py).

    Raises:
        ApiError: the handler refused.
        NotFound: the run's thread is filtered out.
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
