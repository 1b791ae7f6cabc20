"""Writing one attempt's events to its run's stream: batched, in order, failures raised once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.trace import Tracer

from stream_store.log import EventLog
from stream_store.metrics import WorkerMetrics
from stream_store.run_records import RunRecord
from wire.events import encode_data

from .attempt_spans import AppendSpan

__all__ = ["AttemptWriter"]

MAX_PENDING_EVENTS = 4096  # events a run may have waiting for Redis before the graph waits


class AttemptWriter:
    """Appends events for one attempt of one run.

    Plain events (tokens, messages, custom) go to the attempt's queue without waiting
    (`EventLog.appends`): the first at once, and those the graph produces while a batch is in
    flight, or within 10 ms of the last batch of tokens, together in the next one. A fast model
    then costs one Redis call per batch rather than per token, and a slow one no added delay.
    Before a status change the attempt waits for every earlier event (`drain`), and a write's
    failure (`Fenced`, `StreamGone`, `StreamTooLarge`, a Redis error) is raised once, by the
    next `emit` or `drain`; nothing emitted after it is written.
    """

    def __init__(
        self, events: EventLog, run: RunRecord, metrics: WorkerMetrics, tracer: Tracer
    ) -> None:
        self.run = run
        self.appends = AppendSpan(tracer)  # one span of all the attempt's batches (traces on)
        self.metrics = metrics  # the attempt's figures: bytes, first token, outcome
        # submit -> first token is timed for a run's first attempt, not for resumes or retries
        self._first_token_due = run.attempt == 1 and run.resume is None
        self._queue = events.appends(run.run_id, run.attempt, on_written=self._written)

    async def emit(self, event: str, data: Any) -> None:
        self.appends.begin()  # in the attempt's context: the span is its child
        self._queue.put(event, encode_data(data))
        if self._queue.backlog >= MAX_PENDING_EVENTS:
            await self._queue.drain()  # Redis is slower than the model: wait rather than pile up

    async def drain(self) -> None:
        """Wait until every event emitted so far is written."""
        await self._queue.drain()

    def abandon(self) -> None:
        """The attempt is over: stop writing (anything still unwritten is fenced out anyway)."""
        self.appends.end()
        self._queue.close()

    def _written(
        self, batch: Sequence[tuple[str, bytes]], waited_s: float, error: BaseException | None
    ) -> None:
        self.appends.record(len(batch), waited_s, error)
        if error is not None:
            return
        self.metrics.appended(batch)
        if self._first_token_due and any(event == "token" for event, _ in batch):
            self._first_token_due = False
            self.metrics.first_token(self.run.graph, self.run.created_at)
