"""Calls that arrive while a batch is in flight, sent together as the next batch.

A worker starting a burst of runs, or streaming hundreds of them, would otherwise make one
round trip per call, each waiting its turn on an event loop busy with everything else; a
batch costs one round trip for all the calls waiting. Nothing waits for company: a call that
finds no batch in flight is sent at once, alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from .errors import StoreUnavailable

__all__ = ["BatchMismatch", "Coalescer"]

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


class BatchMismatch(RuntimeError):
    """`send_batch` answered another number of results than it was sent items: a defect of
    the caller's `send_batch`, which every caller of that batch gets."""


class Coalescer(Generic[ItemT, ResultT]):
    """Sends every item waiting as one batch through `send_batch`, then whatever arrived
    meanwhile, until none is left; each caller awaits its own item's answer.

    `send_batch` answers a result or an exception per item, in order; if it raises, or
    answers another number of results than it got items, every caller of that batch gets an
    error (the same one; for a wrong count, `BatchMismatch`), and the next batch is sent as
    usual. After `aclose`, `submit` is refused (`StoreUnavailable`): no sender starts again.
    """

    def __init__(
        self,
        send_batch: Callable[[list[ItemT]], Awaitable[Sequence[ResultT | BaseException]]],
        *,
        name: str,
    ) -> None:
        self._send_batch = send_batch
        self.name = name  # what closed, in the error its waiters get
        self._waiting: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        self._sender: asyncio.Task[None] | None = None
        self._closed = False

    async def submit(self, item: ItemT) -> ResultT:
        """The answer to `item`, sent with whatever other items are waiting.

        Raises:
            StoreUnavailable: `aclose` was called (the process is stopping), or was called
                while this item waited.
        """
        if self._closed:
            raise StoreUnavailable(f"{self.name} is closed: no call is sent after aclose")
        future: asyncio.Future[ResultT] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._sender is None or self._sender.done():
            # A context of its own: the batch is no one caller's, and a connection it holds
            # must not count as held by the caller that happened to start it (PgPool's one
            # checkout per task).
            self._sender = asyncio.create_task(self._send_waiting(), context=contextvars.Context())
        return await future

    async def aclose(self) -> None:
        """Stop sending (process shutdown); callers still waiting get StoreUnavailable, and
        later calls are refused with it."""
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        self._fail(self._waiting)
        self._waiting = []

    def _fail(self, batch: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(StoreUnavailable(f"{self.name} is closed"))

    async def _send_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            results: Sequence[ResultT | BaseException]
            try:
                results = await self._send_batch([item for item, _ in batch])
            except asyncio.CancelledError:
                self._fail(batch)
                raise
            except Exception as exc:
                results = [exc] * len(batch)
            if len(results) != len(batch):
                # Matched one to one below, a wrong count would fail mid-batch and leave the
                # rest of its callers waiting for ever.
                mismatch = BatchMismatch(
                    f"{self.name} answered {len(results)} results for {len(batch)} calls"
                )
                results = [mismatch] * len(batch)
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue  # its caller gave up waiting (cancelled)
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)
