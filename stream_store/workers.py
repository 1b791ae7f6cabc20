"""Which workers are alive: each beats into Redis, `runstream status` and the reaper read the
beats, and each holds a named Redis connection that dies with its process.

A worker's beat is a short JSON string under `KeySpace.worker_beat(id)` that expires after
`BEAT_TTL_S` unless renewed, so a killed worker drops out by itself; the sorted set
`KeySpace.workers()` only indexes the ids (no SCAN over the keyspace). Redis's key expiry
decides who is alive, so the clocks of workers and readers never need to agree.

A beat expires seconds after a crash; the worker's named connection (`WorkerPresence`) is gone
at once, since the kernel closes a dead process's sockets and Redis drops the connection. A
paused worker, or one on a host that vanished without closing its sockets, keeps its
connection in Redis's list: for those the run's lease decides, as before.

Costs, in Redis commands: `beat` is one pipeline (SET EX, ZADD, ZREMRANGEBYSCORE); `alive`
is one ZRANGE and one MGET; `gone` is `alive` and one CLIENT LIST (two when a name is missing);
a worker's presence is one PING every `PRESENCE_PING_S`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from datetime import datetime

import msgspec
import structlog
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from .errors import from_redis, redis_errors
from .keys import KeySpace

__all__ = [
    "BEAT_INTERVAL_S",
    "BEAT_TTL_S",
    "PRESENCE_GRACE_S",
    "PRESENCE_PING_S",
    "WorkerBeat",
    "WorkerPresence",
    "WorkerRegistry",
    "connection_name",
]

logger = structlog.get_logger()

BEAT_INTERVAL_S = 2.0
BEAT_TTL_S = 3 * BEAT_INTERVAL_S  # two beats may be late before the worker counts as gone
# Ids whose beat stopped this long ago leave the index (by the beating workers' clocks).
_FORGET_AFTER_MS = 3600 * 1000

# A live worker notices its named connection dropped (a Redis restart, a proxy's cut) within
# one ping and opens it again at once, from a thread of its own that a busy event loop cannot
# delay. A name missing from two listings `PRESENCE_GRACE_S` apart (five pings) is therefore a
# process that is gone, or cut off from Redis (whose lease cannot be renewed either).
PRESENCE_PING_S = 0.1
PRESENCE_GRACE_S = 0.5
_NAME_PREFIX = "runstream-worker:"


def connection_name(worker_id: str) -> str:
    """The Redis client name of a worker's presence connection (CLIENT SETNAME)."""
    return f"{_NAME_PREFIX}{worker_id}"


class WorkerBeat(msgspec.Struct, kw_only=True):
    """What a live worker says about itself, renewed every `BEAT_INTERVAL_S`."""

    worker_id: str
    host: str
    pid: int
    concurrency: int  # runs it executes at once (RUNSTREAM_WORKER_CONCURRENCY)
    started_at: datetime
    beat_at: datetime
    run_ids: list[str]  # the runs it is executing now
    # The name of the Redis connection it holds while its process lives; "" for a worker
    # without one, whose runs only their leases recover.
    connection_name: str = ""


class WorkerRegistry:
    """Heartbeats of this deployment's workers."""

    def __init__(self, redis: Redis, keys: KeySpace) -> None:
        self.redis = redis
        self.keys = keys
        self._listing_refused = False

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

    async def gone(self, grace_s: float = PRESENCE_GRACE_S) -> list[str]:
        """Ids of beating workers whose process is gone: their named connection is missing
        from Redis's client list now and again `grace_s` later (a live worker's reconnect
        takes one ping). Empty when Redis refuses CLIENT LIST (a proxy, a renamed command):
        leases alone recover runs then."""
        beats = {b.connection_name: b.worker_id for b in await self.alive() if b.connection_name}
        if not beats:
            return []
        missing = beats.keys() - await self._connection_names(beats.keys())
        if missing:
            await asyncio.sleep(grace_s)
            missing -= await self._connection_names(missing)
        return sorted(beats[name] for name in missing)

    async def _connection_names(self, expected: Iterable[str]) -> set[str]:
        """The names among Redis's normal client connections; `expected` itself when Redis
        refuses to list them (said once)."""
        try:
            clients = await self.redis.client_list(_type="normal")
        except ResponseError as exc:
            if not self._listing_refused:
                logger.warning("CLIENT LIST refused: only leases find dead workers", error=str(exc))
                self._listing_refused = True
            return set(expected)
        except RedisError as exc:
            raise from_redis(exc) from exc
        return {str(c["name"]) for c in clients if str(c.get("name", "")).startswith(_NAME_PREFIX)}

    async def alive(self) -> list[WorkerBeat]:
        """The workers whose beat has not expired, oldest first."""
        with redis_errors():
            ids = [raw.decode() for raw in await self.redis.zrange(self.keys.workers(), 0, -1)]
            if not ids:
                return []
            beats = await self.redis.mget([self.keys.worker_beat(i) for i in ids])
        found = [msgspec.json.decode(raw, type=WorkerBeat) for raw in beats if raw is not None]
        return sorted(found, key=lambda beat: beat.started_at)


class WorkerPresence:
    """This worker's named Redis connection, open while its process lives.

    Held by a thread of its own with a synchronous client: a worker whose event loop is busy
    (many runs on few cores) still answers and, after a blip, reconnects within one ping. The
    name is sent again on every reconnect (redis-py's `client_name`).
    """

    def __init__(self, redis_url: str, worker_id: str) -> None:
        self.name = connection_name(worker_id)
        self._client = SyncRedis.from_url(
            redis_url,
            client_name=self.name,
            single_connection_client=True,
            socket_timeout=1.0,
            socket_connect_timeout=1.0,
            socket_keepalive=True,
        )
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="runstream-presence", daemon=True)

    async def start(self) -> None:
        """Open the connection (before the worker claims anything), then keep it open."""
        with redis_errors():
            await asyncio.to_thread(self._client.ping)
        self._thread.start()

    async def stop(self) -> None:
        """Close it: the last thing a stopping worker does, after its runs are handed back."""
        self._stopping.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, 2 * PRESENCE_PING_S + 2.0)
        self._client.close()

    def _hold(self) -> None:
        failing = False
        while not self._stopping.wait(PRESENCE_PING_S):
            try:
                self._ping()
            except RedisError as exc:
                if not failing:
                    logger.warning("presence connection lost; reconnecting", error=str(exc))
                failing = True
            except Exception:
                logger.exception("presence ping failed")
            else:
                if failing:
                    logger.info("presence connection restored")
                failing = False

    def _ping(self) -> None:
        try:
            self._client.ping()
        except RedisConnectionError:
            self._client.ping()  # on a new connection, named again: back within one ping
