"""The arq worker of `runstream worker`: its start-up, shut-down, pub/sub listener and heartbeat.

The worker process owns its connections (`Services`, on the Redis client arq already has) and
passes them to jobs as one typed `WorkerState` in arq's `ctx` (`ctx["state"]`). Jobs are not
retried by arq (`max_tries=1`): a run's fate is decided by runstream, not by arq's bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog
from arq.worker import Worker, func
from redis.exceptions import RedisError

from stream_store.connections import open_redis
from stream_store.errors import StoreUnavailable
from stream_store.keys import KeySpace
from stream_store.queue import EXECUTE_RUN
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.workers import BEAT_INTERVAL_S, WorkerBeat, WorkerRegistry

from .execute import execute_run
from .graphs import GraphRegistry
from .recovery import reap_forever
from .state import WorkerState
from .tools import ToolLedger

__all__ = ["build_worker"]

logger = structlog.get_logger()


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    stack = contextlib.AsyncExitStack()
    services = await stack.enter_async_context(
        open_services(
            settings,
            pool_size=max(4, min(settings.worker_concurrency, 10)),
            redis=ctx["redis"],  # arq's own client: the worker needs no second one
        )
    )
    graphs = GraphRegistry(settings.graphs)
    graphs.validate()
    state = WorkerState(
        services=services,
        graphs=graphs,
        ledger=ToolLedger(services.pool),
        wake=ctx["wake"],
        exit_stack=stack,
    )
    for background in (reap_forever(state), _listen(state), _beat(state)):
        stack.push_async_callback(_stop, asyncio.create_task(background))
    ctx["state"] = state
    logger.info(
        "worker ready",
        queue=services.keys.queue(),
        model=settings.model,
        graphs=graphs.names(),
        concurrency=settings.worker_concurrency,
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    state = ctx.pop("state", None)
    if isinstance(state, WorkerState):
        await state.exit_stack.aclose()  # background tasks first, then the services
    logger.info("worker stopped")


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _listen(state: WorkerState) -> None:
    """Wake the worker when a run is queued; cancel runs a server asked to stop.

    Resubscribes after errors; a wake-up lost meanwhile costs one idle poll, nothing more.
    """
    keys = state.services.keys
    cancel_channel, wake_channel = keys.cancel_channel(), keys.wake_channel()
    while True:
        try:
            pubsub = state.services.redis.pubsub(ignore_subscribe_messages=True)
            async with pubsub:
                await pubsub.subscribe(cancel_channel, wake_channel)
                state.wake.set()  # anything queued while unsubscribed
                async for message in pubsub.listen():
                    if message["channel"].decode() == wake_channel:
                        state.wake.set()
                        continue
                    attempt = state.attempts.get(message["data"].decode())
                    if attempt is not None:
                        logger.info("cancelling run", run_id=attempt.run_id)
                        attempt.cancel()
        except RedisError as exc:
            logger.warning("pub/sub listener lost redis, retrying", error=str(exc))
            await asyncio.sleep(1)


async def _beat(state: WorkerState) -> None:
    """Tell `runstream status` this worker is alive and which runs it executes; say goodbye
    when stopped, so it does not linger there until its beat expires."""
    services = state.services
    registry = WorkerRegistry(services.redis, services.keys)
    started_at = datetime.now(UTC)
    me = WorkerBeat(
        worker_id=uuid.uuid4().hex[:12],
        host=socket.gethostname(),
        pid=os.getpid(),
        concurrency=services.settings.worker_concurrency,
        started_at=started_at,
        beat_at=started_at,
        run_ids=[],
    )
    try:
        while True:
            now = datetime.now(UTC)
            try:
                await registry.beat(
                    msgspec.structs.replace(me, beat_at=now, run_ids=[*state.attempts])
                )
            except StoreUnavailable as exc:
                logger.warning("worker heartbeat failed; retrying", error=str(exc))
            await asyncio.sleep(BEAT_INTERVAL_S)
    finally:
        with contextlib.suppress(StoreUnavailable, TimeoutError):
            async with asyncio.timeout(1):
                await registry.forget(me.worker_id)


class RunWorker(Worker):
    """arq's Worker, reading the queue when woken rather than on a fixed poll.

    arq sleeps `poll_delay` between reads of the queue, which alone would be most of a run's
    time to first token. Here a read happens when a run is queued (the wake channel) or a job
    slot frees up; `idle_poll_s` is only the fallback for a lost wake-up or a deferred job.
    """

    def __init__(self, *args: Any, idle_poll_s: float, **kwargs: Any) -> None:
        super().__init__(*args, poll_delay=0, **kwargs)
        self.idle_poll_s = idle_poll_s
        self.wake = asyncio.Event()
        self.wake.set()  # read the queue at once on start
        self.ctx["wake"] = self.wake

    async def _poll_iteration(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), self.idle_poll_s)
        self.wake.clear()  # before reading: a wake-up during the read triggers another read
        try:
            await super()._poll_iteration()
        except RedisError as exc:
            # arq ends its loop (and so this worker, with every run it holds) when Redis fails
            # it: out of reach, or refusing writes at `maxmemory`. Its bookkeeping of a job is
            # then stale at worst, and the runs' own state is fenced: read the queue again.
            logger.warning("reading the queue failed; retrying", error=str(exc))
            await asyncio.sleep(1)

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        self.wake.set()  # a slot is free: a run waiting in the queue can start now


def build_worker(settings: Settings, *, handle_signals: bool = True) -> RunWorker:
    """An arq Worker for this deployment's queue, configured from `settings`."""
    keys = KeySpace(settings.redis_prefix)
    return RunWorker(
        functions=[func(execute_run, name=EXECUTE_RUN, max_tries=1)],
        queue_name=keys.queue(),
        redis_pool=open_redis(settings),
        on_startup=startup,
        on_shutdown=shutdown,
        handle_signals=handle_signals,
        job_completion_wait=settings.shutdown_grace_s,  # a float works, despite its int hint
        max_jobs=settings.worker_concurrency,
        job_timeout=settings.job_timeout_s,
        idle_poll_s=settings.poll_delay_s,
        keep_result=0,  # outcomes live in Postgres; arq keeps nothing per run
        max_tries=1,
        health_check_key=keys.worker_health(),
        ctx={"settings": settings},
        log_results=False,
    )
