"""Crons, as every path reaches them: the caller's schedules of runs (a thread cron's thread
goes through `server/access/threads.py` too)."""

from __future__ import annotations

from typing import Any

import structlog

from server import inputs
from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.cron_records import CronFields, CronRecord
from stream_store.errors import NotFound
from stream_store.metadata_filters import matches

__all__ = [
    "cron_listing_filters",
    "cron_not_found",
    "new_cron_filters",
    "reach_cron",
    "record_cron",
]


def cron_not_found(cron_id: str) -> NotFound:
    return NotFound(f"cron {cron_id} not found")


async def reach_cron(
    resources: Resources,
    caller: Caller,
    cron_id: str,
    action: str,
    value: dict[str, Any] | None = None,
) -> CronRecord:
    """The caller's cron (404 for an unknown id or another owner's), once the project's `crons`
    handler allowed `action` on it (`value`: what else it is shown); one its filter leaves out
    is not found either, as one that is not there.

    Raises:
        ApiError: the handler refused.
        NotFound: unknown, another owner's, or left out by the filter.
    """
    cron_id = inputs.object_id(cron_id, "cron")
    filters = await caller.authorize("crons", action, {"cron_id": cron_id, **(value or {})})
    cron = await resources.cron_records.get_cron(cron_id, caller.owner)
    if cron is None or not matches(cron.metadata, filters):
        raise cron_not_found(cron_id)
    structlog.contextvars.bind_contextvars(cron_id=cron.cron_id)
    return cron


async def new_cron_filters(caller: Caller, value: dict[str, Any]) -> None:
    """The project's `crons` `create` handler on a new cron; it may stamp `value["metadata"]`.

    Raises:
        ApiError: the handler refused.
    """
    await caller.authorize("crons", "create", value)


async def record_cron(
    resources: Resources, quotas: CallerQuotas, caller: Caller, fields: CronFields, graph: str
) -> CronRecord:
    """Record a new cron of the caller's: a submit of its budget, then the row under the
    caller's cap (`RUNSTREAM_MAX_CRONS`).

    Raises:
        LimitReached: the caller's submits are spent.
        Conflict: the caller keeps as many crons as the cap allows.
    """
    await quotas.take_submit(caller.owner)
    return await resources.cron_records.create_cron(
        fields, owner=caller.owner, graph=graph, limit=resources.settings.max_crons
    )


async def cron_listing_filters(caller: Caller, value: dict[str, Any]) -> dict[str, Any] | None:
    """The filter the project's `crons` `search` handler puts on a search or count.

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("crons", "search", value)
