"""Liveness and readiness probes."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Response, get

from .resources import Resources

__all__ = ["healthz", "readyz"]


@get("/healthz", summary="Liveness", tags=["health"])
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", summary="Readiness: Redis and Postgres answer", tags=["health"])
async def readyz(resources: Resources) -> Response[dict[str, Any]]:
    async def redis_ok() -> bool:
        try:
            return bool(await asyncio.wait_for(resources.redis.ping(), 2))
        except Exception:
            return False

    async def postgres_ok() -> bool:
        try:
            async with asyncio.timeout(2), resources.pool.connection() as conn:
                await conn.execute("SELECT 1")
            return True
        except Exception:
            return False

    redis, postgres = await asyncio.gather(redis_ok(), postgres_ok())
    ready = redis and postgres
    return Response(
        {"status": "ready" if ready else "unavailable", "redis": redis, "postgres": postgres},
        status_code=200 if ready else 503,
    )
