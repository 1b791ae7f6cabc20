"""Reads of runs by id, batched across requests, answer each as its own query would."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import httpx
import pytest

from server.run_reads import RunReads
from stream_store.errors import StoreUnavailable
from stream_store.run_records import RunRecord, RunRecords
from stream_store.services import open_services
from stream_store.settings import Settings
from tests.conftest import ServerHandle
from tests.test_runs import submit


class CountedRunRecords(RunRecords):
    """The real records, counting the statements the batched reads send."""

    statements = 0

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        self.statements += 1
        return await super().get_runs(run_ids)


class TestRunReads:
    """Concurrent reads share statements; each still gets only its own owner's run."""

    async def test_concurrent_reads_share_statements_and_keep_owners_apart(
        self, settings: Settings, server: ServerHandle, client: httpx.AsyncClient
    ) -> None:
        runs = [(await submit(client))["run_id"] for _ in range(3)]
        async with open_services(settings, pool_size=2) as services:
            first = await services.run_records.get_run(runs[0])
            assert first is not None
            records = CountedRunRecords(services.pool)
            reads = RunReads(records)
            unknown = str(uuid.uuid4())
            asked = [(run_id, first.owner) for run_id in runs * 20]
            asked += [(runs[0], "someone-else"), (unknown, first.owner)]
            found = await asyncio.gather(*(reads.owned_run(r, o) for r, o in asked))
        assert [run.run_id if run else None for run in found] == [
            *(runs * 20),
            None,  # another owner's run reads as unknown
            None,
        ]
        assert records.statements < len(asked) / 10

    async def test_a_failed_read_errs_its_callers_and_the_next_read_is_answered(
        self, settings: Settings, server: ServerHandle, client: httpx.AsyncClient
    ) -> None:
        run_id = (await submit(client))["run_id"]
        async with open_services(settings, pool_size=2) as services:
            first = await services.run_records.get_run(run_id)
            assert first is not None
            records = FailingOnceRunRecords(services.pool)
            reads = RunReads(records)
            with pytest.raises(StoreUnavailable, match="failed once"):
                await reads.owned_run(run_id, first.owner)
            found = await reads.owned_run(run_id, first.owner)
            await reads.aclose()
            with pytest.raises(StoreUnavailable, match="closed"):
                await reads.owned_run(run_id, first.owner)
        assert found is not None and found.run_id == run_id


class FailingOnceRunRecords(RunRecords):
    """The real records, whose first batched read fails as Postgres going away would."""

    failed = False

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable("failed once")
        return await super().get_runs(run_ids)
