"""The workers' TTL sweeps: store items past their TTL (`store.ttl`, and any item put with a
`ttl`), and threads idle past the project's `checkpointer.ttl`.

The workers own them, not the servers: a deployment always has workers, and a sweep is
background work like the reaper's. Every worker runs both loops, and several at once do no
harm: one worker at a time deletes expired items (under an advisory lock,
`sweep_expired_items`; the others skip that pass), and a thread is deleted only after its row
lock shows it still idle, with no queued, running or interrupted run (`expire_idle_threads`).
"""

from __future__ import annotations

import asyncio

import psycopg
import structlog
from redis.exceptions import RedisError

from stream_store.errors import StoreError
from stream_store.store import sweep_expired_items

from .recovery import expire_idle_threads
from .state import WorkerState

__all__ = [
    "THREAD_SWEEP_INTERVAL_S",
    "THREAD_SWEEP_LIMIT",
    "sweep_items_forever",
    "sweep_threads_forever",
]

logger = structlog.get_logger()

# LangGraph's defaults for `checkpointer.ttl`'s `sweep_interval_minutes` and `sweep_limit`.
THREAD_SWEEP_INTERVAL_S = 5 * 60.0
THREAD_SWEEP_LIMIT = 1000

_FAILURES = (StoreError, psycopg.Error, RedisError, OSError)


async def sweep_items_forever(state: WorkerState) -> None:
    """Every `store.ttl.sweep_interval_minutes` (an hour by default), delete expired items."""
    interval = state.services.store_options.sweep_interval_s
    while True:
        await asyncio.sleep(interval)
        try:
            deleted = await sweep_expired_items(state.services.pool)
        except _FAILURES as exc:
            logger.warning("store TTL sweep failed; retrying", error=str(exc))
            continue
        if deleted:
            logger.info("expired store items deleted", count=deleted)


async def sweep_threads_forever(state: WorkerState) -> None:
    """With a `checkpointer.ttl.default_ttl`, every `sweep_interval_minutes` delete up to
    `sweep_limit` threads idle that long, with their runs, checkpoints and streams."""
    project = state.graphs.project
    ttl = project.thread_ttl if project is not None else None
    if ttl is None or ttl.default_ttl is None:
        return
    idle_s = ttl.default_ttl * 60
    interval = ttl.sweep_interval_minutes * 60 if ttl.sweep_interval_minutes else None
    limit = ttl.sweep_limit or THREAD_SWEEP_LIMIT
    while True:
        await asyncio.sleep(interval or THREAD_SWEEP_INTERVAL_S)
        try:
            await expire_idle_threads(state.services, idle_s, limit=limit)
        except _FAILURES as exc:
            logger.warning("thread TTL sweep failed; retrying", error=str(exc))
