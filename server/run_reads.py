"""The server's reads of one run by id, many requests' reads in one statement.

Every attach, poll and cancel first reads its run from Postgres, which decides whether the
caller owns it. Ten thousand viewers attaching at once would make that ten thousand
statements, each a pool checkout and a round trip, most of them queued for a connection: the
largest share of an attach's cost. `RunReads` sends one statement at a time: the reads asked
for while it is in flight wait for it to end and then go together in the next
(`run_id = ANY(...)`), so a burst costs a statement per round trip instead of one per request,
and a lone read waits for nothing. Each read still starts after it was asked, as a statement
of its own would, so what it sees is as fresh.
"""

from __future__ import annotations

import asyncio
import contextvars

from stream_store.run_records import RunRecord, RunRecords

__all__ = ["RunReads"]


class RunReads:
    """Reads runs by id for the requests of one process, batched (see the module)."""

    def __init__(self, records: RunRecords) -> None:
        self._records = records
        self._asked: dict[str, list[asyncio.Future[RunRecord | None]]] = {}
        self._flight: asyncio.Task[None] | None = None

    async def owned_run(self, run_id: str, owner: str) -> RunRecord | None:
        """The run, or None when it is unknown or not `owner`'s."""
        answer = asyncio.get_running_loop().create_future()
        self._asked.setdefault(run_id, []).append(answer)
        if self._flight is None:
            # A context of its own: the batch is no request's (their log context, and the
            # pool's record of the connections each task holds, stay theirs).
            self._flight = asyncio.create_task(self._read(), context=contextvars.Context())
        run: RunRecord | None = await answer  # cancelling one request leaves the batch going
        return run if run is not None and run.owner == owner else None

    async def _read(self) -> None:
        try:
            while self._asked:
                batch, self._asked = self._asked, {}
                try:
                    found = await self._records.get_runs(list(batch))
                except asyncio.CancelledError:  # the server is stopping
                    for answer in self._answers(batch):
                        answer.cancel()
                    raise
                except Exception as exc:
                    # The reads asked for meanwhile waited through the same failure: they get
                    # it too rather than wait as long again.
                    for answer in self._answers(batch):
                        answer.set_exception(exc)
                    continue
                runs = {run.run_id: run for run in found}
                for run_id, answers in batch.items():
                    for answer in answers:
                        if not answer.done():
                            answer.set_result(runs.get(run_id))
        finally:
            self._flight = None

    def _answers(
        self, batch: dict[str, list[asyncio.Future[RunRecord | None]]]
    ) -> list[asyncio.Future[RunRecord | None]]:
        """The answers still awaited in `batch` and among the reads asked for since (which it
        takes over), for a failed batch."""
        waiting, self._asked = self._asked, {}
        answers = [a for group in (*batch.values(), *waiting.values()) for a in group]
        return [answer for answer in answers if not answer.done()]
