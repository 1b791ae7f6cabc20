"""LangGraph's cron routes: create (stateless, or on a thread), update, delete, search, count.

A cron is a schedule and a run request (its `payload`, `RunCreate`'s fields). The request is
checked when the cron is made or changed exactly as a run request is, so a cron that could
never submit its run is refused then (422, 404) with nothing recorded. Firing it is
`cron_scheduler.py`'s, through the same submit as `POST /threads/{id}/runs`.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import structlog
from litestar import Controller, delete, patch, post
from litestar.params import Body

from server import inputs
from server.access.crons import (
    cron_listing_filters,
    cron_not_found,
    new_cron_filters,
    reach_cron,
    record_cron,
)
from server.access.threads import reach_thread
from server.callers.auth import Caller
from server.callers.budgets import QUERY, WRITE
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.assistant_records import AssistantRecord
from stream_store.cron_records import CronFields, CronRecord
from stream_store.errors import NotFound

from .conversions import assistant_id_for
from .schedules import checked_schedule, checked_timezone, next_run
from .submit import check_run, checked_run, unprocessable
from .views import assistant_of
from .webhooks import checked_webhook
from .wire import Cron, CronCount, CronCreate, CronPatch, CronRun, CronSearch, RunCreate

__all__ = ["CronsController", "create_for_thread", "cron_view"]

logger = structlog.get_logger()

# The fields of a cron's body that are its run's request (`RunCreate`), kept as its payload.
_RUN_FIELDS = CronRun.__struct_fields__  # what a cron's `payload` keeps


def cron_view(cron: CronRecord) -> Cron:
    """`cron` as LangGraph shows it: a cron of a graph's own assistant names that assistant."""
    named = msgspec.structs.replace(
        cron, assistant_id=cron.assistant_id or assistant_id_for(cron.graph)
    )
    return msgspec.convert(named, Cron, from_attributes=True)


def _run_fields(body: CronCreate | CronPatch) -> dict[str, Any]:
    given = {name: getattr(body, name) for name in _RUN_FIELDS}
    return {name: value for name, value in given.items() if value is not None}


def _run_request(payload: dict[str, Any]) -> RunCreate:
    try:
        return msgspec.convert(payload, RunCreate)
    except msgspec.ValidationError as exc:
        raise unprocessable(str(exc)) from None


async def _checked_payload(
    resources: Resources, owner: str, payload: dict[str, Any], thread_id: str | None
) -> AssistantRecord:
    """The assistant of a cron's run request, checked as a run request is (422, 404)."""
    return await checked_run(resources, owner, _run_request(payload), thread_id)


