"""`pipelined_transaction` (stream_store/pg.py): the submit's, the claim's, a transition's and a
fenced checkpoint write's transaction, its BEGIN sent with its first statement. It commits what
its block did, and whatever ends the block with an error rolls all of it back and leaves the
connection idle for its next borrower: an exception of the caller, a statement's error read in
the block, and a statement's error nobody read (raised at the pipeline's end, after the server
skipped the COMMIT). `pipelined` inside it adds to its pipeline instead of nesting one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg.pq import PipelineStatus, TransactionStatus

from stream_store.connections import PgPool, open_pg_pool
from stream_store.pg import pipelined, pipelined_transaction
from stream_store.settings import Settings


class Abandoned(Exception):
    """The caller gave up inside the transaction."""


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[PgPool]:
    opened = await open_pg_pool(settings, max_size=2)
    async with opened.connection() as conn:
        await conn.execute("CREATE TABLE tx_probe (id int PRIMARY KEY)")
    yield opened
    await opened.close()


async def _ids(pool: PgPool) -> list[int]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT id FROM tx_probe ORDER BY id")
        return [row["id"] for row in await cur.fetchall()]


async def test_the_block_is_committed_and_read_back(pool: PgPool) -> None:
    async with pool.connection() as conn:
        async with pipelined_transaction(conn):
            await conn.execute("INSERT INTO tx_probe VALUES (1)")
            cur = await conn.execute("INSERT INTO tx_probe VALUES (2) RETURNING id")
            assert (await cur.fetchone()) == {"id": 2}
        assert conn.info.transaction_status is TransactionStatus.IDLE
    assert await _ids(pool) == [1, 2]


async def test_an_exception_in_the_block_rolls_everything_back(pool: PgPool) -> None:
    async with pool.connection() as conn:
        with pytest.raises(Abandoned):
            async with pipelined_transaction(conn):
                cur = await conn.execute("INSERT INTO tx_probe VALUES (1) RETURNING id")
                await cur.fetchone()
                raise Abandoned
        assert conn.info.transaction_status is TransactionStatus.IDLE
    assert await _ids(pool) == []


async def test_an_error_read_in_the_block_rolls_everything_back(pool: PgPool) -> None:
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with pipelined_transaction(conn):
                await conn.execute("INSERT INTO tx_probe VALUES (1)")
                cur = await conn.execute("INSERT INTO tx_probe VALUES (1) RETURNING id")
                await cur.fetchone()
        assert conn.info.transaction_status is TransactionStatus.IDLE
        await conn.execute("INSERT INTO tx_probe VALUES (3)")  # the connection works on
    assert await _ids(pool) == [3]


async def test_an_error_nobody_read_fails_the_transaction_at_its_end(pool: PgPool) -> None:
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with pipelined_transaction(conn):
                await conn.execute("INSERT INTO tx_probe VALUES (1)")
                await conn.execute("INSERT INTO tx_probe VALUES (1)")
                await conn.execute("INSERT INTO tx_probe VALUES (2)")
        assert conn.info.transaction_status is TransactionStatus.IDLE
    assert await _ids(pool) == []


async def test_a_pipelined_block_inside_joins_the_transaction_and_its_pipeline(
    pool: PgPool,
) -> None:
    """`pipelined` (an owner's lock and count, `count_locked`) adds its statements to the
    transaction's pipeline rather than nesting one: they are read there, and rolled back with
    it."""
    async with pool.connection() as conn:
        with pytest.raises(Abandoned):
            async with pipelined_transaction(conn):
                async with pipelined(conn):
                    assert conn.pgconn.pipeline_status == PipelineStatus.ON
                    await conn.execute("INSERT INTO tx_probe VALUES (1)")
                    cur = await conn.execute("SELECT count(*) AS n FROM tx_probe")
                assert (await cur.fetchone()) == {"n": 1}
                raise Abandoned
        assert conn.info.transaction_status is TransactionStatus.IDLE
        async with pipelined(conn):  # alone: a pipeline of its own
            assert conn.pgconn.pipeline_status == PipelineStatus.ON
            cur = await conn.execute("SELECT count(*) AS n FROM tx_probe")
        assert (await cur.fetchone()) == {"n": 0}
        assert conn.pgconn.pipeline_status == PipelineStatus.OFF
