"""A `Coalescer` answers every caller of a batch, even when `send_batch` is wrong, and sends
nothing once closed."""

from __future__ import annotations

import asyncio

import pytest

from stream_store.coalesce import BatchMismatch, Coalescer
from stream_store.errors import StoreUnavailable

# A guard, not a measure: a caller left waiting fails the test instead of hanging it.
NEVER_S = 10.0


class Doubling:
    """A `send_batch` that doubles each item; `drop` results short of the batch or
    `extra` results past it, once, and a gate that holds the first batch until opened."""

    def __init__(self, *, drop: int = 0, extra: int = 0) -> None:
        self.drop = drop
        self.extra = extra
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        self.sent = asyncio.Event()  # a first batch is in flight

    async def __call__(self, items: list[int]) -> list[int | BaseException]:
        self.batches.append(items)
        self.sent.set()
        await self.gate.wait()
        results: list[int | BaseException] = [item * 2 for item in items]
        if self.drop or self.extra:
            results = results[: len(results) - self.drop] + [0] * self.extra
            self.drop = self.extra = 0
        return results


async def answers(coalescer: Coalescer[int, int], items: list[int]) -> list[object]:
    """Each item's answer or error, submitted together while the first batch is held."""
    async with asyncio.timeout(NEVER_S):
        return await asyncio.gather(*(coalescer.submit(i) for i in items), return_exceptions=True)


class TestWrongCount:
    @pytest.mark.parametrize(("drop", "extra"), [(1, 0), (3, 0), (0, 2)])
    async def test_every_caller_of_a_miscounted_batch_gets_an_error(
        self, drop: int, extra: int
    ) -> None:
        send = Doubling(drop=drop, extra=extra)
        coalescer: Coalescer[int, int] = Coalescer(send, name="the doubler")
        send.gate.set()
        found = await answers(coalescer, [1, 2, 3])
        assert all(isinstance(answer, BatchMismatch) for answer in found), found
        assert "the doubler" in str(found[0])
        await coalescer.aclose()

    async def test_the_batch_after_a_miscounted_one_is_answered(self) -> None:
        send = Doubling(drop=1)
        coalescer: Coalescer[int, int] = Coalescer(send, name="the doubler")
        first = asyncio.ensure_future(answers(coalescer, [1, 2]))
        await send.sent.wait()
        # Submitted (each task's first step) while the first batch is in flight.
        second = [asyncio.ensure_future(coalescer.submit(i)) for i in (3, 4)]
        await asyncio.sleep(0)
        send.gate.set()
        assert all(isinstance(a, BatchMismatch) for a in await first)
        async with asyncio.timeout(NEVER_S):
            assert await asyncio.gather(*second) == [6, 8]
        assert send.batches == [[1, 2], [3, 4]]
        await coalescer.aclose()


class TestClosed:
    async def test_a_submit_after_aclose_is_refused_and_sends_nothing(self) -> None:
        send = Doubling()
        send.gate.set()
        coalescer: Coalescer[int, int] = Coalescer(send, name="the doubler")
        assert await coalescer.submit(1) == 2
        await coalescer.aclose()
        with pytest.raises(StoreUnavailable, match="the doubler is closed"):
            await coalescer.submit(2)
        await asyncio.sleep(0)
        assert send.batches == [[1]]

    async def test_callers_waiting_at_aclose_get_store_unavailable(self) -> None:
        send = Doubling()  # the gate stays shut: the batch is in flight at aclose
        coalescer: Coalescer[int, int] = Coalescer(send, name="the doubler")
        waiting = asyncio.ensure_future(answers(coalescer, [1, 2]))
        await send.sent.wait()
        await coalescer.aclose()
        assert all(isinstance(a, StoreUnavailable) for a in await waiting)
