"""The connections for queries a caller shapes: the store's reads and writes, and searches.

A store search with a filter of 20,000 conditions held a pooled connection for 21 s, and ten of
them at once left every other caller's requests waiting for a connection until they answered
503. Such queries now run apart from everything else, and each under three bounds:

- their own small pool (`QUERY_POOL_SIZE` connections per server process), so they can never
  take the connections that submits, attaches and runs need;
- a turn per caller: at most `RUNSTREAM_MAX_CONCURRENT_QUERIES` of one caller's queries hold a
  connection at once in a process; the caller's others wait for their turn (429 after
  `QUERY_TURN_TIMEOUT_S`), so one caller cannot hold the whole pool while others wait;
- a statement timeout (`RUNSTREAM_QUERY_TIMEOUT_MS`): Postgres cancels a query that runs past
  it, set with `SET LOCAL` in the query's own transaction, which works through a transaction
  pooler too (a session setting would not).

Their inputs are bounded too where they are read (`server/langgraph/store.py`), and the routes
count against the caller's per-minute budget of queries or writes (`server/callers/budgets.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from stream_store import limits
from stream_store.connections import ConnectionSource, PgPool, open_pg_pool
from stream_store.errors import LimitReached, QueryTimeout, postgres_errors
from stream_store.settings import Settings

__all__ = ["QUERY_POOL_SIZE", "CallerQueries", "open_caller_queries"]

QUERY_POOL_SIZE = 4


class CallerQueries:
    """Hands out connections for one caller's query at a time, each in a transaction whose
    statements Postgres cancels after `timeout_ms`."""

    def __init__(self, pool: PgPool, *, timeout_ms: int, per_caller: int) -> None:
        self.pool = pool
        self._timeout_ms = timeout_ms
        self._per_caller = per_caller
        # Only the turns of callers with a query waiting or running stay in memory.
        self._turns: weakref.WeakValueDictionary[str, asyncio.Semaphore] = (
            weakref.WeakValueDictionary()
        )

    @contextlib.asynccontextmanager
    async def connection(self, owner: str) -> AsyncIterator[AsyncConnection[DictRow]]:
        """A connection in a transaction for one of `owner`'s queries, once it is its turn;
        committed when the block ends, rolled back if it raises.

        Raises:
            LimitReached: 429 `too_many_queries`, the caller's turn did not come in time.
            QueryTimeout: a statement ran past the timeout (nothing it did is kept).
            StoreUnavailable: Postgres did not answer.
        """
        async with self._turn(owner), postgres_errors(), self.pool.connection() as conn:
            try:
                async with conn.transaction():
                    await conn.execute(
                        "SELECT set_config('statement_timeout', %s, true)",
                        (str(self._timeout_ms),),
                    )
                    yield conn
            except psycopg.errors.QueryCanceled as exc:  # an OperationalError: caught first
                raise QueryTimeout(
                    f"the query ran past {self._timeout_ms} ms (RUNSTREAM_QUERY_TIMEOUT_MS)"
                    " and was cancelled; narrow it (a longer namespace prefix, fewer filter"
                    " fields, a smaller limit)"
                ) from exc

    def for_caller(self, owner: str) -> ConnectionSource:
        """These connections as a pool of `owner`'s, for the records classes' searches."""
        return _CallerConnections(self, owner)

    @contextlib.asynccontextmanager
    async def _turn(self, owner: str) -> AsyncIterator[None]:
        if not self._per_caller:
            yield
            return
        turn = self._turns.get(owner)
        if turn is None:
            turn = self._turns[owner] = asyncio.Semaphore(self._per_caller)
        try:
            async with asyncio.timeout(limits.QUERY_TURN_TIMEOUT_S):
                await turn.acquire()
        except TimeoutError:
            raise LimitReached(
                f"{self._per_caller} queries of one caller run at once"
                " (RUNSTREAM_MAX_CONCURRENT_QUERIES), and this one waited"
                f" {limits.QUERY_TURN_TIMEOUT_S:g} s for its turn; retry later",
                code="too_many_queries",
                retry_after_s=1,
            ) from None
        try:
            yield
        finally:
            turn.release()


class _CallerConnections:
    def __init__(self, queries: CallerQueries, owner: str) -> None:
        self._queries = queries
        self._owner = owner

    def connection(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection[DictRow]]:
        return self._queries.connection(self._owner)


@contextlib.asynccontextmanager
async def open_caller_queries(settings: Settings) -> AsyncIterator[CallerQueries]:
    """The process's `CallerQueries` on a pool of its own, closed at exit."""
    pool = await open_pg_pool(settings, max_size=QUERY_POOL_SIZE)
    try:
        yield CallerQueries(
            pool,
            timeout_ms=settings.query_timeout_ms,
            per_caller=settings.max_concurrent_queries,
        )
    finally:
        await pool.close()
