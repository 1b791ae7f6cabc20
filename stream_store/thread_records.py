"""Thread records in Postgres (`runstream_threads`), with each thread's status derived from its
runs.

Owner scoping lives in the SQL: a query for another owner's thread finds nothing, which the
server answers as 404. A thread made by a submit is made in the submit's transaction
(`run_submit.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, NamedTuple

import msgspec
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from .checkpoint_quota import CheckpointQuota
from .checkpoints import copy_thread_checkpoints, delete_thread_checkpoints
from .connections import ConnectionSource
from .errors import Conflict, NotFound, postgres_errors
from .metadata_filters import sql_condition
from .pg import fetch_all
from .run_status import ACTIVE, WORKING, RunStatus, sql_list
from .thread_facts import LATEST_RUN, LatestRun, ThreadNaming

__all__ = [
    "THREAD_SORT_COLUMNS",
    "DeletedRun",
    "DeletedThreads",
    "HeldThread",
    "ThreadRecord",
    "ThreadRecords",
    "delete_langgraph_threads",
]

# A thread's own status: busy while a run is queued or running, then interrupted while one
# waits at its interrupt, else idle. The LangGraph API names threads by its own rules over this
# and the latest run (stream_store/thread_facts.py).
_THREAD_STATUS = f"""CASE
      WHEN EXISTS (SELECT 1 FROM runstream_runs r WHERE r.thread_id = t.thread_id
                   AND r.status IN {sql_list(WORKING)}) THEN 'busy'
      WHEN EXISTS (SELECT 1 FROM runstream_runs r WHERE r.thread_id = t.thread_id
                   AND r.status = '{RunStatus.INTERRUPTED}') THEN 'interrupted'
      ELSE 'idle' END"""
_THREAD_COLUMNS = (
    "t.thread_id::text, t.owner, t.title, t.metadata, t.created_at, t.updated_at,"
    f" {_THREAD_STATUS} AS status"
)
# Read only when asked for (`latest_run=True`): its subquery is most of a listing's time.
_LATEST_RUN_COLUMNS = f"{_THREAD_COLUMNS}, {LATEST_RUN} AS latest_run"


# What a thread search may sort by: its column of the subquery `named` (`name`: the name the
# search's `ThreadNaming` gives, as LangGraph's `status`).
THREAD_SORT_COLUMNS = {
    "thread_id": "named.thread_id",
    "status": "named.name",
    "created_at": "named.created_at",
    "updated_at": "named.updated_at",
    "state_updated_at": "named.updated_at",  # a thread's state is written as it is updated
}


def _columns(latest_run: bool) -> str:
    return _LATEST_RUN_COLUMNS if latest_run else _THREAD_COLUMNS


class ThreadRecord(msgspec.Struct, kw_only=True):
    """One row of `runstream_threads`, with its own status (busy, interrupted, idle) and, when
    read with `latest_run=True`, its latest started run (stream_store/thread_facts.py)."""

    thread_id: str
    owner: str
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    status: str
    latest_run: LatestRun | None = None  # None: not read


# A thread retention may delete (its one parameter: the idle seconds): untouched that long,
# nothing in flight, and no cron still to fire on it (deleting the thread deletes the cron).
_IDLE = (
    "t.updated_at < clock_timestamp() - make_interval(secs => %s)"
    " AND NOT EXISTS (SELECT 1 FROM runstream_runs r WHERE r.thread_id = t.thread_id"
    f"   AND r.status IN {sql_list(ACTIVE)})"
    " AND NOT EXISTS (SELECT 1 FROM runstream_crons c WHERE c.thread_id = t.thread_id"
    "   AND c.enabled AND c.next_run_date IS NOT NULL)"
)


class DeletedRun(NamedTuple):
    """A run deleted with its thread (`delete_langgraph_threads`)."""

    run_id: str
    attempt: int
    interrupted: bool  # it waited at an interrupt: its viewers are still attached
    active: bool = False  # queued or running (a thread delete cancels them): to be stopped


class DeletedThreads(NamedTuple):
    """What `delete_langgraph_threads` deleted."""

    thread_ids: list[str]
    runs: list[DeletedRun]


class HeldThread(NamedTuple):
    """A thread locked for a write of its state (`ThreadRecords.hold_for_state_write`)."""

    conn: AsyncConnection[DictRow]  # in the transaction that holds the locks
    interrupted: bool  # a run of the thread waits at an interrupt


class ThreadRecords:
    """Queries and changes of threads; one instance per process, over its connection pool."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def _threads(self, query: str, params: Sequence[Any] = ()) -> list[ThreadRecord]:
        rows = await fetch_all(self.pool, query, params)
        return [msgspec.convert(row, ThreadRecord) for row in rows]

    async def _one_thread(self, query: str, params: Sequence[Any]) -> ThreadRecord | None:
        found = await self._threads(query, params)
        return found[0] if found else None

    async def create_thread(
        self,
        owner: str,
        metadata: dict[str, Any],
        thread_id: str | None = None,
        *,
        latest_run: bool = False,
    ) -> ThreadRecord | None:
        """A new thread; None when `thread_id` is given and already taken (by anyone)."""
        return await self._one_thread(
            "INSERT INTO runstream_threads AS t (thread_id, owner, metadata)"
            " VALUES (%s, %s, %s) ON CONFLICT (thread_id) DO NOTHING"
            f" RETURNING {_columns(latest_run)}",
            (thread_id or str(uuid.uuid4()), owner, Jsonb(metadata)),
        )

    async def copy_thread(
        self,
        thread_id: str,
        owner: str,
        metadata: dict[str, Any],
        quota: CheckpointQuota | None = None,
    ) -> ThreadRecord | None:
        """A new thread of `owner` with `metadata` and a copy of `thread_id`'s checkpoints
        (not its runs), taken from one snapshot; None when `thread_id` is not the owner's.
        A LangGraph route's: read with its latest run.

        Raises:
            QuotaExceeded: the copy would pass a cap of `quota`.
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur = await conn.execute(
                "SELECT 1 FROM runstream_threads WHERE thread_id = %s AND owner = %s",
                (thread_id, owner),
            )
            if await cur.fetchone() is None:
                return None
            if quota is not None:
                await quota.check(conn, owner, thread_id, copy=True)
            cur = await conn.execute(
                "INSERT INTO runstream_threads AS t (thread_id, owner, metadata)"
                f" VALUES (%s, %s, %s) RETURNING {_LATEST_RUN_COLUMNS}",
                (str(uuid.uuid4()), owner, Jsonb(metadata)),
            )
            row = await cur.fetchone()
            assert row is not None  # INSERT ... RETURNING always returns the row
            copied = msgspec.convert(row, ThreadRecord)
            await copy_thread_checkpoints(conn, thread_id, copied.thread_id)
        return copied

    async def update_thread_metadata(
        self, thread_id: str, owner: str, metadata: dict[str, Any], *, latest_run: bool = False
    ) -> ThreadRecord | None:
        """Merge `metadata` into the thread's (LangGraph's PATCH); None: not the owner's."""
        return await self._one_thread(
            "UPDATE runstream_threads AS t SET metadata = t.metadata || %s,"
            " updated_at = clock_timestamp() WHERE t.thread_id = %s AND t.owner = %s"
            f" RETURNING {_columns(latest_run)}",
            (Jsonb(metadata), thread_id, owner),
        )

    async def get_thread(
        self, thread_id: str, owner: str, *, latest_run: bool = False
    ) -> ThreadRecord | None:
        return await self._one_thread(
            f"SELECT {_columns(latest_run)} FROM runstream_threads t"
            " WHERE t.thread_id = %s AND t.owner = %s",
            (thread_id, owner),
        )

    async def list_threads(
        self,
        owner: str,
        limit: int,
        before: tuple[datetime, str] | None,
        *,
        auth_filters: dict[str, Any] | None = None,
    ) -> list[ThreadRecord]:
        """The owner's threads that match an auth handler's filter, newest first; `before` is
        the (created_at, id) keyset cursor."""
        condition, condition_params = sql_condition("t.metadata", auth_filters)
        query = (
            f"SELECT {_THREAD_COLUMNS} FROM runstream_threads t WHERE t.owner = %s AND {condition}"
        )
        params: list[Any] = [owner, *condition_params]
        if before is not None:
            query += " AND (t.created_at, t.thread_id) < (%s, %s)"
            params += [before[0], before[1]]
        query += " ORDER BY t.created_at DESC, t.thread_id DESC LIMIT %s"
        params.append(limit)
        return await self._threads(query, params)

    def _thread_filter(
        self,
        owner: str,
        metadata: dict[str, Any],
        named: tuple[ThreadNaming, str | None] | None,
        ids: list[str] | None,
        auth_filters: dict[str, Any] | None = None,
    ) -> tuple[str, list[Any]]:
        """The owner's threads whose metadata contains `metadata` (and ids, and an auth
        handler's filter, stream_store/metadata_filters.py), with their latest run and the name
        `named`'s naming gives them (NULL without one), as a subquery `named`; with a name in
        `named`, only the threads it names so."""
        condition, condition_params = sql_condition("t.metadata", auth_filters)
        found = (
            f"SELECT {_LATEST_RUN_COLUMNS} FROM runstream_threads t"
            f" WHERE t.owner = %s AND t.metadata @> %s AND {condition}"
        )
        found_params: list[Any] = [owner, Jsonb(metadata), *condition_params]
        if ids is not None:
            found += " AND t.thread_id::text = ANY(%s)"
            found_params.append(ids)
        name, params = named[0].sql("found") if named is not None else ("NULL::text", [])
        query = f"SELECT * FROM (SELECT found.*, {name} AS name FROM ({found}) found) named"
        params += found_params
        if named is not None and named[1] is not None:
            query += " WHERE named.name = %s"
            params.append(named[1])
        return query, params

    async def search_threads(
        self,
        owner: str,
        *,
        metadata: dict[str, Any],
        named: tuple[ThreadNaming, str | None] | None = None,
        limit: int,
        offset: int,
        ids: list[str] | None = None,
        auth_filters: dict[str, Any] | None = None,
        sort_by: str = "created_at",
        descending: bool = True,
    ) -> list[ThreadRecord]:
        """The owner's threads that match (see `_thread_filter`), with their latest run,
        ordered by `sort_by` (a `THREAD_SORT_COLUMNS` key; `status`: the name `named` gives),
        then by id the same way."""
        query, params = self._thread_filter(owner, metadata, named, ids, auth_filters)
        order = "DESC" if descending else "ASC"
        query += (
            f" ORDER BY {THREAD_SORT_COLUMNS[sort_by]} {order}, named.thread_id {order}"
            " LIMIT %s OFFSET %s"
        )
        return await self._threads(query, [*params, limit, offset])

    async def containing(self, documents: list[str | None], values: dict[str, Any]) -> list[bool]:
        """Whether each JSON document contains `values`, by Postgres's own `@>` (as LangGraph
        filters a thread's values); a null document contains nothing."""
        rows = await fetch_all(
            self.pool,
            "SELECT coalesce(d.doc::jsonb @> %s, false) AS hit"
            " FROM unnest(%s::text[]) WITH ORDINALITY AS d(doc, i) ORDER BY d.i",
            (Jsonb(values), documents),
        )
        return [bool(row["hit"]) for row in rows]

    async def count_threads(
        self,
        owner: str,
        *,
        metadata: dict[str, Any],
        named: tuple[ThreadNaming, str | None] | None = None,
        auth_filters: dict[str, Any] | None = None,
    ) -> int:
        query, params = self._thread_filter(owner, metadata, named, None, auth_filters)
        rows = await fetch_all(self.pool, f"SELECT count(*) AS n FROM ({query}) counted", params)
        return int(rows[0]["n"])

    async def idle_threads(self, idle_s: float, limit: int = 100) -> list[tuple[str, str]]:
        """(thread_id, owner) of threads untouched for `idle_s` with nothing in flight and no
        cron still to fire on them (deleting the thread would delete the cron)."""
        rows = await fetch_all(
            self.pool,
            "SELECT t.thread_id::text AS thread_id, t.owner FROM runstream_threads t"
            f" WHERE {_IDLE} ORDER BY t.updated_at LIMIT %s",
            (idle_s, limit),
        )
        return [(row["thread_id"], row["owner"]) for row in rows]

    async def threads_with_new_runs(
        self, thread_ids: list[str], seen: list[datetime | None]
    ) -> list[tuple[str, bool, datetime | None]]:
        """Of `thread_ids`, those gone or with a run created after its `seen` (None: any run),
        as (thread_id, gone, its newest run's `created_at`); one statement for them all
        (server/streaming/thread_watch.py)."""
        rows = await fetch_all(
            self.pool,
            "SELECT w.thread_id::text AS thread_id, t.thread_id IS NULL AS gone,"
            " newest.created_at"
            " FROM unnest(%s::uuid[], %s::timestamptz[]) AS w(thread_id, seen)"
            " LEFT JOIN runstream_threads t ON t.thread_id = w.thread_id"
            " LEFT JOIN LATERAL (SELECT max(r.created_at) AS created_at FROM runstream_runs r"
            " WHERE r.thread_id = w.thread_id) newest ON true"
            " WHERE t.thread_id IS NULL OR newest.created_at > coalesce(w.seen, '-infinity')",
            (thread_ids, seen),
        )
        return [(row["thread_id"], row["gone"], row["created_at"]) for row in rows]

    @asynccontextmanager
    async def hold_for_state_write(
        self, thread_id: str, owner: str, quota: CheckpointQuota | None = None
    ) -> AsyncIterator[HeldThread]:
        """A transaction for a write of the thread's state outside a run, made on its connection.

        The thread's row is locked as a submit locks it, and the row of a run waiting at an
        interrupt as a resume locks it: no run starts on the thread until the write commits, so
        none starts from the state before it, and none is running (it would write over it).

        Raises:
            NotFound: unknown or not the owner's.
            Conflict: a run of the thread is queued or running.
            QuotaExceeded: one more checkpoint would pass a cap of `quota`.
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT 1 FROM runstream_threads WHERE thread_id = %s AND owner = %s FOR UPDATE",
                (thread_id, owner),
            )
            if await cur.fetchone() is None:
                raise NotFound(f"thread {thread_id} not found")
            cur = await conn.execute(
                "SELECT status FROM runstream_runs WHERE thread_id = %s"
                f" AND status IN {sql_list(ACTIVE)} FOR UPDATE",
                (thread_id,),
            )
            statuses = {row["status"] for row in await cur.fetchall()}
            if statuses & WORKING:
                raise Conflict(
                    f"thread {thread_id} has a run queued or running; update its state after",
                    code="thread_busy",
                )
            if quota is not None:
                await quota.check(conn, owner, thread_id, copy=False)
            yield HeldThread(conn, RunStatus.INTERRUPTED in statuses)

    async def delete_langgraph_threads(
        self, owner: str, thread_ids: Sequence[str], *, with_active_runs: bool = False
    ) -> DeletedThreads:
        """`delete_langgraph_threads` in a transaction of its own: LangGraph's thread delete
        and prune."""
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            return await delete_langgraph_threads(
                conn, owner, thread_ids, with_active_runs=with_active_runs
            )

    async def delete_thread(
        self, thread_id: str, owner: str, *, idle_s: float | None = None
    ) -> list[str]:
        """Delete the thread, its runs and its checkpoints in one transaction; all or nothing.

        With `idle_s` (retention), only a thread still idle as `idle_threads` found it, checked
        with its row and its crons' rows locked: a run or a cron that came since keeps it.

        Returns the ids of the deleted runs, whose streams the caller removes from Redis once
        this has committed (they expire on their own if that fails).

        Raises:
            NotFound: unknown or not the owner's (or, with `idle_s`, no longer idle).
            Conflict: a run of the thread is queued, running or interrupted.
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            idle = "" if idle_s is None else f" AND {_IDLE}"
            if idle_s is not None:  # a cron enabled meanwhile waits for this decision
                await conn.execute(
                    "SELECT 1 FROM runstream_crons WHERE thread_id = %s FOR SHARE", (thread_id,)
                )
            cur = await conn.execute(
                "SELECT t.thread_id FROM runstream_threads t"
                f" WHERE t.thread_id = %s AND t.owner = %s{idle} FOR UPDATE",
                (thread_id, owner) if idle_s is None else (thread_id, owner, idle_s),
            )
            if await cur.fetchone() is None:
                raise NotFound(f"thread {thread_id} not found")
            cur = await conn.execute(
                "SELECT run_id::text AS run_id, status FROM runstream_runs WHERE thread_id = %s",
                (thread_id,),
            )
            runs = await cur.fetchall()
            if any(r["status"] in ACTIVE for r in runs):
                raise Conflict(f"thread {thread_id} has an active run", code="thread_busy")
            await conn.execute("DELETE FROM runstream_threads WHERE thread_id = %s", (thread_id,))
            await delete_thread_checkpoints(conn, thread_id)
        return [r["run_id"] for r in runs]


