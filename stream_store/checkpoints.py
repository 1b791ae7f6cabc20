"""The LangGraph checkpointer's tables: the fenced saver runs use, and statements on a
connection the caller already holds.

**The fenced saver.** Inside a run (the `attempt_fence` context is set) every checkpoint write
runs in a transaction that first takes a share lock on the run's row and checks that the run is
still `running` as this attempt. The reaper's take-over (an UPDATE of that row) therefore either
happens before the check, and the stale write is refused, or waits for the write to commit: a
worker that lost its run never writes a checkpoint after the run moved on. The check is a
statement that fails (`runstream_fence`), so the transaction, the check and the writes go to
Postgres in one pipeline: one round trip per checkpoint write, not four.

It also drops the saver's process-wide `asyncio.Lock` (langgraph issue 7259): the lock guards
one shared connection, but ours is a pool and every cursor has a connection of its own, so the
lock only made every run in the worker wait for every other run's checkpoint.

This overrides `_cursor`, a private method of `AsyncPostgresSaver` (langgraph-checkpoint-postgres
3.x): the public API has no hook for running a statement in the write's transaction.
`tests/test_private_apis.py` fails, naming this module, if an upgrade changes it.

**A thread with no checkpoint yet.** LangGraph reads the thread's latest checkpoint when a
graph starts. The claim already found out, in its own statement, whether the thread has one
(`RunRecord.thread_has_checkpoints`); when it has none, the attempt sets `fresh_thread` and that
first read answers "none" without a round trip (nothing else writes a running run's thread).
Later reads, and reads of a checkpoint by id or of a subgraph's namespace, go to Postgres.

**On the caller's connection.** Deleting a thread, writing its state outside a run and
migrating run the checkpointer's statements on the caller's connection instead of one from the
pool: inside the caller's transaction (a thread delete is all or nothing; a state write commits
under the thread's lock) and without a second checkout while the first holds locks (see
`PgPool`).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, AsyncCursor, DatabaseError, OperationalError
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from .connections import plain_index_builds, table_missing
from .errors import Fenced
from .pg import pipelined_transaction

__all__ = [
    "FencedPostgresSaver",
    "FreshThread",
    "attempt_fence",
    "checkpoint_before_runs",
    "checkpointer_on",
    "copy_thread_checkpoints",
    "delete_run_checkpoints",
    "delete_thread_checkpoints",
    "fresh_thread",
    "setup_checkpoints",
]

# The SQLSTATE `runstream_fence` (migration 10) raises when the attempt no longer owns its run.
FENCE_REFUSED = "RSF01"

attempt_fence: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar(
    "runstream_attempt_fence", default=None
)


class FreshThread:
    """A thread the claim found without checkpoints; its first read at the graph's start is
    answered without Postgres, once. Whatever that first read asks, no later one is: a run
    started from a checkpoint reads that one first, and its latest afterwards is its own."""

    __slots__ = ("read", "thread_id")

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.read = False

    def skips(self, config: RunnableConfig) -> bool:
        configurable = config.get("configurable") or {}
        if self.read or configurable.get("thread_id") != self.thread_id:
            return False
        self.read = True
        return not configurable.get("checkpoint_ns", "") and not configurable.get("checkpoint_id")


fresh_thread: contextvars.ContextVar[FreshThread | None] = contextvars.ContextVar(
    "runstream_fresh_thread", default=None
)


class FencedPostgresSaver(AsyncPostgresSaver):
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        fresh = fresh_thread.get()
        if fresh is not None and fresh.skips(config):
            return None
        return await super().aget_tuple(config)

    # A write is tried once more on a fresh connection when its connection was lost: Postgres
    # ends a session idle in a transaction past the lease (`idle_in_transaction_session_timeout`,
    # there so a paused worker's row lock never blocks a take-over), which is also what becomes
    # of a write in flight while a node blocks the event loop; the worker still holds the lease
    # (`stream_store.leases`), and both writes are upserts, so the second try is safe and the
    # fence decides again.
    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            return await super().aput(config, checkpoint, metadata, new_versions)
        except OperationalError:
            return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        try:
            await super().aput_writes(config, writes, task_id, task_path)
        except OperationalError:
            await super().aput_writes(config, writes, task_id, task_path)

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        if self.pipe is not None or not isinstance(self.conn, AsyncConnectionPool):
            raise TypeError("FencedPostgresSaver needs a connection pool")
        fence = attempt_fence.get()
        async with _ainternal.get_connection(self.conn) as conn:  # a pooled connection: no lock
            if fence is None or not pipeline:  # reads, and writes outside a run, are not fenced
                if pipeline:
                    async with (
                        conn.pipeline(),
                        conn.cursor(binary=True, row_factory=dict_row) as cur,
                    ):
                        yield cur
                else:
                    async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                        yield cur
                return
            try:
                async with (
                    pipelined_transaction(conn),
                    conn.cursor(binary=True, row_factory=dict_row) as cur,
                ):
                    await cur.execute("SELECT runstream_fence(%s, %s)", fence)
                    yield cur
            except DatabaseError as exc:
                if exc.sqlstate == FENCE_REFUSED:
                    message = f"run {fence[0]}: attempt {fence[1]} no longer owns the run"
                    raise Fenced(message) from exc
                raise


def checkpointer_on(conn: AsyncConnection[DictRow]) -> AsyncPostgresSaver:
    """A saver whose reads and writes go through `conn`, in its transaction if it is in one
    (LangGraph takes it from a graph call's config: `CONFIG_KEY_CHECKPOINTER`)."""
    return AsyncPostgresSaver(conn)


async def setup_checkpoints(conn: AsyncConnection[DictRow]) -> None:
    """Create or upgrade the checkpointer's tables (`conn` must be in autocommit); on a schema
    without them, with plain index builds (`plain_index_builds`)."""
    saver = AsyncPostgresSaver(conn)
    if await table_missing(conn, "checkpoint_migrations"):
        saver.MIGRATIONS = [plain_index_builds(step) for step in saver.MIGRATIONS]
    await saver.setup()


async def delete_thread_checkpoints(conn: AsyncConnection[DictRow], thread_id: str) -> None:
    """Delete a thread's checkpoints, blobs and pending writes in `conn`'s transaction."""
    await AsyncPostgresSaver(conn).adelete_thread(thread_id)


async def delete_run_checkpoints(
    conn: AsyncConnection[DictRow], thread_id: str, run_id: str
) -> None:
    """Delete the checkpoints one run wrote, and their pending writes, in `conn`'s transaction:
    the thread's state is then what it was before the run (LangGraph's rollback).

    Blobs stay: the channel versions only those checkpoints named, which nothing reads again.
    """
    await conn.execute(
        "WITH gone AS (DELETE FROM checkpoints WHERE thread_id = %s"
        " AND metadata->>'run_id' = %s RETURNING checkpoint_ns, checkpoint_id)"
        " DELETE FROM checkpoint_writes w USING gone WHERE w.thread_id = %s"
        " AND w.checkpoint_ns = gone.checkpoint_ns AND w.checkpoint_id = gone.checkpoint_id",
        (thread_id, run_id, thread_id),
    )


async def checkpoint_before_runs(
    conn: AsyncConnection[DictRow], thread_id: str, run_ids: Sequence[str]
) -> str | None:
    """The id of the thread's latest root checkpoint that none of `run_ids` wrote: its state
    before those runs (None: they wrote all of them, or there are none)."""
    cursor = await conn.execute(
        "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''"
        " AND NOT (COALESCE(metadata->>'run_id', '') = ANY(%s))"
        " ORDER BY checkpoint_id DESC LIMIT 1",
        (thread_id, list(run_ids)),
    )
    row = await cursor.fetchone()
    return None if row is None else str(row["checkpoint_id"])


async def copy_thread_checkpoints(
    conn: AsyncConnection[DictRow], source_id: str, target_id: str
) -> None:
    """Copy a thread's checkpoints, blobs and pending writes to another thread id, in `conn`'s
    transaction (LangGraph's thread copy). Run it in a REPEATABLE READ transaction for one
    snapshot of a thread a run may be writing."""
    await conn.execute(
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,"
        " type, checkpoint, metadata)"
        " SELECT %s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint,"
        " CASE WHEN metadata ? 'thread_id'"
        " THEN jsonb_set(metadata, '{thread_id}', to_jsonb(%s::text)) ELSE metadata END"
        " FROM checkpoints WHERE thread_id = %s",
        (target_id, target_id, source_id),
    )
    await conn.execute(
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
        " SELECT %s, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs"
        " WHERE thread_id = %s",
        (target_id, source_id),
    )
    await conn.execute(
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,"
        " channel, type, blob, task_path)"
        " SELECT %s, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path"
        " FROM checkpoint_writes WHERE thread_id = %s",
        (target_id, source_id),
    )
