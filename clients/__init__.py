"""Clients of the runstream HTTP API.

async with AsyncClient("http://127.0.0.1:8000") as client:
    run = await client.submit("hello")
    async for event in client.stream(run.run_id):   # reconnects by itself
        ...
"""

from ._client import AsyncClient
from ._errors import (
    Conflict,
    NotFound,
    RunstreamError,
    StreamGone,
    TooManyRequests,
    Unavailable,
)

__all__ = [
    "AsyncClient",
    "Conflict",
    "NotFound",
    "RunstreamError",
    "StreamGone",
    "TooManyRequests",
    "Unavailable",
]
