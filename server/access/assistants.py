"""Assistants, as every path reaches them: a graph's own (everyone's) and the caller's."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.assistant_ids import assistant_id_for
from stream_store.assistant_records import AssistantFields, AssistantRecord
from stream_store.errors import NotFound
from stream_store.metadata_filters import matches

__all__ = [
    "allowed_assistant",
    "assistant_listing_filters",
    "assistant_of",
    "graph_assistant",
    "graph_of_assistant",
    "new_assistant_filters",
    "record_assistant",
    "run_assistant",
]


def graph_of_assistant(resources: Resources, assistant_id: str) -> str:
    """The graph an assistant id names: the graph's name, or LangGraph's uuid5 of it."""
    if assistant_id in resources.graphs:
        return assistant_id
    for name in resources.graphs.names():
        if assistant_id_for(name) == assistant_id:
            return name
    raise NotFound(f"assistant {assistant_id} not found")


def graph_assistant(name: str, created_at: datetime) -> AssistantRecord:
    """A registered graph's own assistant (owned by nobody, never stored)."""
    return AssistantRecord(
        assistant_id=assistant_id_for(name),
        owner=None,
        graph=name,
        name=name,
        description=None,
        config={},
        context={},
        metadata={"created_by": "system"},
        version=1,
        created_at=created_at,
        updated_at=created_at,
    )


async def assistant_of(resources: Resources, owner: str, assistant_id: str) -> AssistantRecord:
    """The assistant an id names for `owner`: a graph's own (by the graph's name or LangGraph's
    uuid5 of it), or one of the owner's created assistants.

    Raises:
        NotFound: none (another owner's assistant included).
    """
    try:
        return graph_assistant(graph_of_assistant(resources, assistant_id), resources.started_at)
    except NotFound:
        pass
    try:
        canonical = str(uuid.UUID(assistant_id))
    except ValueError:
        raise NotFound(f"assistant {assistant_id} not found") from None
    found = await resources.assistant_records.get_assistant(canonical, owner)
    if found is None:
        raise NotFound(f"assistant {assistant_id} not found")
    return found


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