def _utc(moment: datetime | None) -> datetime | None:
    """A client's time; one without an offset is read as UTC, as the schedule is."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


async def _create(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    body: CronCreate,
    thread_id: str | None,
) -> Cron:
    await checked_webhook(resources, caller.owner, body.webhook)
    timezone = checked_timezone(body.timezone)
    schedule = checked_schedule(body.schedule)
    payload = {"assistant_id": body.assistant_id, **_run_fields(body)}
    if thread_id is not None:  # its runs go on the thread: the caller must reach it
        await reach_thread(resources, caller, thread_id)
    value: dict[str, Any] = {
        "payload": payload,
        "schedule": schedule,
        "cron_id": None,
        "thread_id": thread_id,
        "end_time": body.end_time,
        "metadata": dict(body.metadata or {}),
    }
    await new_cron_filters(caller, value)  # may stamp the cron's metadata
    assistant = await _checked_payload(resources, caller.owner, payload, thread_id)
    end_time = _utc(body.end_time)
    cron = await record_cron(
        resources,
        quotas,
        caller,
        CronFields(
            assistant_id=assistant.assistant_id if assistant.owner is not None else None,
            thread_id=thread_id,
            schedule=schedule,
            timezone=timezone,
            payload=payload,
            metadata=value.get("metadata") or {},
            on_run_completed=body.on_run_completed,
            enabled=body.enabled,
            end_time=end_time,
            next_run_date=next_run(schedule, timezone, datetime.now(UTC), end_time),
        ),
        assistant.graph,
    )
    logger.info("cron created", cron_id=cron.cron_id, thread_id=thread_id)
    return cron_view(cron)


async def _patched(
    resources: Resources,
    cron: CronRecord,
    body: CronPatch,
    schedule: str | None,
    assistant: AssistantRecord | None,
) -> dict[str, Any]:
    """The columns `body` changes, checked; `next_run_date` worked out again from now when
    the schedule, its timezone, its end or `enabled` changes. Runs in the transaction that
    holds the cron's row, so it reads nothing: `assistant` (the cron's, read before) checks a
    changed run request."""
    changes: dict[str, Any] = {}
    if fields := _run_fields(body):
        payload = {**cron.payload, **fields}
        if assistant is None:  # deleted meanwhile: the cron's slots are refused (404)
            raise NotFound(f"assistant {cron.payload.get('assistant_id')} not found")
        await check_run(resources, cron.owner, _run_request(payload), cron.thread_id, assistant)
        changes["payload"] = payload
    if body.metadata is not None:
        changes["metadata"] = body.metadata
    if body.on_run_completed is not None:
        changes["on_run_completed"] = body.on_run_completed
    if schedule is not None:
        changes["schedule"] = schedule
    if body.timezone is not None:
        changes["timezone"] = body.timezone
    if body.enabled is not None:
        changes["enabled"] = body.enabled
    if not isinstance(body.end_time, msgspec.UnsetType):
        changes["end_time"] = _utc(body.end_time)
    if {"schedule", "timezone", "end_time", "enabled"} & set(changes):
        changes["next_run_date"] = next_run(
            changes.get("schedule", cron.schedule),
            changes.get("timezone", cron.timezone),
            datetime.now(UTC),
            changes.get("end_time", cron.end_time),
        )
    return changes


@post(
    "/threads/{thread_id:str}/runs/crons",
    status_code=200,
    tags=["langgraph"],
    summary="Create a cron whose runs run on the thread",
)
async def create_for_thread(
    thread_id: str,
    data: CronCreate,
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
) -> Cron:
    return await _create(resources, quotas, caller, data, inputs.object_id(thread_id, "thread"))


class CronsController(Controller):
    """`/runs/crons`: the caller's crons; another caller's are 404, as unknown ones."""

    path = "/runs/crons"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create a cron whose runs each get a new thread")
    async def create(
        self, data: CronCreate, resources: Resources, quotas: CallerQuotas, caller: Caller
    ) -> Cron:
        return await _create(resources, quotas, caller, data, None)

    @patch(
        "/{cron_id:str}",
        summary="Change a cron's schedule, run request or state",
        dependencies=WRITE,
    )
    async def update(
        self, cron_id: str, data: CronPatch, resources: Resources, caller: Caller
    ) -> Cron:
        cron_id = inputs.object_id(cron_id, "cron")
        await checked_webhook(resources, caller.owner, data.webhook)
        checked_timezone(data.timezone)
        schedule = checked_schedule(data.schedule) if data.schedule is not None else None
        current = await reach_cron(
            resources,
            caller,
            cron_id,
            "update",
            {"payload": _run_fields(data) or None, "schedule": data.schedule},
        )
        assistant = None
        if _run_fields(data):  # a PATCH cannot change the cron's assistant: read it first
            with contextlib.suppress(NotFound):
                assistant = await assistant_of(
                    resources, caller.owner, current.payload["assistant_id"]
                )
        updated = await resources.cron_records.update_cron(
            cron_id,
            caller.owner,
            lambda cron: _patched(resources, cron, data, schedule, assistant),
        )
        if updated is None:
            raise cron_not_found(cron_id)  # deleted meanwhile
        return cron_view(updated)

    @delete(
        "/{cron_id:str}",
        status_code=204,
        summary="Delete a cron (its runs stay)",
        dependencies=WRITE,
    )
    async def remove(self, cron_id: str, resources: Resources, caller: Caller) -> None:
        cron_id = inputs.object_id(cron_id, "cron")
        await reach_cron(resources, caller, cron_id, "delete")
        if not await resources.cron_records.delete_cron(cron_id, caller.owner):
            raise cron_not_found(cron_id)  # deleted meanwhile

    @post("/search", status_code=200, summary="The caller's crons", dependencies=QUERY)
    async def search(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[CronSearch | None, Body()] = None,
    ) -> list[dict[str, Any]]:
        body = data or CronSearch()
        thread_id = inputs.object_id(body.thread_id, "thread") if body.thread_id else None
        filters = await cron_listing_filters(
            caller,
            {
                "assistant_id": body.assistant_id,
                "thread_id": thread_id,
                "limit": body.limit,
                "offset": body.offset,
            },
        )
        named = await _assistant_named(resources, caller.owner, body.assistant_id)
        if named is None:
            return []
        crons = await resources.searched_crons(caller.owner).search_crons(
            caller.owner,
            graph=named[0],
            assistant_id=named[1],
            thread_id=thread_id,
            enabled=body.enabled,
            metadata=body.metadata or {},
            auth_filters=filters,
            limit=body.limit,
            offset=body.offset,
            sort_by=body.sort_by or "created_at",
            descending=(body.sort_order or "desc") == "desc",
        )
        views = [msgspec.to_builtins(cron_view(cron)) for cron in crons]
        if body.select:
            return [{k: v for k, v in view.items() if k in body.select} for view in views]
        return views

    @post(
        "/count",
        status_code=200,
        summary="How many of the caller's crons match",
        dependencies=QUERY,
    )
    async def count(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[CronCount | None, Body()] = None,
    ) -> int:
        body = data or CronCount()
        thread_id = inputs.object_id(body.thread_id, "thread") if body.thread_id else None
        filters = await cron_listing_filters(
            caller, {"assistant_id": body.assistant_id, "thread_id": thread_id}
        )
        named = await _assistant_named(resources, caller.owner, body.assistant_id)
        if named is None:
            return 0
        return await resources.searched_crons(caller.owner).count_crons(
            caller.owner,
            graph=named[0],
            assistant_id=named[1],
            thread_id=thread_id,
            metadata=body.metadata or {},
            auth_filters=filters,
        )


async def _assistant_named(
    resources: Resources, owner: str, assistant_id: str | None
) -> tuple[str | None, str | None] | None:
    """The cron filter a search's `assistant_id` makes: (graph, None) for a graph's own
    assistant, (None, id) for a created one, (None, None) for any; None: an unknown one (no
    match)."""
    if assistant_id is None:
        return None, None
    try:
        assistant = await assistant_of(resources, owner, assistant_id)
    except NotFound:
        return None
    if assistant.owner is None:
        return assistant.graph, None
    return None, assistant.assistant_id
