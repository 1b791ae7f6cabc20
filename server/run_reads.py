"""The server's reads of one run by id, many requests' reads in one statement.

Every attach, poll and cancel first reads its run from Postgres, which decides whether the
caller owns it. Ten thousand viewers attaching at once would make that ten thousand
statements, each a pool checkout and a round trip, most of them queued for a connection: the
largest share of an attach's cost. `RunReads` sends one statement at a time through a
`Coalescer` (stream_store/coalesce.py, its failure rules too): the reads asked for while it is
in flight wait for it to end and then go together in the next (`run_id = ANY(...)`), so a
burst costs a statement per round trip instead of one per request, and a lone read waits for
nothing. Each read still starts after it was asked, as a statement of its own would, so what
it sees is as fresh.
"""

from __future__ import annotations

from stream_store.coalesce import Coalescer
from stream_store.run_records import RunRecord, RunRecords

__all__ = ["RunReads"]


class RunReads:
    """Reads runs by id for the requests of one process, batched (see the module)."""

    def __init__(self, records: RunRecords) -> None:
        self._records = records
        self._reads: Coalescer[str, RunRecord | None] = Coalescer(self._read, name="the run reads")

    async def owned_run(self, run_id: str, owner: str) -> RunRecord | None:
        """The run, or None when it is unknown or not `owner`'s.

        Raises:
            StoreError: Postgres failed the batch this read went in, or `aclose` was called.
        """
        run = await self._reads.submit(run_id)  # cancelling one request leaves the batch going
        return run if run is not None and run.owner == owner else None

    async def aclose(self) -> None:
        """Stop reading (process shutdown); reads still waiting get StoreUnavailable."""
        await self._reads.aclose()

    async def _read(self, run_ids: list[str]) -> list[RunRecord | None]:
        """Each id's run (None when unknown), one statement for the batch; ids asked for by
        several requests are read once."""
        found = await self._records.get_runs(list(dict.fromkeys(run_ids)))
        runs = {run.run_id: run for run in found}
        return [runs.get(run_id) for run_id in run_ids]
