"""The submit's transaction: a new run (and its thread when none is given) in Postgres.

It keeps the rules that decide whether a run may be recorded, all in one transaction with the
thread's row locked: the thread is the owner's, `multitask` (`reject` refuses a busy thread),
the idempotency key (a replay answers the first run; a different request under the same key
is refused), the owner's active-run limit, and LangGraph's superseding of an interrupted run.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from .connections import PgPool
from .errors import Conflict, IdempotencyMismatch, LimitReached, NotFound, postgres_errors
from .limits import ACTIVE_RUNS_RETRY_AFTER_S
from .pg import fetch_all, pipelined, pipelined_transaction
from .run_records import RUN_COLUMNS, TAKE_SUBMIT_LOCKS, RunRecord
from .run_status import ACTIVE, WORKING, Decision, RunStatus, sources, sql_list

__all__ = ["TITLE_CHARS", "BeforeSubmitCommit", "Created", "NewRun", "RunSubmitter"]

TITLE_CHARS = 80
# The advisory-lock class (first of two int4 keys) under which a submit locks its owner.
_OWNER_SUBMIT_LOCK = 0x7375626D  # "subm"

# Inserts the run on the thread named by a CTE `thread` (new or updated in the same statement).
_INSERT_RUN = (
    "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input, config,"
    " metadata, multitask, idempotency_key, request_hash, stream_modes, kwargs, resume,"
    " traceparent, x_trace_id)"
    f" SELECT %s, thread.thread_id, %s, %s, '{RunStatus.QUEUED}', %s, %s, %s, %s, %s, %s, %s,"
    " %s, %s, %s, %s"
    " FROM thread"
    " ON CONFLICT (owner, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
)
# A new thread and its run in one statement, or neither: a thread id any owner has already
# (LangGraph's `if_not_exists: create` naming a thread that exists, or one another submit is
# creating) leaves `thread` empty, and `thread_created` false. Always one row: the run's columns
# are null when no run was inserted.
_ON_NEW_THREAD = (
    "WITH thread AS (INSERT INTO runstream_threads (thread_id, owner, title, metadata)"
    "  VALUES (%s, %s, %s, %s) ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id),"
    f" run AS ({_INSERT_RUN} RETURNING {RUN_COLUMNS})"
    " SELECT EXISTS (SELECT 1 FROM thread) AS thread_created, run.*"
    " FROM (VALUES (1)) AS one LEFT JOIN run ON true"
)
# The run on a thread that exists (its row locked by `_admit_on_thread`).
_ON_THREAD = (
    "WITH thread AS (UPDATE runstream_threads SET updated_at = clock_timestamp(),"
    "  title = coalesce(title, %s), metadata = metadata || %s WHERE thread_id = %s"
    "  RETURNING thread_id)"
    f" {_INSERT_RUN} RETURNING {RUN_COLUMNS}"
)


class NewRun(msgspec.Struct, kw_only=True):
    """What the server asks `create_run` to record."""

    owner: str
    graph: str
    input: dict[str, Any]
    thread_id: str | None = None
    config: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    multitask: str = "reject"
    idempotency_key: str | None = None
    request_hash: str | None = None
    title: str | None = None
    # Refuse (LimitReached) when the owner has this many queued or running runs; 0: no limit.
    max_active_runs: int = 0
    stream_modes: list[str] = []
    kwargs: dict[str, Any] = {}
    # The answer to the thread's pending interrupt, for a run that continues it (LangGraph's
    # `command.resume`): `{"value": ...}`.
    resume: dict[str, Any] | None = None
    # LangGraph ends a run at its interrupt: a new run on the thread ends an `interrupted` one
    # (as succeeded) instead of waiting behind it.
    supersede_interrupted: bool = False
    # With a thread id that names no thread yet: create it (LangGraph's `if_not_exists`).
    create_thread: bool = False
    # Merged into the thread's metadata, new or not: LangGraph records there the graph and
    # the assistant of the thread's latest run, by which UIs list "their" threads.
    thread_metadata: dict[str, Any] = {}
    traceparent: str | None = None  # of the submit span, continued by every attempt
    x_trace_id: str | None = None  # the submitting request's `X-Trace-ID` (server/trace_ids.py)

    def run_values(self, run_id: str) -> tuple[Any, ...]:
        """The parameters of `_INSERT_RUN` after the thread's."""
        return (
            run_id,
            self.owner,
            self.graph,
            Jsonb(self.input),
            Jsonb(self.config),
            Jsonb(self.metadata),
            self.multitask,
            self.idempotency_key,
            self.request_hash,
            self.stream_modes,
            Jsonb(self.kwargs),
            Jsonb(self.resume) if self.resume is not None else None,
            self.traceparent,
            self.x_trace_id,
        )


class Created(msgspec.Struct):
    run: RunRecord
    created: bool
    dispatch_now: bool
    superseded: list[RunRecord] = []  # interrupted runs this one ended (`supersede_interrupted`)


