"""Finding runs whose attempt died: the reaper and hand-back (the moves themselves are
`stream_store.lifecycle`'s), and what a retry must tell clients.

An attempt is known dead two ways: its worker's process is gone (its named Redis connection
vanished, `WorkerRegistry.gone`: within about a second of a crash), or its lease ran out (a
worker paused, partitioned, or on a host that vanished without closing its sockets).

Every step is conditional, so any number of workers may run the reaper at once:
- Redis decides who may write the stream (`EventLog.take_over` bumps the record's attempt
  only if the holder's lease ran out), Postgres decides the run's state (`requeue_attempt`
  only moves a run that is still `running` as the attempt that died).
- A reaper that dies half-way leaves state the next pass completes: a Redis take-over is
  idempotent, and queued runs are re-enqueued (a job id already queued is not queued again).

What a pass costs does not grow with the backlog or the workers: one worker at a time takes
the pass (`take_turn`: SET NX with a TTL of one interval, so N workers make as many passes
per second as one), and a pass looks at one keyset page of the queued runs (`HEADS_PER_PASS`,
the next pass going on after the last; a backlog of 10,000 is gone over in 50 passes).
"""

from __future__ import annotations

import asyncio
import functools

import structlog
from langchain_core.messages import BaseMessage
from redis.exceptions import RedisError

from stream_store.errors import Conflict, NotFound, StoreError
from stream_store.lifecycle import PlanRetry, RetryPlan
from stream_store.live_record import TakeOver
from stream_store.messages import input_messages, thread_messages
from stream_store.run_records import RunRecord
from stream_store.services import Services
from stream_store.thread_deletion import delete_thread
from stream_store.tracing import context_of, run_attributes
from stream_store.workers import WorkerRegistry
from wire.events import RunStatus

from .state import WorkerState
from .translate import StreamTranslator

__all__ = [
    "hand_back",
    "reap_forever",
    "reap_once",
    "requeue_queued_heads",
    "retry_planner",
    "take_over_from_gone_workers",
    "take_turn",
]

logger = structlog.get_logger()

# Queued runs one pass looks at (each: up to three round trips); the next goes on after them.
HEADS_PER_PASS = 200
# Interrupted runs read per query when their streams are checked (`restore_interrupted`).
INTERRUPTED_PAGE = 500


async def incomplete_messages(
    services: Services, run: RunRecord
) -> tuple[list[str], list[BaseMessage]]:
    """What a retry must tell clients: the messages to discard, and those to send whole.

    The run's messages are its input and what the thread kept after it (checkpointed, or in
    pending writes the next attempt applies without re-running their node). Each of those the
    stream does not have whole is sent again, after clients drop any partial tokens of it: the
    stream can lag the checkpoint, since events go out while the graph runs on. Anything else
    the stream started is dropped: the node that made it runs again, under a new message id.
    """
    seen, completed = await services.events.message_ids(run.run_id)
    thread = await thread_messages(services.checkpointer, run.thread_id)
    kept = {m.id for m in thread}
    given = input_messages(run)
    given_ids = {m.id for m in given}
    start = next((i for i, m in enumerate(thread) if m.id in given_ids), len(thread))
    mine = [m for m in given if m.id not in kept] + thread[start:]
    discard = [mid for mid in seen if mid not in kept or mid not in completed]
    return discard, [m for m in mine if m.id not in completed]


async def plan_retry(services: Services, run: RunRecord) -> RetryPlan:
    """The `retry` announcement of `run.attempt`: what to discard, and what to send whole."""
    discard, resend = await incomplete_messages(services, run)
    translator = StreamTranslator()  # a token first for model text, as when it streamed
    events = [pair for message in resend for pair in translator.complete(message)]
    return RetryPlan(discard=discard, resend=events)


def retry_planner(services: Services) -> PlanRetry:
    return functools.partial(plan_retry, services)


async def hand_back(services: Services, run: RunRecord) -> None:
    """This worker is stopping: give the run to the next attempt now, not after its lease."""
    if await services.events.take_over(run.run_id, run.attempt, force=True) == TakeOver.TAKEN:
        await services.lifecycle.requeue(run, "the worker shut down", retry_planner(services))


async def _requeue(services: Services, run: RunRecord, reason: str) -> None:
    """A reaper's re-queue, as a `requeue` span in the run's trace (when it has one), so that
    the retry shows there and the lines it logs carry the trace id."""
    with (
        services.tracer.start_as_current_span(
            "requeue",
            context=context_of(run.traceparent),
            attributes={**run_attributes(run), "runstream.reason": reason},
        ),
        structlog.contextvars.bound_contextvars(run_id=run.run_id, thread_id=run.thread_id),
    ):
        await services.lifecycle.requeue(run, reason, retry_planner(services))


async def take_over_from_gone_workers(state: WorkerState, registry: WorkerRegistry) -> None:
    """Runs held by a worker whose process is gone: re-queued now, not after their lease.

    The take-over is conditional on the live record still naming that worker as the holder of
    that attempt, so a run that moved on meanwhile is left alone. The gone worker is forgotten
    once its runs are handed on; if a step fails, the next pass (or the lease) finishes it.
    """
    services = state.services
    gone = [worker_id for worker_id in await registry.gone() if worker_id != state.worker_id]
    if not gone:
        return
    logger.warning("worker processes gone; taking over their runs", workers=gone)
    for run in await services.run_records.running_claimed_before(0):
        if run.run_id in state.attempts:
            continue
        verdict = await services.events.take_over(run.run_id, run.attempt, gone_workers=gone)
        if verdict == TakeOver.TAKEN:
            await _requeue(services, run, "its worker process died")
            state.metrics.retried("worker_gone")
    for worker_id in gone:
        await registry.forget(worker_id)


