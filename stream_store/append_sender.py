"""Sending every attempt's events to its run's stream: one task, one pipeline per round trip.

A worker streaming hundreds of runs appends a token per run every few milliseconds. One
long-lived task per process sends them all: each attempt's waiting events go as one
`append_batch.lua` call, every attempt's call in one pipeline, and the events that arrive while
a pipeline is in flight wait for the next. Per event the graph's side does a list append and
nothing else: no task and no future per token, which cost a busy worker more CPU than the
append itself (issue 36, docs/performance.md).

An attempt has at most one batch in flight, so its events are appended in order, and a batch
refused at the stream's bound stops every event after it. A batch of tokens paces the
attempt's next one by `interval_s`: a model faster than that has its tokens sent several to a
batch (one Redis call and one wake-up of every viewer's server per batch), a slower one each
token at once. A full batch (`batch_events`) never waits.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from redis.commands.core import AsyncScript

from .batch_sender import send_calls
from .connections import StoreRedis
from .errors import StoreUnavailable

__all__ = ["AppendSender", "AttemptAppends", "Written"]

logger = structlog.get_logger()

BATCH_EVENTS = 512  # events per append_batch.lua call at most
BATCH_INTERVAL_S = 0.01  # an attempt's token batches go out at most this often

Event = tuple[str, bytes]  # (event name, encoded data)
# Told of each batch the sender finished: its events, the seconds it was in flight, and the
# error it was refused with (None when appended).
Written = Callable[[Sequence[Event], float, BaseException | None], None]


class AttemptAppends:
    """The events of one attempt waiting to be appended to its run's stream, in order.

    `put` never waits; `drain` waits until everything put so far is written. A refused batch
    (`Fenced`, `StreamGone`, `StreamTooLarge`, Redis unavailable) drops the events after it and
    is raised once, by the next `put` or `drain`; events put after that are dropped too (the
    attempt is ending). `close` stops writing: what is still waiting is dropped.
    """

    def __init__(
        self,
        sender: AppendSender,
        run_id: str,
        attempt: int,
        keys: list[str],
        args: list[Any],
        *,
        on_written: Written | None = None,
    ) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.keys = keys  # append_batch.lua's KEYS
        self.args = args  # its ARGV before the events: attempt, bounds
        self.pending: list[Event] = []
        self.in_flight = 0  # events in the sender's pipeline now
        self.due = float("-inf")  # the loop time the next batch waits for (pacing)
        self.opened_at = 0.0  # when the first event waiting now was put (the loop's clock)
        self.batch_opened_at = 0.0  # the same, of the batch in flight
        self.last_id: str | None = None  # of the last event appended
        self.closed = False
        self.listed = False  # in the sender's waiting list
        self._sender = sender
        self._on_written = on_written
        self._failure: BaseException | None = None
        self._failure_raised = False
        self._drained: asyncio.Future[None] | None = None

    @property
    def backlog(self) -> int:
        """Events put and not yet written."""
        return len(self.pending) + self.in_flight

    def put(self, event: str, data: bytes) -> None:
        """Queue one event; it goes with the next pipeline this attempt is due in."""
        self._raise_failure()
        if self.closed or self._failure is not None:
            return
        if not self.pending:
            self.opened_at = asyncio.get_running_loop().time()
        self.pending.append((event, data))
        if not self.in_flight and not self.listed:
            self._sender.enlist(self)
        elif self.listed and len(self.pending) == self._sender.batch_events:
            self._sender.enlist(self)  # a full batch waits for no pacing

    async def drain(self) -> None:
        """Wait until every event put so far is written, or raise why it was not.

        Not cancelled with its caller: the pipeline is every attempt's, and a cancelled
        attempt still has what it put before its outcome written.
        """
        if self.backlog and not self.closed:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.wait([self._drained])
        self._raise_failure()

    def close(self) -> None:
        """The attempt is over: write nothing more (its unwritten events are fenced out anyway)."""
        self.closed = True
        self.pending.clear()
        self._settled()

    def take(self, limit: int) -> list[Event]:
        """The sender's next batch of this attempt: now in flight."""
        batch = self.pending[:limit]
        del self.pending[:limit]
        self.in_flight = len(batch)
        self.listed = False
        self.batch_opened_at = self.opened_at
        return batch

    def written(self, batch: Sequence[Event], sent_at: float, reply: str | BaseException) -> None:
        """The sender's answer to `batch`, sent at `sent_at` (the loop's clock)."""
        self.in_flight = 0
        loop_now = asyncio.get_running_loop().time()
        error = reply if isinstance(reply, BaseException) else None
        if error is None:
            self.last_id = str(reply)
        elif not self.closed:
            self._failure = error
            self.pending.clear()  # nothing after a refused batch is written
        if self._on_written is not None:
            try:
                self._on_written(batch, loop_now - sent_at, error)
            except Exception:  # the figures are not worth the sender
                logger.exception("recording an append failed", run_id=self.run_id)
        if any(event == "token" for event, _ in batch):
            # Only token batches pace the next: the run's opening events (its input message,
            # a custom event) must not hold back the first token. Counted from the batch's
            # first event, so that tokens put `interval_s` apart each go at once.
            self.due = self.batch_opened_at + self._sender.interval_s
        if self.pending and not self.closed:
            self._sender.enlist(self)
        else:
            self._settled()

    def fail(self, error: BaseException) -> None:
        """The sender closed with this attempt's events unwritten."""
        self.in_flight = 0
        self.listed = False
        if self._failure is None and not self.closed:
            self._failure = error
        self.pending.clear()
        self._settled()

    def _settled(self) -> None:
        if self._drained is not None and not self.backlog:
            drained, self._drained = self._drained, None
            if not drained.done():
                drained.set_result(None)

    def _raise_failure(self) -> None:
        if self._failure is not None and not self._failure_raised:
            self._failure_raised = True
            raise self._failure


