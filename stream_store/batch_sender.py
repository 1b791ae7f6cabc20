"""Sending the calls of one stream script for many runs together, one pipeline per round trip.

A worker starting a burst of runs would otherwise make one round trip per run (`claim`), and a
server taking a burst of submits one per run and script (a stream opened, a job queued); a
pipeline costs the client a fraction of that per command (here 12-14 µs of CPU a call in a
pipeline of ten, 75-95 µs alone; a pipeline of one costs what a lone call does). Each run has
at most one call in flight (its caller waits for it). Event appends have a sender of their own,
which takes no task or future per call (`append_sender.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from .coalesce import Coalescer
from .connections import StoreRedis, pipelined_script
from .errors import from_redis

__all__ = ["BatchSender", "send_calls"]

# One script call: the run it is for, its keys, its args.
_Call = tuple[str, list[str], list[Any]]


class BatchSender:
    """Calls one script for every run waiting when the previous pipeline returned."""

    def __init__(self, redis: StoreRedis, script: AsyncScript, name: str = "the event log") -> None:
        self.redis = redis
        self.script = script
        self._calls: Coalescer[_Call, str] = Coalescer(self._send, name=name)

    async def send(self, run_id: str, keys: list[str], args: list[Any]) -> str:
        """The script's reply to this call (as text), sent with whatever other calls are
        waiting.

        Raises:
            StoreError: the reply was an error (`from_redis`), or Redis failed.
        """
        return await self._calls.submit((run_id, keys, args))

    async def aclose(self) -> None:
        """Stop sending (process shutdown); callers still waiting get StoreUnavailable."""
        await self._calls.aclose()

    async def _send(self, calls: list[_Call]) -> list[str | BaseException]:
        return await send_calls(self.redis, self.script, calls)


async def send_calls(
    redis: StoreRedis, script: AsyncScript, calls: Sequence[_Call]
) -> list[str | BaseException]:
    """Each call's reply (as text), or its error as `from_redis` reads it, the calls in one
    pipeline (on a cluster, one round trip per node: `pipelined_script`)."""
    try:
        replies = await pipelined_script(redis, script, [(keys, args) for _, keys, args in calls])
    except RedisError as exc:
        replies = [exc] * len(calls)
    return [
        from_redis(reply, run_id)
        if isinstance(reply, RedisError)
        else reply.decode()
        if isinstance(reply, bytes)
        else str(reply)
        for (run_id, _, _), reply in zip(calls, replies, strict=True)
    ]
