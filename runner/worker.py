"""The arq worker of `runstream worker`: its start-up, shut-down and pub/sub listener.

The worker process owns its connections (a Redis client shared with arq, a psycopg pool and the
LangGraph checkpointer on it) and passes them to jobs through the typed `ctx`. Jobs are not
retried by arq (`max_tries=1`): a run's fate is decided by runstream, not by arq's bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import structlog
from arq.worker import Worker, func
from redis.exceptions import RedisError

from stream_store.connections import open_pg_pool, open_redis
from stream_store.keys import KeySpace
from stream_store.lifecycle import RunLifecycle
from stream_store.log import EventLog
from stream_store.migrations import migrate
from stream_store.queue import EXECUTE_RUN, RunQueue
from stream_store.records import Records
from stream_store.settings import Settings

from .checkpointer import FencedPostgresSaver
from .context import WorkerContext
from .execute import execute_run
from .graphs import GraphRegistry
from .recovery import reap_forever
from .tools import ToolLedger

__all__ = ["build_worker"]

logger = structlog.get_logger()


async def startup(ctx: dict[str, Any]) -> None:
    wctx = cast(WorkerContext, ctx)
    settings = wctx["settings"]
    keys = KeySpace(settings.redis_prefix)
    pool = await open_pg_pool(settings, max_size=max(4, min(settings.worker_concurrency, 10)))
    checkpointer = FencedPostgresSaver(pool)
    await migrate(pool, settings.database_schema)
    graphs = GraphRegistry(settings.graphs)
    graphs.validate()
    records = Records(pool)
    wctx["pool"] = pool
    wctx["checkpointer"] = checkpointer
    wctx["records"] = records
    wctx["events"] = EventLog(wctx["redis"], keys, settings.stream_ttl_s)
    wctx["queue"] = RunQueue(wctx["redis"], keys, records)
    wctx["lifecycle"] = RunLifecycle(
        records,
        wctx["events"],
        wctx["queue"],
        lease_s=settings.lease_s,
        max_attempts=settings.max_attempts,
    )
    wctx["graphs"] = graphs
    wctx["ledger"] = ToolLedger(pool)
    wctx["running"] = {}
    wctx["cancelling"] = set()
    wctx["lost"] = set()
    wctx["settling"] = set()
    wctx["reaper"] = asyncio.create_task(reap_forever(wctx))
    wctx["listener"] = asyncio.create_task(_listen(wctx, keys))
    logger.info(
        "worker ready",
        queue=keys.queue(),
        model=settings.model,
        graphs=graphs.names(),
        concurrency=settings.worker_concurrency,
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    wctx = cast(WorkerContext, ctx)
    for name in ("listener", "reaper"):
        background = wctx.get(name)
        if isinstance(background, asyncio.Task):
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
    if "events" in wctx:
        await wctx["events"].aclose()
    if "pool" in wctx:
        await wctx["pool"].close()
    logger.info("worker stopped")


async def _listen(ctx: WorkerContext, keys: KeySpace) -> None:
    """Wake the worker when a run is queued; cancel runs a server asked to stop.

    Resubscribes after errors; a wake-up lost meanwhile costs one idle poll, nothing more.
    """
    cancel_channel, wake_channel = keys.cancel_channel(), keys.wake_channel()
    while True:
        try:
            pubsub = ctx["redis"].pubsub(ignore_subscribe_messages=True)
            async with pubsub:
                await pubsub.subscribe(cancel_channel, wake_channel)
                ctx["wake"].set()  # anything queued while unsubscribed
                async for message in pubsub.listen():
                    if message["channel"].decode() == wake_channel:
                        ctx["wake"].set()
                        continue
                    run_id = message["data"].decode()
                    task = ctx["running"].get(run_id)
                    if task is not None and run_id not in ctx["settling"]:
                        logger.info("cancelling run", run_id=run_id)
                        ctx["cancelling"].add(run_id)
                        task.cancel()
        except RedisError as exc:
            logger.warning("pub/sub listener lost redis, retrying", error=str(exc))
            await asyncio.sleep(1)


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
        await super()._poll_iteration()

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        self.wake.set()  # a slot is free: a run waiting in the queue can start now


def build_worker(settings: Settings, *, handle_signals: bool = True) -> RunWorker:
    """An arq Worker for this deployment's queue, configured from `settings`."""
    keys = KeySpace(settings.redis_prefix)
    return RunWorker(
        functions=[func(execute_run, name=EXECUTE_RUN, max_tries=1)],  # type: ignore[arg-type]
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
