"""Clients of the runstream HTTP API.

async with AsyncClient("http://127.0.0.1:8000") as client:
    run = await client.submit("hello")
    async for event in client.stream(run.run_id):   # reconnects by itself
        ...
"""

# a run's statuses and their named sets (`run.status in TERMINAL`), the server's own
from wire.run_status import ACTIVE, IDLE, STARTED, TERMINAL, WORKING, RunStatus

from . import _errors
from ._client import AsyncClient
from ._errors import Conflict as Conflict
from ._errors import NotFound as NotFound
from ._errors import RunstreamError as RunstreamError
from ._errors import StreamGone as StreamGone
from ._errors import TooManyRequests as TooManyRequests
from ._errors import Unavailable as Unavailable

__all__ = [
    "ACTIVE",
    "IDLE",
    "STARTED",
    "TERMINAL",
    "WORKING",
    "AsyncClient",
    "RunStatus",
    *_errors.__all__,  # the exceptions are listed once, in _errors.py
]
