"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from litestar import Response, get

from .resources import Resources

__all__ = ["healthz", "readyz"]


@get("/healthz", summary="Liveness", tags=["health"])
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", summary="Readiness: Redis and Postgres answer", tags=["health"])
async def readyz(resources: Resources) -> Response[dict[str, Any]]:
    answers = await resources.readiness.check()  # a failure is logged there (server/readiness.py)
    ready = all(answers.values())
    return Response(
        {"status": "ready" if ready else "unavailable", **answers},
        status_code=200 if ready else 503,
    )