async def reap_once(state: WorkerState, registry: WorkerRegistry) -> None:
    """One pass: runs of gone workers, expired leases, queued runs without a job, runs whose
    stream Redis lost."""
    services = state.services
    run_records, events, settings = services.run_records, services.events, services.settings
    lifecycle = services.lifecycle
    await take_over_from_gone_workers(state, registry)
    for run in await run_records.running_claimed_before(settings.lease_s):
        if run.run_id in state.attempts:
            continue  # executing here; its heartbeat holds the lease
        verdict = await events.take_over(run.run_id, run.attempt)
        if verdict == TakeOver.TAKEN:
            await _requeue(services, run, "its worker stopped renewing the lease")
            state.metrics.retried("lease_expired")
        elif verdict == TakeOver.MISSING:
            await lifecycle.restore_stream(run)
    for run in await run_records.unsettled(settings.lease_s):
        if run.run_id in state.attempts:
            continue
        verdict = await events.take_over(run.run_id, run.attempt, force=True)
        if verdict == TakeOver.MISSING:  # the stream expired or was lost: nothing to tell
            if run.status == RunStatus.INTERRUPTED:
                await lifecycle.restore_stream(run)
            else:
                await run_records.set_last_event_id(run.run_id, "0-0")
        else:
            await lifecycle.repair(run.run_id)
    await requeue_queued_heads(services)


async def requeue_queued_heads(services: Services, *, limit: int = HEADS_PER_PASS) -> int:
    """Queue again the jobs of one page of at most `limit` runs that may go next (a job lost
    between the record and the queue, or stuck with a dead worker), after the page the last
    pass saw; how many it looked at."""
    run_records, events, keys = services.run_records, services.events, services.keys
    redis = services.clients.queue
    stuck_after_s = max(5.0, 3 * services.settings.lease_s)
    after = await redis.get(keys.reaper_heads_after())
    heads = await run_records.queued_heads(after=after.decode() if after else None, limit=limit)
    for run in heads:
        if not await events.exists(run.run_id):
            await services.lifecycle.restore_stream(run)
        fresh = await run_records.redispatch_if_stuck(run.run_id, run.dispatch, stuck_after_s)
        await services.queue.enqueue(fresh or run)
    if len(heads) < limit:  # the end: the next pass starts again
        await redis.delete(keys.reaper_heads_after())
    else:
        await redis.set(keys.reaper_heads_after(), heads[-1].thread_id, ex=3600)
    return len(heads)


async def take_turn(services: Services, worker_id: str) -> bool:
    """Whether this worker runs the reaper's pass now: the first to ask in each interval. The
    turn lapses a little before the interval ends, so the worker that had it, asking again
    one interval later, is not refused by its own turn."""
    interval_ms = max(1, int(services.settings.reaper_interval_s * 900))
    turn = services.keys.reaper_turn()
    return bool(await services.clients.queue.set(turn, worker_id, nx=True, px=interval_ms))


async def expire_idle_threads(
    services: Services, idle_s: float | None = None, *, limit: int = 100
) -> int:
    """Delete up to `limit` threads idle longer than `idle_s` (default
    RUNSTREAM_THREAD_RETENTION; the project's `checkpointer.ttl` is another), as DELETE would;
    how many. Safe in several workers at once: each delete checks again, under the thread's
    row lock, that the thread is still idle, and one that is not (or is gone) is skipped."""
    retention_s = services.settings.thread_retention_s if idle_s is None else idle_s
    if not retention_s:
        return 0
    deleted = 0
    for thread_id, owner in await services.thread_records.idle_threads(retention_s, limit):
        try:
            await delete_thread(
                services.thread_records, services.events, thread_id, owner, idle_s=retention_s
            )
        except (NotFound, Conflict):
            continue  # deleted or used meanwhile
        deleted += 1
        logger.info("thread expired", thread_id=thread_id, retention_s=retention_s)
    return deleted


async def restore_interrupted(services: Services) -> None:
    """Interrupted runs whose stream Redis lost get it back (resume needs it), read a page at a
    time."""
    after: str | None = None
    while True:
        page = await services.run_records.interrupted_runs(after=after, limit=INTERRUPTED_PAGE)
        for run in page:
            if not await services.events.exists(run.run_id):
                await services.lifecycle.restore_stream(run)
        if len(page) < INTERRUPTED_PAGE:
            return
        after = page[-1].run_id


async def reap_forever(state: WorkerState) -> None:
    interval = state.services.settings.reaper_interval_s
    registry = WorkerRegistry(state.services.clients.queue, state.services.keys)
    passes = 0
    while True:
        try:
            if await take_turn(state.services, state.worker_id):
                if passes % 30 == 0:
                    await restore_interrupted(state.services)
                await reap_once(state, registry)
                await expire_idle_threads(state.services)
                passes += 1
        except (StoreError, RedisError, OSError) as exc:
            logger.warning("reaper pass failed; retrying", error=str(exc))
        except Exception:
            logger.exception("reaper pass failed")
        await asyncio.sleep(interval)
