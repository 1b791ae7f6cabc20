"""Assistants, as every path reaches them: a graph's own (everyone's) and the caller's."""

from __future__ import annotations

from typing import Any

from stream_store.assistant_records import AssistantFields, AssistantRecord
from stream_store.errors import NotFound
from stream_store.metadata_filters import matches

from ..auth import Caller
from ..langgraph.views import assistant_of
from ..quotas import CallerQuotas
from ..resources import Resources

__all__ = [
    "allowed_assistant",
    "assistant_listing_filters",
    "new_assistant_filters",
    "record_assistant",
    "run_assistant",
]


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


async def record_assistant(
    resources: Resources, quotas: CallerQuotas, caller: Caller, fields: AssistantFields
) -> AssistantRecord | None:
    """Record a new assistant of the caller's: a submit of its budget, then the row under the
    caller's cap (`RUNSTREAM_MAX_ASSISTANTS`); None when its id was taken meanwhile.

    Raises:
        LimitReached: the caller's submits are spent.
        Conflict: the caller keeps as many assistants as the cap allows.
    """
    await quotas.take_submit(caller.owner)
    return await resources.assistant_records.create_assistant(
        fields, owner=caller.owner, limit=resources.settings.max_assistants
    )


async def new_assistant_filters(caller: Caller, value: dict[str, Any]) -> dict[str, Any] | None:
    """The project's `assistants` `create` handler on a new assistant: it may stamp
    `value["metadata"]`; a filter it returns applies only to an existing assistant a create
    with `if_exists: do_nothing` would answer with.

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("assistants", "create", value)


async def assistant_listing_filters(caller: Caller, value: dict[str, Any]) -> dict[str, Any] | None:
    """The filter the project's `assistants` `search` handler puts on a search or count.

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("assistants", "search", value)