class AppendSender:
    """The one task that sends every attempt's due events, one pipeline at a time.

    An attempt with events is either ready (due now, or a full batch) or paced (on a heap by
    the time it is due); each turn sends every ready attempt's batch.
    """

    def __init__(
        self,
        redis: StoreRedis,
        script: AsyncScript,
        *,
        batch_events: int = BATCH_EVENTS,
        interval_s: float = BATCH_INTERVAL_S,
    ) -> None:
        self.redis = redis
        self.script = script
        self.batch_events = batch_events
        self.interval_s = interval_s
        self._ready: list[AttemptAppends] = []
        self._paced: list[tuple[float, int, AttemptAppends]] = []  # a heap by due time
        self._order = itertools.count()  # ties on the heap: first paced, first sent
        self._in_flight: list[AttemptAppends] = []
        self._wake: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def enlist(self, appends: AttemptAppends) -> None:
        """`appends` has events to send: in the next pipeline it is due for."""
        if self._closed:
            appends.fail(StoreUnavailable("the event log is closed: nothing is sent after aclose"))
            return
        loop = asyncio.get_running_loop()
        if appends.due <= loop.time() or len(appends.pending) >= self.batch_events:
            self._ready.append(appends)
        else:
            heapq.heappush(self._paced, (appends.due, next(self._order), appends))
        appends.listed = True
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            # A context of its own: the sender is no one attempt's.
            self._task = loop.create_task(self._run(), context=contextvars.Context())
        elif self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def aclose(self) -> None:
        """Stop sending (process shutdown); attempts still waiting get StoreUnavailable."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        self._fail_all(StoreUnavailable("the event log is closed"))

    def _fail_all(self, error: BaseException) -> None:
        waiting = [*self._in_flight, *self._ready, *(a for _, _, a in self._paced)]
        self._in_flight, self._ready, self._paced = [], [], []
        for appends in waiting:
            appends.fail(error)

    async def _run(self) -> None:
        try:
            await self._send_due()
        except Exception as exc:  # a defect: fail what waits rather than leave it waiting
            logger.exception("the event sender failed")
            self._fail_all(StoreUnavailable(f"the event sender failed: {exc!r}"))

    async def _send_due(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            paced = self._paced
            while paced and paced[0][0] <= now:
                self._ready.append(heapq.heappop(paced)[2])
            if not self._ready:
                await self._sleep(paced[0][0] - now if paced else None)
                continue
            sending, self._ready = self._ready, []
            # Listed twice (paced, then full) or closed meanwhile: once, or not at all.
            sending = [a for a in dict.fromkeys(sending) if a.listed and not a.closed]
            for appends in sending:
                appends.listed = False
            if not sending:
                continue
            self._in_flight = sending
            batches = [a.take(self.batch_events) for a in sending]
            sent_at = loop.time()
            replies = await self._send(sending, batches)
            self._in_flight = []
            for appends, batch, reply in zip(sending, batches, replies, strict=True):
                appends.written(batch, sent_at, reply)

    async def _sleep(self, seconds: float | None) -> None:
        """Until an attempt enlists, or `seconds` pass (the earliest paced attempt's turn)."""
        loop = asyncio.get_running_loop()
        wake = self._wake = loop.create_future()
        timer = None if seconds is None else loop.call_later(seconds, _set, wake)
        try:
            await wake
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()

    async def _send(
        self, sending: list[AttemptAppends], batches: list[list[Event]]
    ) -> list[str | BaseException]:
        """Each batch's last event id, or the error it was refused with (`from_redis`)."""
        calls = []
        for appends, batch in zip(sending, batches, strict=True):
            args = list(appends.args)
            for event, data in batch:
                args += [event, data]
            calls.append((appends.run_id, appends.keys, args))
        try:
            return await send_calls(self.redis, self.script, calls)
        except Exception as exc:  # not Redis's: every attempt of the pipeline gets it
            logger.exception("sending events failed")
            return [exc] * len(calls)


def _set(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
