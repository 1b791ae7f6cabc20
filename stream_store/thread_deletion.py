"""Deleting threads across both stores: a thread (the one way `/v1` and the retention sweep
share), LangGraph's threads (its thread delete and prune), or an assistant with its threads.
Postgres decides; the runs' streams go after."""

from __future__ import annotations

import structlog

from .assistant_records import AssistantRecords
from .errors import StoreUnavailable
from .lifecycle import RunLifecycle
from .log import EventLog
from .thread_records import DeletedThreads, ThreadRecords

__all__ = ["delete_assistant", "delete_langgraph_threads", "delete_thread"]

logger = structlog.get_logger()


async def delete_thread(
    thread_records: ThreadRecords,
    events: EventLog,
    thread_id: str,
    owner: str,
    *,
    idle_s: float | None = None,
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
    await _delete_streams(events, run_ids, "thread deleted", thread_id=thread_id)


async def delete_assistant(
    assistant_records: AssistantRecords,
    lifecycle: RunLifecycle,
    assistant_id: str,
    owner: str,
    *,
    with_threads: bool,
) -> bool:
    """Delete the owner's assistant (with its threads: LangGraph's `delete_threads`) in one
    Postgres transaction (`AssistantRecords.delete_assistant`), then its threads' runs'
    streams, as `delete_thread` does, once the viewers of the runs that waited at an interrupt
    are told they were cancelled; whether the owner had it.

    Raises:
        Conflict: `with_threads`, and one of them has a queued or running run.
    """
    deleted = await assistant_records.delete_assistant(
        assistant_id, owner, with_threads=with_threads
    )
    if deleted is None:
        return False
    await _after_delete(lifecycle, deleted, "assistant deleted", assistant_id=assistant_id)
    return True


async def delete_langgraph_threads(
    thread_records: ThreadRecords,
    lifecycle: RunLifecycle,
    owner: str,
    thread_ids: list[str],
    *,
    with_active_runs: bool = False,
) -> int:
    """Delete the owner's threads among `thread_ids` (LangGraph's thread delete and prune), all
    or none, as `delete_assistant` deletes its threads; how many were deleted. With
    `with_active_runs` (the thread delete), their queued and running runs are cancelled and go
    with them, as LangGraph's thread delete does.

    Raises:
        Conflict: without `with_active_runs`, one of them has a queued or running run.
    """
    deleted = await thread_records.delete_langgraph_threads(
        owner, thread_ids, with_active_runs=with_active_runs
    )
    await _after_delete(lifecycle, deleted, "threads deleted", count=str(len(deleted.thread_ids)))
    return len(deleted.thread_ids)


async def _after_delete(
    lifecycle: RunLifecycle, deleted: DeletedThreads, what: str, **where: str
) -> None:
    """Once the delete has committed: `cancelled` and the end to the viewers of runs that
    waited at an interrupt or were queued or running (their workers told to stop), then the
    runs' streams."""
    await lifecycle.tell_deleted([run for run in deleted.runs if run.interrupted or run.active])
    run_ids = [run.run_id for run in deleted.runs]
    await _delete_streams(lifecycle.events, run_ids, what, **where)


async def _delete_streams(events: EventLog, run_ids: list[str], what: str, **where: str) -> None:
    """The deleted runs' streams, after the commit; left to expire if Redis refuses."""
    try:
        await events.delete(run_ids)
    except StoreUnavailable as exc:
        logger.warning(f"{what}; its streams are left to expire", **where, error=str(exc))