async def delete_langgraph_threads(
    conn: AsyncConnection[DictRow],
    owner: str,
    thread_ids: Sequence[str],
    *,
    with_active_runs: bool = False,
) -> DeletedThreads:
    """Delete the owner's threads among `thread_ids` with their runs and checkpoints, in
    `conn`'s transaction: all of them or, while one has a queued or running run, none (an
    interrupted run is over to LangGraph, and goes with its thread). Ids no longer the owner's
    threads are skipped.

    With `with_active_runs` (LangGraph's thread delete, which cancels them), queued and running
    runs go too. A worker still running one is fenced: its checkpoint writes check the run's
    row (`FencedPostgresSaver`), which this deletes under the lock they wait for, and its
    events are refused once the caller has ended the stream (`RunLifecycle.tell_deleted`).

    The rows are locked in id order before the check, and the runs' rows after them: a submit
    locks its thread's row (run_submit.py), a resume or a cancel its run's, so what the check
    sees holds until the commit, and two such deletes cannot deadlock on each other.

    Returns the threads and runs deleted; the caller removes the runs' streams from Redis once
    the transaction has committed (as `delete_thread` does), after telling the viewers of the
    interrupted ones (`stream_store.thread_deletion`).

    Raises:
        Conflict: a thread has a queued or running run; it names them.
    """
    cur = await conn.execute(
        "SELECT thread_id::text AS thread_id FROM runstream_threads"
        " WHERE thread_id = ANY(%s::uuid[]) AND owner = %s ORDER BY thread_id FOR UPDATE",
        (list(thread_ids), owner),
    )
    locked = [row["thread_id"] for row in await cur.fetchall()]
    if not locked:
        return DeletedThreads([], [])
    cur = await conn.execute(
        "SELECT run_id::text AS run_id, thread_id::text AS thread_id, status, attempt"
        " FROM runstream_runs WHERE thread_id = ANY(%s::uuid[]) ORDER BY run_id FOR UPDATE",
        (locked,),
    )
    runs = await cur.fetchall()
    busy = sorted({r["thread_id"] for r in runs if r["status"] in WORKING})
    if busy and not with_active_runs:
        raise Conflict(
            f"threads with a queued or running run cannot be deleted: {', '.join(busy)};"
            " cancel their runs first",
            code="thread_busy",
        )
    await conn.execute("DELETE FROM runstream_threads WHERE thread_id = ANY(%s::uuid[])", (locked,))
    for thread_id in locked:
        await delete_thread_checkpoints(conn, thread_id)
    deleted = [
        DeletedRun(
            r["run_id"],
            r["attempt"],
            r["status"] == RunStatus.INTERRUPTED,
            r["status"] in WORKING,
        )
        for r in runs
    ]
    return DeletedThreads(locked, deleted)