# Runs in a new run's transaction, before its commit (`RunSubmitter.create_run`); unlike a
# transition's `run_records.BeforeCommit` it gets the whole outcome (`dispatch_now`, ...).
BeforeSubmitCommit = Callable[[Created], Awaitable[None]]


class _KeyTaken(Exception):
    """Internal: the idempotency key already names a run."""


class RunSubmitter:
    """Records submitted runs; one instance per process, over its connection pool."""

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool
        # One limited submit per owner at a time in this process, before it takes a pooled
        # connection: a submit waiting on its owner's advisory lock holds a connection, and a
        # burst from one caller would otherwise take the whole pool while it queues there.
        self._owner_turns: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def create_run(self, new: NewRun, *, before_commit: BeforeSubmitCommit) -> Created:
        """Record a run (and its thread when none is given), honouring idempotency and multitask.

        `before_commit` runs inside the transaction once the run is known to be new, so the
        run's stream exists before anyone can read the run; if it raises, nothing is recorded.
        It may queue the run's job: the transaction holds the run's submit lock
        (`RUN_SUBMIT_LOCK`), which a worker's claim waits for.

        Raises:
            NotFound: `new.thread_id` is unknown or not the owner's.
            Conflict: the thread has an active run and `multitask` is `reject`.
            IdempotencyMismatch: the key was used for a different request.
            LimitReached: the owner has `new.max_active_runs` queued or running runs (a replay
                by key is answered all the same).
        """
        try:
            return await self._insert_run(new, before_commit)
        except _KeyTaken:
            pass
        existing = await self._run_by_key(new.owner, new.idempotency_key or "")
        if existing is None:  # the first request rolled back after we waited on it: retry
            return await self.create_run(new, before_commit=before_commit)
        if existing.request_hash != new.request_hash:
            raise IdempotencyMismatch("Idempotency-Key was already used with a different request")
        return Created(run=existing, created=False, dispatch_now=False)

    async def _insert_run(self, new: NewRun, before_commit: BeforeSubmitCommit) -> Created:
        # This is on the way from submit to first token, and each statement is a round trip:
        # in pipeline mode BEGIN goes out with the first statement and COMMIT alone, so a run on
        # a new thread costs two round trips (the insert, the commit), an existing thread's
        # three (its lock first), one more for a thread LangGraph's `if_not_exists: create`
        # named that exists (the insert tried first); an active-run limit's count goes with the
        # first.
        turn: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if new.max_active_runs:
            turn = self._owner_turns.setdefault(new.owner, asyncio.Lock())
        async with (
            turn,
            postgres_errors(),
            self.pool.connection() as conn,
            pipelined_transaction(conn),
        ):
            if new.max_active_runs:
                await self._check_active_runs(conn, new)
            run_id = str(uuid.uuid4())
            # held to the commit, sent with the first statement: `before_commit` may queue the
            # run's job
            await conn.execute(TAKE_SUBMIT_LOCKS, ([run_id],))
            row: DictRow | None = None
            if new.thread_id is None or new.create_thread:
                row = await _insert_on_new_thread(conn, new, run_id)
            busy = False
            superseded: list[RunRecord] = []
            if row is None:  # the thread exists
                assert new.thread_id is not None
                busy, superseded = await self._admit_on_thread(conn, new, new.thread_id)
                asked = [r.interrupt_id for r in superseded if r.interrupt_id]
                if new.resume is not None and asked:
                    # the question the answer is for (runner/graph_input.py, `_answer_taken`)
                    new.resume = {**new.resume, "interrupt_id": asked[0]}
                cur = await conn.execute(
                    _ON_THREAD,
                    (new.title, Jsonb(new.thread_metadata), new.thread_id, *new.run_values(run_id)),
                )
                row = await cur.fetchone()
                if row is None:
                    raise _KeyTaken  # leaving by exception rolls the thread's update back
            created = Created(
                run=RunRecord.from_row(row),
                created=True,
                dispatch_now=not busy,
                superseded=superseded,
            )
            await before_commit(created)
        return created

    async def _admit_on_thread(
        self, conn: AsyncConnection[DictRow], new: NewRun, thread_id: str
    ) -> tuple[bool, list[RunRecord]]:
        """Lock the owner's existing thread and apply `multitask`: whether the new run waits
        behind an active one, and the interrupted runs it superseded.

        Raises:
            NotFound: the thread is unknown or not the owner's.
            Conflict: the thread is busy and `multitask` is `reject`.
        """
        cur = await conn.execute(
            "SELECT EXISTS (SELECT 1 FROM runstream_runs WHERE thread_id = t.thread_id"
            f" AND status IN {sql_list(ACTIVE)}) AS busy,"
            " EXISTS (SELECT 1 FROM runstream_runs WHERE thread_id = t.thread_id"
            f" AND status IN {sql_list(WORKING)}) AS working"
            " FROM runstream_threads t WHERE thread_id = %s AND owner = %s FOR UPDATE",
            (thread_id, new.owner),
        )
        found = await cur.fetchone()
        if found is None:
            raise NotFound(f"thread {thread_id} not found")
        busy: bool = found["busy"]
        superseded: list[RunRecord] = []
        if busy and new.supersede_interrupted:
            superseded = await _end_interrupted(conn, thread_id)
            busy = found["working"]  # the interrupted run just ended
        if busy and new.multitask == "reject":
            # A replay of an earlier request by key answers 200, busy or not.
            if new.idempotency_key and await _key_used(conn, new):
                raise _KeyTaken
            raise Conflict(f"thread {thread_id} already has an active run", code="thread_busy")
        return busy, superseded

    async def _check_active_runs(self, conn: AsyncConnection[DictRow], new: NewRun) -> None:
        """Refuse the run if its owner already has `new.max_active_runs` queued or running runs.

        The owner's advisory lock, held to the end of the transaction, puts concurrent submits
        of one owner in a line: each counts after the one before it committed or rolled back.
        The count is a statement of its own, after the lock, so that it sees what the lock
        waited for; the two go in the submit's pipeline, with its insert.
        """
        async with pipelined(conn):
            await conn.execute(
                f"SELECT pg_advisory_xact_lock({_OWNER_SUBMIT_LOCK}, hashtext(%s))", (new.owner,)
            )
            cur = await conn.execute(
                "SELECT count(*) AS active FROM runstream_runs"
                f" WHERE owner = %s AND status IN {sql_list(WORKING)}",
                (new.owner,),
            )
        counted = await cur.fetchone()
        if counted is None or counted["active"] < new.max_active_runs:
            return
        if new.idempotency_key and await _key_used(conn, new):
            raise _KeyTaken  # a replay by key answers 200 with the run, at the limit or not
        raise LimitReached(
            f"you have {counted['active']} queued or running runs and"
            f" RUNSTREAM_MAX_ACTIVE_RUNS allows {new.max_active_runs}; submit again when one"
            " has finished, or cancel one",
            code="too_many_active_runs",
            retry_after_s=ACTIVE_RUNS_RETRY_AFTER_S,
        )

    async def end_interrupted(self, thread_id: str) -> list[RunRecord]:
        """interrupted -> succeeded for the thread's waiting run, with the thread's row locked
        as a submit locks it; its events are the caller's to write (`_end_interrupted`)."""
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "SELECT 1 FROM runstream_threads WHERE thread_id = %s FOR UPDATE", (thread_id,)
            )
            return await _end_interrupted(conn, thread_id)

    async def _run_by_key(self, owner: str, key: str) -> RunRecord | None:
        found = await fetch_all(
            self.pool,
            f"SELECT {RUN_COLUMNS} FROM runstream_runs WHERE owner = %s AND idempotency_key = %s",
            (owner, key),
        )
        return RunRecord.from_row(found[0]) if found else None


