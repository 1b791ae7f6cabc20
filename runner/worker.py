"""The arq worker of `runstream worker`: its start-up, shut-down and cancel listener.

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
    pool = await open_pg_pool(settings, max_size=max(4, min(settings.worker_concurrency, 20)))
    checkpointer = FencedPostgresSaver(pool)
    await migrate(pool, settings.database_schema, checkpointer)
    graphs = GraphRegistry(settings.graphs)
    graphs.validate()
    records = Records(pool)
    wctx["pool"] = pool
    wctx["checkpointer"] = checkpointer
    wctx["records"] = records
    wctx["events"] = EventLog(wctx["redis"], keys, settings.stream_ttl_s)
    wctx["queue"] = RunQueue(wctx["redis"], keys, records)
    wctx["graphs"] = graphs
    wctx["ledger"] = ToolLedger(pool)
    wctx["running"] = {}
    wctx["cancelling"] = set()
    wctx["lost"] = set()
    wctx["settling"] = set()
    wctx["reaper"] = asyncio.create_task(reap_forever(wctx))
    wctx["cancel_listener"] = asyncio.create_task(_listen_for_cancels(wctx, keys))
    logger.info(
        "worker ready",
        queue=keys.queue(),
        model=settings.model,
        graphs=graphs.names(),
        concurrency=settings.worker_concurrency,
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    wctx = cast(WorkerContext, ctx)
    for name in ("cancel_listener", "reaper"):
        background = wctx.get(name)
        if isinstance(background, asyncio.Task):
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
    if "pool" in wctx:
        await wctx["pool"].close()
    logger.info("worker stopped")


async def _listen_for_cancels(ctx: WorkerContext, keys: KeySpace) -> None:
    """Cancel the local task of any run a server asked to stop; resubscribe after errors."""
    while True:
        try:
            pubsub = ctx["redis"].pubsub(ignore_subscribe_messages=True)
            async with pubsub:
                await pubsub.subscribe(keys.cancel_channel())
                async for message in pubsub.listen():
                    run_id = message["data"].decode()
                    task = ctx["running"].get(run_id)
                    if task is not None and run_id not in ctx["settling"]:
                        logger.info("cancelling run", run_id=run_id)
                        ctx["cancelling"].add(run_id)
                        task.cancel()
        except RedisError as exc:
            logger.warning("cancel listener lost redis, retrying", error=str(exc))
            await asyncio.sleep(1)


def build_worker(settings: Settings, *, handle_signals: bool = True) -> Worker:
    """An arq Worker for this deployment's queue, configured from `settings`."""
    keys = KeySpace(settings.redis_prefix)
    return Worker(
        functions=[func(execute_run, name=EXECUTE_RUN, max_tries=1)],  # type: ignore[arg-type]
        queue_name=keys.queue(),
        redis_pool=open_redis(settings),
        on_startup=startup,
        on_shutdown=shutdown,
        handle_signals=handle_signals,
        job_completion_wait=settings.shutdown_grace_s,  # type: ignore[arg-type]  # a float works
        max_jobs=settings.worker_concurrency,
        job_timeout=settings.job_timeout_s,
        poll_delay=settings.poll_delay_s,
        keep_result=0,  # outcomes live in Postgres; arq keeps nothing per run
        max_tries=1,
        health_check_key=keys.worker_health(),
        ctx={"settings": settings},
        log_results=False,
    )
