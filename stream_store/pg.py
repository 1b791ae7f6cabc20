"""One statement on a pooled connection, with its psycopg errors translated (`postgres_errors`).

The record classes (`run_records.py`, `thread_records.py`) run most of their statements alone,
through these; a statement that must share a transaction with others opens its own connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.rows import DictRow

from .connections import ConnectionSource
from .errors import postgres_errors

__all__ = ["execute", "fetch_all"]


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
