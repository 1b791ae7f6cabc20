"""Whether the process's Redis and Postgres answer (`/readyz`), with a log line each time one
stops or starts answering.

A failure is logged once per change of state (a warning with the dependency and the error
when it starts failing, an info line when it answers again), not at every probe: an
orchestrator and a load balancer each probe every few seconds per process, so a line per probe
would be several a second for as long as an outage lasts, and say nothing the first did not.
The prober itself learns of every failure from the 503.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from stream_store.connections import PgPool, StoreRedis

__all__ = ["Readiness"]

logger = structlog.get_logger()

PROBE_TIMEOUT_S = 2.0  # a dependency slower than this is not ready


class Readiness:
    """The readiness of one process's Redis and Postgres; remembers which are failing, to log
    only the changes (see the module)."""

    def __init__(self, redis: StoreRedis, pool: PgPool) -> None:
        self._redis = redis
        self._pool = pool
        self._failing: set[str] = set()

    async def check(self) -> dict[str, bool]:
        """Whether each dependency answered within `PROBE_TIMEOUT_S`, by name."""
        redis, postgres = await asyncio.gather(
            self._probe("redis", self._ping_redis), self._probe("postgres", self._select_one)
        )
        return {"redis": redis, "postgres": postgres}

    async def _ping_redis(self) -> None:
        await self._redis.ping()

    async def _select_one(self) -> None:
        async with self._pool.connection() as conn:
            await conn.execute("SELECT 1")

    async def _probe(self, dependency: str, probe: Callable[[], Awaitable[None]]) -> bool:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                await probe()
        except Exception as exc:
            if dependency not in self._failing:
                self._failing.add(dependency)
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                logger.warning("readiness check failing", dependency=dependency, error=error)
            return False
        if dependency in self._failing:
            self._failing.discard(dependency)
            logger.info("readiness check passing again", dependency=dependency)
        return True