async def _insert_on_new_thread(
    conn: AsyncConnection[DictRow], new: NewRun, run_id: str
) -> DictRow | None:
    """The run inserted on a new thread (`new.thread_id`, or a new id); None when a thread of
    that id exists (any owner's: an id taken is not reusable), and nothing was inserted.

    Raises:
        _KeyTaken: the idempotency key names a run already (the new thread is rolled back).
    """
    thread_id = new.thread_id or str(uuid.uuid4())
    thread_values = (thread_id, new.owner, new.title, Jsonb(new.thread_metadata))
    cur = await conn.execute(_ON_NEW_THREAD, (*thread_values, *new.run_values(run_id)))
    row = await cur.fetchone()
    assert row is not None  # always one row
    thread_created = row.pop("thread_created")
    if row["run_id"] is not None:
        return row
    if thread_created:
        raise _KeyTaken
    return None


async def _end_interrupted(conn: AsyncConnection[DictRow], thread_id: str) -> list[RunRecord]:
    """interrupted -> succeeded for the thread's waiting run (its thread row is locked).

    Its events are the caller's to write after the commit; `settled_at` without a
    `last_event_id` lets the reaper write them if the caller dies first.
    """
    cur = await conn.execute(
        f"UPDATE runstream_runs SET status = '{RunStatus.SUCCEEDED}',"
        " finished_at = clock_timestamp(), settled_at = clock_timestamp(), last_event_id = NULL"
        f" WHERE thread_id = %s AND status IN {sql_list(sources(Decision.SUPERSEDE))}"
        f" RETURNING {RUN_COLUMNS}",
        (thread_id,),
    )
    return [RunRecord.from_row(row) for row in await cur.fetchall()]


async def _key_used(conn: AsyncConnection[DictRow], new: NewRun) -> bool:
    # Not `_run_by_key`: that takes a second pooled connection while this one holds the
    # thread's row lock, and enough such submits at once would exhaust the pool.
    cur = await conn.execute(
        "SELECT 1 FROM runstream_runs WHERE owner = %s AND idempotency_key = %s",
        (new.owner, new.idempotency_key),
    )
    return await cur.fetchone() is not None
