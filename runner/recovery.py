"""Bringing runs back when an attempt dies: the reaper, hand-back, and Redis-loss repair.

Every step is conditional, so any number of workers may run the reaper at once:
- Redis decides who may write the stream (`EventLog.take_over` bumps the record's attempt
  only if the holder's lease ran out), Postgres decides the run's state (`requeue_attempt`
  only moves a run that is still `running` as the attempt that died).
- A reaper that dies half-way leaves state the next pass completes: a Redis take-over is
  idempotent, and queued runs are re-enqueued on every pass (arq drops duplicate job ids).
"""

from __future__ import annotations

import asyncio

import structlog
from langchain_core.messages import BaseMessage
from redis.exceptions import RedisError

from stream_store.errors import Conflict, NotFound, StoreError
from stream_store.events import (
    TERMINAL_STATUSES,
    ErrorData,
    PendingData,
    RetryData,
    RunStatusData,
    encode_data,
)
from stream_store.records import RunRecord

from .context import WorkerContext
from .thread_state import input_messages, thread_messages
from .translate import StreamTranslator

__all__ = ["hand_back", "reap_forever", "reap_once"]

logger = structlog.get_logger()


async def incomplete_messages(
    ctx: WorkerContext, run: RunRecord
) -> tuple[list[str], list[BaseMessage]]:
    """What a retry must tell clients: the messages to discard, and those to send whole.

    The run's messages are its input and what the thread kept after it (checkpointed, or in
    pending writes the next attempt applies without re-running their node). Each of those the
    stream does not have whole is sent again, after clients drop any partial tokens of it: the
    stream can lag the checkpoint, since events go out while the graph runs on. Anything else
    the stream started is dropped: the node that made it runs again, under a new message id.
    """
    seen, completed = await ctx["events"].message_ids(run.run_id)
    thread = await thread_messages(ctx["checkpointer"], run.thread_id)
    kept = {m.id for m in thread}
    given = input_messages(run)
    given_ids = {m.id for m in given}
    start = next((i for i, m in enumerate(thread) if m.id in given_ids), len(thread))
    mine = [m for m in given if m.id not in kept] + thread[start:]
    discard = [mid for mid in seen if mid not in kept or mid not in completed]
    return discard, [m for m in mine if m.id not in completed]


async def _emit(
    ctx: WorkerContext,
    run_id: str,
    attempt: int,
    event: str,
    data: object,
    status: str | None = None,
) -> str:
    return await ctx["events"].append(run_id, attempt, event, encode_data(data), status=status)


async def _status(ctx: WorkerContext, run_id: str, attempt: int, status: str) -> str:
    data = RunStatusData(status=status, attempt=attempt)
    return await _emit(ctx, run_id, attempt, "run", data, status)


async def announce_retry(ctx: WorkerContext, run: RunRecord) -> int:
    """Write the `retry` event of `run.attempt`, and re-send messages clients must see whole.

    The reaper writes it when it re-queues a run; the attempt's worker writes it at start if
    the reaper died before it could (the record remembers the last attempt announced).
    """
    discard, resend = await incomplete_messages(ctx, run)
    attempt = run.attempt
    await _emit(ctx, run.run_id, attempt, "retry", RetryData(attempt=attempt, discard=discard))
    translator = StreamTranslator()  # a token first for model text, as when it streamed
    for message in resend:
        for event, data in translator.complete(message):
            await _emit(ctx, run.run_id, attempt, event, data)
    return len(discard)


async def requeue(ctx: WorkerContext, run: RunRecord, reason: str) -> None:
    """Queue attempt `run.attempt + 1` (Redis already fenced `run.attempt` out), or fail it."""
    records, settings = ctx["records"], ctx["settings"]
    following = run.attempt + 1
    log = logger.bind(run_id=run.run_id, thread_id=run.thread_id, attempt=following)
    if following > settings.max_attempts:
        error = {
            "code": "attempts_exhausted",
            "message": f"gave up after {run.attempt} attempts; the last one ended: {reason}",
        }
        failed = await records.fail_attempts_exhausted(run.run_id, run.attempt, error)
        if failed is None:
            await repair(ctx, run.run_id)
            return
        await _status(ctx, run.run_id, following, "failed")
        last = await _emit(ctx, run.run_id, following, "error", ErrorData(**error))
        await records.set_last_event_id(run.run_id, last)
        await ctx["queue"].dispatch_next(run.thread_id)
        log.warning("run failed: attempts exhausted", reason=reason)
        return
    queued = await records.requeue_attempt(run.run_id, run.attempt)
    if queued is None:
        await repair(ctx, run.run_id)
        return
    discarded = await announce_retry(ctx, queued)
    await _status(ctx, run.run_id, following, "queued")
    await ctx["queue"].enqueue(queued)
    log.warning("run re-queued", reason=reason, discard=discarded)


