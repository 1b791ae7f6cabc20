"""Opening the two services a process talks to, the same way in servers and workers."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from arq.connections import ArqRedis
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from .settings import Settings

__all__ = ["NestedCheckout", "PgPool", "connect_pg", "open_pg_pool", "open_redis"]

# The pools whose connection the current task (or the task that spawned it) holds.
_held: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "runstream_pools_held", default=frozenset()
)


class NestedCheckout(RuntimeError):
    """A task asked its pool for a second connection while holding one."""


class PgPool(AsyncConnectionPool[AsyncConnection[DictRow]]):
    """A connection pool that refuses to hand one task two connections at once.

    A request that holds a connection (and perhaps row locks) while it waits for a second one
    deadlocks as soon as as many such requests run at once as the pool has connections; it
    passes every test that runs one request at a time. Refusing the second checkout makes the
    mistake fail on its first run instead: pass the held connection down instead.
    """

    @asynccontextmanager
    async def connection(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg_pool's signature)
    ) -> AsyncIterator[AsyncConnection[DictRow]]:
        held = _held.get()
        if id(self) in held:
            raise NestedCheckout(
                f"pool {self.name}: this task already holds a connection; pass it down"
            )
        _held.set(held | {id(self)})
        try:
            async with super().connection(timeout) as conn:
                yield conn
        finally:
            _held.set(held)


def open_redis(settings: Settings) -> ArqRedis:
    """An ArqRedis (a redis-py client that can also enqueue jobs) for the process."""
    url, _ = settings.require_services()
    return ArqRedis.from_url(url, health_check_interval=30, socket_keepalive=True)


async def connect_pg(settings: Settings) -> AsyncConnection[DictRow]:
    """One connection, as the pool's are, for a short-lived command (`runstream status`).

    No pool: a command that reports Postgres down must fail at once, not retry for 10 s.
    """
    _, url = settings.require_services()
    return await AsyncConnection.connect(
        url,
        autocommit=True,
        row_factory=dict_row,
        options=f"-c search_path={settings.database_schema}",
    )


async def open_pg_pool(settings: Settings, max_size: int = 10) -> PgPool:
    """A psycopg pool in autocommit with dict rows, on the configured schema.

    These are the connection settings the LangGraph Postgres checkpointer requires; our own
    queries open explicit transactions where they need one.
    """
    _, url = settings.require_services()
    pool = PgPool(
        url,
        connection_class=AsyncConnection[DictRow],
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=10,
        # psycopg_pool retries a lost connection with a doubling delay and no cap, so after a
        # 30 s outage its next try can be 30 s away. Giving up a slot after 8 s (tries at
        # 0, 1, 3, 7 s) frees it, and the next request opens a fresh one at once.
        reconnect_timeout=8,
        kwargs={
            "autocommit": True,
            "prepare_threshold": None,
            "row_factory": dict_row,
            # A paused or partitioned process must not hold row locks (the checkpoint fence's
            # FOR SHARE) past its lease: Postgres ends such sessions on its own.
            "options": f"-c search_path={settings.database_schema}"
            f" -c idle_in_transaction_session_timeout={max(1000, int(settings.lease_s * 1000))}",
        },
        check=AsyncConnectionPool.check_connection,
    )
    await pool.open(wait=True, timeout=10)
    return pool
