"""The LangGraph checkpointer's tables, reached through a connection the caller already holds.

The checkpointer normally takes its own connection from the pool for every statement. Deleting
a thread and migrating must instead run its statements on the caller's connection: inside the
caller's transaction (a thread delete is all or nothing) and without a second checkout while
the first holds locks (see `PgPool`).
"""

from __future__ import annotations

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.rows import DictRow

__all__ = ["delete_thread_checkpoints", "setup_checkpoints"]


async def setup_checkpoints(conn: AsyncConnection[DictRow]) -> None:
    """Create or upgrade the checkpointer's tables (`conn` must be in autocommit)."""
    await AsyncPostgresSaver(conn).setup()


async def delete_thread_checkpoints(conn: AsyncConnection[DictRow], thread_id: str) -> None:
    """Delete a thread's checkpoints, blobs and pending writes in `conn`'s transaction."""
    await AsyncPostgresSaver(conn).adelete_thread(thread_id)
