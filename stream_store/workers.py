"""Which workers are alive: each beats into Redis, `runstream status` reads the beats.

A worker's beat is a short JSON string under `KeySpace.worker_beat(id)` that expires after
`BEAT_TTL_S` unless renewed, so a killed worker drops out by itself; the sorted set
`KeySpace.workers()` only indexes the ids (no SCAN over the keyspace). Redis's key expiry
decides who is alive, so the clocks of workers and readers never need to agree.

Costs, in Redis commands: `beat` is one pipeline (SET EX, ZADD, ZREMRANGEBYSCORE); `alive`
is one ZRANGE and one MGET.
"""

from __future__ import annotations

import time
from datetime import datetime

import msgspec
from redis.asyncio import Redis

from .errors import redis_errors
from .keys import KeySpace

__all__ = ["BEAT_INTERVAL_S", "BEAT_TTL_S", "WorkerBeat", "WorkerRegistry"]

BEAT_INTERVAL_S = 2.0
BEAT_TTL_S = 3 * BEAT_INTERVAL_S  # two beats may be late before the worker counts as gone
# Ids whose beat stopped this long ago leave the index (by the beating workers' clocks).
_FORGET_AFTER_MS = 3600 * 1000


class WorkerBeat(msgspec.Struct, kw_only=True):
    """What a live worker says about itself, renewed every `BEAT_INTERVAL_S`."""

    worker_id: str
    host: str
    pid: int
    concurrency: int  # runs it executes at once (RUNSTREAM_WORKER_CONCURRENCY)
    started_at: datetime
    beat_at: datetime
    run_ids: list[str]  # the runs it is executing now


class WorkerRegistry:
    """Heartbeats of this deployment's workers."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys

    async def beat(self, beat: WorkerBeat) -> None:
        now_ms = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(
                self.keys.worker_beat(beat.worker_id),
                msgspec.json.encode(beat),
                px=int(BEAT_TTL_S * 1000),
            )
            pipe.zadd(self.keys.workers(), {beat.worker_id: now_ms})
            pipe.zremrangebyscore(self.keys.workers(), "-inf", now_ms - _FORGET_AFTER_MS)
            with redis_errors():
                await pipe.execute()

    async def forget(self, worker_id: str) -> None:
        """A worker that stops says so, rather than lingering until its beat expires."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.keys.worker_beat(worker_id))
            pipe.zrem(self.keys.workers(), worker_id)
            with redis_errors():
                await pipe.execute()

    async def alive(self) -> list[WorkerBeat]:
        """The workers whose beat has not expired, oldest first."""
        with redis_errors():
            ids = [raw.decode() for raw in await self.redis.zrange(self.keys.workers(), 0, -1)]
            if not ids:
                return []
            beats = await self.redis.mget([self.keys.worker_beat(i) for i in ids])
        found = [msgspec.json.decode(raw, type=WorkerBeat) for raw in beats if raw is not None]
        return sorted(found, key=lambda beat: beat.started_at)
