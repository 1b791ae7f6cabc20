"""Writing one attempt's events to its run's stream: batched, in order, failures raised once."""

from __future__ import annotations

import asyncio
from typing import Any

from opentelemetry.trace import Tracer

from stream_store.log import EventLog
from stream_store.metrics import WorkerMetrics
from stream_store.run_records import RunRecord
from wire.events import encode_data

from .attempt_spans import AppendSpan

__all__ = ["AttemptWriter"]

MAX_BATCH_EVENTS = 512  # events per append_batch call
MAX_PENDING_EVENTS = 4096  # events a run may have waiting for Redis before the graph waits
# A run's batches go out at most this often: a model faster than that (one token every few
# milliseconds, as a local or cached model streams) has its tokens sent several to a batch,
# one Redis call and one wake-up of every viewer's server per batch instead of per token. A
# model slower than that (every hosted one: 20-100 ms a token) has each token sent at once.
BATCH_INTERVAL_S = 0.01


class AttemptWriter:
    """Appends events for one attempt of one run.

    Plain events (tokens, messages, custom) are batched without waiting: the first goes out at
    once, and those the graph produces while a batch is in flight, or within `BATCH_INTERVAL_S`
    of the last batch of tokens, go together in the next one. A fast model then costs one Redis
    round trip per batch rather than per token, and a slow one no added delay. Before a status
    change the attempt waits for every earlier event (`drain`),
    and a write's failure (`Fenced`, `StreamGone`, `StreamTooLarge`, a Redis error) is raised
    once, by the next `emit` or `drain`; nothing emitted after it is written.
    """

    def __init__(
        self, events: EventLog, run: RunRecord, metrics: WorkerMetrics, tracer: Tracer
    ) -> None:
        self.events = events
        self.run = run
        self.appends = AppendSpan(tracer)  # one span of all the attempt's batches (traces on)
        self.metrics = metrics  # the attempt's figures: bytes, first token, outcome
        # submit -> first token is timed for a run's first attempt, not for resumes or retries
        self._first_token_due = run.attempt == 1 and run.resume is None
        self._pending: list[tuple[str, bytes]] = []
        self._flushing: asyncio.Task[None] | None = None
        self._sent_at = float("-inf")  # when the last batch went out (the loop's clock)

    async def emit(self, event: str, data: Any) -> None:
        self._raise_failure()
        self._pending.append((event, encode_data(data)))
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush())
        elif len(self._pending) >= MAX_PENDING_EVENTS:
            await self.drain()  # Redis is slower than the model: wait rather than pile up

    async def drain(self) -> None:
        """Wait until every event emitted so far is written."""
        if self._flushing is not None:
            # Not cancelled with the caller: a cancelled run still writes what it emitted
            # before its outcome. `wait` does not raise the flush's failure: `_raise_failure`
            # does, once, so the outcome's own `drain` after it passes.
            await asyncio.wait([self._flushing])
        self._raise_failure()

    def abandon(self) -> None:
        """The attempt is over: stop writing (anything still unwritten is fenced out anyway)."""
        self.appends.end()
        task, self._flushing = self._flushing, None
        if task is not None and not task.done():
            task.cancel()
        elif task is not None and not task.cancelled():
            task.exception()  # retrieved: already reported through `drain` or not needed

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            # A full batch goes at once: waiting only gathers tokens for a batch not yet full
            # (paced, a run of 20,000 tokens sent 512 at a time spent 0.4 s asleep).
            full = len(self._pending) >= MAX_BATCH_EVENTS
            if not full and (wait_s := self._sent_at + BATCH_INTERVAL_S - loop.time()) > 0:
                await asyncio.sleep(wait_s)
            batch = self._pending[:MAX_BATCH_EVENTS]
            del self._pending[:MAX_BATCH_EVENTS]
            tokens = any(event == "token" for event, _ in batch)
            if tokens:
                # Only token batches pace the next: the run's opening events (its input
                # message, a custom event) must not hold back the first token.
                self._sent_at = loop.time()
            with self.appends.batch(len(batch)):
                await self.events.append_batch(self.run.run_id, self.run.attempt, batch)
            self.metrics.appended(batch)
            if self._first_token_due and tokens:
                self._first_token_due = False
                self.metrics.first_token(self.run.graph, self.run.created_at)

    def _raise_failure(self) -> None:
        task = self._flushing
        if task is not None and task.done():
            self._flushing = None
            if not task.cancelled():
                task.result()
