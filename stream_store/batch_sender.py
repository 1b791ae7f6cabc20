"""Sending the `append_batch` script calls of many runs together, one pipeline per round trip.

A worker with hundreds of runs would otherwise make one round trip per token per run; a
pipeline costs the client a fraction of that per command. Each run has at most one batch in
flight (its writer waits for it), so a run's events stay in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from .connections import StoreRedis, pipelined_script
from .errors import StoreUnavailable, from_redis

__all__ = ["BatchSender"]


class BatchSender:
    """Calls one script for every batch waiting when the previous pipeline returned."""

    def __init__(self, redis: StoreRedis, script: AsyncScript) -> None:
        self.redis = redis
        self.script = script
        # Batches of all runs waiting for the next pipeline: (run_id, keys, args, answer).
        self._outbox: list[tuple[str, list[str], list[Any], asyncio.Future[str]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def send(self, run_id: str, keys: list[str], args: list[Any]) -> str:
        """The script's reply to this call, sent with whatever other calls are waiting.

        Raises:
            StoreError: the reply was an error (`from_redis`), or Redis failed.
        """
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._outbox.append((run_id, keys, args, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_outbox())
        return await future

    async def aclose(self) -> None:
        """Stop sending (process shutdown); callers still waiting get StoreUnavailable."""
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        for *_, future in self._outbox:
            if not future.done():
                future.set_exception(StoreUnavailable("the event log is closed"))
        self._outbox.clear()

    async def _send_outbox(self) -> None:
        while self._outbox:
            batch, self._outbox = self._outbox, []
            try:
                calls = [(keys, args) for _, keys, args, _ in batch]
                results = await pipelined_script(self.redis, self.script, calls)
            except RedisError as exc:
                results = [exc] * len(batch)
            for (run_id, _, _, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue  # its writer gave up waiting (cancelled)
                if isinstance(result, RedisError):
                    future.set_exception(from_redis(result, run_id))
                else:
                    future.set_result(result.decode() if isinstance(result, bytes) else str(result))
