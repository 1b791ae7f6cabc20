"""A deployment's first start-up creates its tables whatever else the database is doing."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from stream_store.services import open_services
from stream_store.settings import Settings


@pytest.mark.fresh_schema
async def test_a_first_start_does_not_wait_for_a_long_statement_elsewhere(
    settings: Settings,
) -> None:
    """The checkpointer's and the store's index builds on new tables are plain ones: a
    `CONCURRENTLY` build waits until every transaction running at its start has ended, in any
    schema of the database (a test's start-up once waited 45 s on another test's run)."""
    async with await psycopg.AsyncConnection.connect(settings.database_url or "") as other:
        statement = asyncio.create_task(other.execute("SELECT pg_sleep(60)"))
        await asyncio.sleep(0.2)  # the other statement is running
        try:
            async with (
                asyncio.timeout(20),
                open_services(settings) as services,
                services.pool.connection() as conn,
            ):
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM pg_indexes WHERE schemaname = %s"
                    " AND indexname IN ('checkpoints_thread_id_idx', 'store_prefix_idx')",
                    (settings.database_schema,),
                )
                row = await cur.fetchone()
            assert row is not None and row["n"] == 2
            assert not statement.done()  # it was running all along
        finally:
            await other.cancel_safe()
            await asyncio.gather(statement, return_exceptions=True)
