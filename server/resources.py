"""The connections and components one server process holds, opened in the app's lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog
from arq.connections import ArqRedis
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from redis.asyncio import Redis

from runner.checkpointer import FencedPostgresSaver
from runner.graphs import GraphRegistry
from stream_store.connections import PgPool, open_pg_pool, open_redis
from stream_store.keys import KeySpace
from stream_store.lifecycle import RunLifecycle
from stream_store.log import EventLog
from stream_store.migrations import migrate
from stream_store.queue import RunQueue
from stream_store.records import Records
from stream_store.settings import Settings

from .auth import StreamTokens
from .fanout import StreamFollower

__all__ = ["Resources", "open_resources"]

logger = structlog.get_logger()


@dataclass
class Resources:
    settings: Settings
    redis: ArqRedis
    pool: PgPool
    checkpointer: AsyncPostgresSaver
    records: Records
    events: EventLog
    queue: RunQueue
    lifecycle: RunLifecycle
    follower: StreamFollower
    graphs: GraphRegistry
    tokens: StreamTokens


@contextlib.asynccontextmanager
async def open_resources(settings: Settings) -> AsyncIterator[Resources]:
    """Open Redis, Postgres (migrated) and the stream reader; close them in reverse order."""
    keys = KeySpace(settings.redis_prefix)
    redis = open_redis(settings)
    try:
        pool = await open_pg_pool(settings)
        try:
            checkpointer = FencedPostgresSaver(pool)  # unfenced here; it only drops the lock
            await migrate(pool, settings.database_schema)
            graphs = GraphRegistry(settings.graphs)
            graphs.validate()
            records = Records(pool)
            events = EventLog(redis, keys, settings.stream_ttl_s)
            reader = Redis.from_url(settings.require_services()[0], single_connection_client=True)
            queue = RunQueue(redis, keys, records)
            lifecycle = RunLifecycle(
                records,
                events,
                queue,
                lease_s=settings.lease_s,
                max_attempts=settings.max_attempts,
            )
            follower = StreamFollower(reader, redis, events, queue_size=settings.viewer_queue_size)
            await follower.start()
            try:
                yield Resources(
                    settings=settings,
                    redis=redis,
                    pool=pool,
                    checkpointer=checkpointer,
                    records=records,
                    events=events,
                    queue=queue,
                    lifecycle=lifecycle,
                    follower=follower,
                    graphs=graphs,
                    tokens=StreamTokens(settings),
                )
            finally:
                await follower.stop()
        finally:
            await pool.close()
    finally:
        await redis.aclose()
