"""Opening the two services a process talks to, the same way in servers and workers."""

from __future__ import annotations

from arq.connections import ArqRedis
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from .settings import Settings

__all__ = ["PgPool", "open_pg_pool", "open_redis"]

PgPool = AsyncConnectionPool[AsyncConnection[DictRow]]


def open_redis(settings: Settings) -> ArqRedis:
    """An ArqRedis (a redis-py client that can also enqueue jobs) for the process."""
    url, _ = settings.require_services()
    return ArqRedis.from_url(url, health_check_interval=30, socket_keepalive=True)


async def open_pg_pool(settings: Settings, max_size: int = 10) -> PgPool:
    """A psycopg pool in autocommit with dict rows, on the configured schema.

    These are the connection settings the LangGraph Postgres checkpointer requires; our own
    queries open explicit transactions where they need one.
    """
    _, url = settings.require_services()
    pool: PgPool = AsyncConnectionPool(
        url,
        connection_class=AsyncConnection[DictRow],
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=10,
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
