"""Deleting a thread across both stores, the one way the API and the retention sweep share."""

from __future__ import annotations

import structlog

from .errors import StoreUnavailable
from .log import EventLog
from .thread_records import ThreadRecords

__all__ = ["delete_thread"]

logger = structlog.get_logger()


async def delete_thread(
    thread_records: ThreadRecords,
    events: EventLog,
    thread_id: str,
    owner: str,
    *,
    idle_s: int | None = None,
) -> None:
    """Delete the thread with its runs and checkpoints, then its runs' streams.

    Postgres goes first and alone decides the outcome: its transaction removes the rows and the
    checkpoints together or not at all. The streams go after the commit; if Redis fails then,
    they are finished runs' streams, which expire after the stream TTL anyway.

    With `idle_s` (retention), only a thread still idle that long (`ThreadRecords`).

    Raises:
        NotFound: unknown or not the owner's (or no longer idle).
        Conflict: a run of the thread is queued, running or interrupted.
    """
    run_ids = await thread_records.delete_thread(thread_id, owner, idle_s=idle_s)
    try:
        await events.delete(run_ids)
    except StoreUnavailable as exc:
        logger.warning(
            "thread deleted; its streams are left to expire", thread_id=thread_id, error=str(exc)
        )
