"""One statement on a pooled connection, with its psycopg errors translated (`postgres_errors`),
and a transaction sent in as few round trips as its statements allow (`pipelined_transaction`).

The record classes (`run_records.py`, `thread_records.py`) run most of their statements alone,
through these; a statement that must share a transaction with others opens its own connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.rows import DictRow

from .connections import ConnectionSource
from .errors import postgres_errors

__all__ = ["execute", "fetch_all", "pipelined", "pipelined_transaction"]

_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR)


async def fetch_all(
    pool: ConnectionSource, query: str, params: Sequence[Any] = ()
) -> list[DictRow]:
    """The rows of `query` (a SELECT, or a write with RETURNING)."""
    async with postgres_errors(), pool.connection() as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall()


async def execute(pool: ConnectionSource, query: str, params: Sequence[Any] = ()) -> None:
    """Run a write whose rows nobody reads."""
    async with postgres_errors(), pool.connection() as conn:
        await conn.execute(query, params)


@contextlib.asynccontextmanager
async def pipelined_transaction(conn: AsyncConnection[DictRow]) -> AsyncIterator[None]:
    """A transaction on `conn` (in autocommit, idle) in pipeline mode, its BEGIN sent with its
    first statement and its COMMIT with the pipeline's end.

    psycopg's `conn.transaction()` inside `conn.pipeline()` waits for its BEGIN's answer
    before the block runs (a round trip of its own, 0.3-0.4 ms here), so that an error of BEGIN
    itself would surface there. Here a statement's error surfaces where its result is read, or
    at the pipeline's end. Whatever ends the block or the pipeline with an exception leaves no
    transaction open: a failed statement makes the server skip the rest of the pipeline, its
    COMMIT too, and the transaction is rolled back here.
    """
    try:
        async with conn.pipeline():
            await conn.execute("BEGIN")
            yield
            await conn.execute("COMMIT")
    except BaseException:
        if conn.info.transaction_status in _IN_TRANSACTION:
            # A connection too broken to roll back is discarded by the pool on its return.
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
        raise


def pipelined(conn: AsyncConnection[DictRow]) -> AbstractAsyncContextManager[Any]:
    """`conn.pipeline()`, or nothing when `conn` is in one already: psycopg's nested pipeline
    first waits for the answers to what was sent before it (a round trip of its own), where
    statements added to the open one go out with it."""
    if conn.pgconn.pipeline_status != PipelineStatus.OFF:
        return contextlib.nullcontext()
    return conn.pipeline()