async def repair(ctx: WorkerContext, run_id: str) -> None:
    """Postgres holds the run's outcome but its stream was never told: tell it.

    The caller has fenced the old attempt out of the stream; the events are written as the
    record's current attempt, rebuilt from the Postgres record, once: under a lock, as every
    worker's reaper may find the run in the same pass.
    """
    if not await ctx["events"].lock_repair(run_id, max(5.0, 5 * ctx["settings"].lease_s)):
        return
    run = await ctx["records"].get_run(run_id)
    record = await ctx["events"].record(run_id)
    if run is None or not record:
        return
    attempt = int(record["attempt"])
    last = await ctx["events"].last_event(run_id)
    if run.status in TERMINAL_STATUSES:
        if last is not None and last.terminal:
            await ctx["records"].set_last_event_id(run_id, last.id)
            return
        await _status(ctx, run_id, attempt, run.status)
        if run.status == "failed":
            error = run.error or {"code": "failed", "message": "the run failed"}
            data: object = ErrorData(code=str(error.get("code")), message=str(error.get("message")))
            final = await _emit(ctx, run_id, attempt, "error", data)
        else:
            final = await _emit(
                ctx, run_id, attempt, "done", {"status": run.status, "output": run.output}
            )
        await ctx["records"].set_last_event_id(run_id, final)
        await ctx["queue"].dispatch_next(run.thread_id)
    elif run.status == "interrupted":
        await ctx["records"].set_attempt(run_id, attempt)
        if last is None or last.event != "run" or b"interrupted" not in last.data:
            await _emit(ctx, run_id, attempt, "pending", PendingData(interrupt=run.interrupt))
            await _status(ctx, run_id, attempt, "interrupted")
        final_event = await ctx["events"].last_event(run_id)
        if final_event is not None:
            await ctx["records"].set_last_event_id(run_id, final_event.id)
    else:
        return
    logger.warning("run stream repaired from postgres", run_id=run_id, status=run.status)


async def restore_stream(ctx: WorkerContext, run: RunRecord) -> None:
    """Redis lost the run's record and stream: start a new stream with a `retry` event."""
    running = run.status == "running"
    attempt = run.attempt + 1 if running else run.attempt
    await ctx["events"].open(
        run.run_id,
        owner=run.owner,
        thread_id=run.thread_id,
        attempt=attempt,
        event="retry",
        data=encode_data(RetryData(attempt=attempt, discard=[])),
        status=run.status,
    )
    logger.warning("run stream restored after redis lost it", run_id=run.run_id, status=run.status)
    if running:
        await requeue_after_restore(ctx, run)
    elif run.status == "queued":
        await _status(ctx, run.run_id, attempt, "queued")
    elif run.status == "interrupted":
        await _emit(ctx, run.run_id, attempt, "pending", PendingData(interrupt=run.interrupt))
        await _status(ctx, run.run_id, attempt, "interrupted")


async def requeue_after_restore(ctx: WorkerContext, run: RunRecord) -> None:
    queued = await ctx["records"].requeue_attempt(run.run_id, run.attempt)
    if queued is None:
        await repair(ctx, run.run_id)
        return
    await _status(ctx, run.run_id, queued.attempt, "queued")
    await ctx["queue"].enqueue(queued)


async def hand_back(ctx: WorkerContext, run: RunRecord) -> None:
    """This worker is stopping: give the run to the next attempt now, not after its lease."""
    if await ctx["events"].take_over(run.run_id, run.attempt, force=True) == "taken":
        await requeue(ctx, run, "the worker shut down")


async def reap_once(ctx: WorkerContext) -> None:
    """One pass: expired leases, queued runs without a job, runs whose stream Redis lost."""
    records, events, settings = ctx["records"], ctx["events"], ctx["settings"]
    for run in await records.running_claimed_before(settings.lease_s):
        if run.run_id in ctx["running"]:
            continue  # executing here; its heartbeat holds the lease
        verdict = await events.take_over(run.run_id, run.attempt)
        if verdict == "taken":
            await requeue(ctx, run, "its worker stopped renewing the lease")
        elif verdict == "missing":
            await restore_stream(ctx, run)
    for run in await records.unsettled(settings.lease_s):
        if run.run_id in ctx["running"]:
            continue
        verdict = await events.take_over(run.run_id, run.attempt, force=True)
        if verdict == "missing":  # the stream expired or was lost: nothing left to tell
            if run.status == "interrupted":
                await restore_stream(ctx, run)
            else:
                await records.set_last_event_id(run.run_id, "0-0")
        else:
            await repair(ctx, run.run_id)
    stuck_after_s = max(5.0, 3 * settings.lease_s)
    for run in await records.queued_heads():
        if not await events.exists(run.run_id):
            await restore_stream(ctx, run)
        fresh = await records.redispatch_if_stuck(run.run_id, run.dispatch, stuck_after_s)
        await ctx["queue"].enqueue(fresh or run)


async def expire_idle_threads(ctx: WorkerContext) -> None:
    """Delete threads idle longer than RUNSTREAM_THREAD_RETENTION, as DELETE would."""
    retention_s = ctx["settings"].thread_retention_s
    if not retention_s:
        return
    for thread_id, owner in await ctx["records"].idle_threads(retention_s):

        async def purge(run_ids: list[str], thread_id: str = thread_id) -> None:
            await ctx["checkpointer"].adelete_thread(thread_id)
            await ctx["events"].delete(run_ids)

        try:
            await ctx["records"].delete_thread(thread_id, owner, before_commit=purge)
        except (NotFound, Conflict):
            continue  # deleted or used meanwhile
        logger.info("thread expired", thread_id=thread_id, retention_s=retention_s)


async def restore_interrupted(ctx: WorkerContext) -> None:
    """At start-up: interrupted runs whose stream Redis lost get it back (resume needs it)."""
    for run in await ctx["records"].active_runs():
        if run.status == "interrupted" and not await ctx["events"].exists(run.run_id):
            await restore_stream(ctx, run)


async def reap_forever(ctx: WorkerContext) -> None:
    interval = ctx["settings"].reaper_interval_s
    passes = 0
    while True:
        try:
            if passes % 30 == 0:
                await restore_interrupted(ctx)
            await reap_once(ctx)
            await expire_idle_threads(ctx)
        except (StoreError, RedisError, OSError) as exc:
            logger.warning("reaper pass failed; retrying", error=str(exc))
        except Exception:
            logger.exception("reaper pass failed")
        passes += 1
        await asyncio.sleep(interval)
