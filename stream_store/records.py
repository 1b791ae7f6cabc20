"""Run and thread records in Postgres, the system of record.

Every state change is one conditional UPDATE (`WHERE status = ...`), so two processes racing
on one run (a cancel and a worker's claim, two resumes) cannot both win. Owner scoping lives in
the SQL: a query for another owner's row finds nothing, which the server answers as 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from .checkpoints import (
    copy_thread_checkpoints,
    delete_run_checkpoints,
    delete_thread_checkpoints,
)
from .connections import PgPool
from .errors import Conflict, IdempotencyMismatch, LimitReached, NotFound, StoreUnavailable
from .events import ACTIVE_STATUSES, RunStatus
from .limits import ACTIVE_RUNS_RETRY_AFTER_S

__all__ = ["BeforeCommit", "Created", "NewRun", "Records", "RunRecord", "ThreadRecord"]

TITLE_CHARS = 80
# The advisory-lock class (first of two int4 keys) under which a submit locks its owner.
_OWNER_SUBMIT_LOCK = 0x7375626D  # "subm"

_RUN_COLUMNS = (
    "run_id::text, thread_id::text, owner, graph, status, attempt, dispatch, input, config,"
    " metadata, multitask, resume, idempotency_key, request_hash, created_at, started_at,"
    " finished_at, error, interrupt, output, last_event_id, stream_modes, kwargs, traceparent,"
    " attempt_traceparent"
)
# Both dialects' thread statuses begin alike: busy while a run is queued or running, then
# interrupted while one waits at its interrupt.
_BUSY_OR_INTERRUPTED = """
      WHEN EXISTS (SELECT 1 FROM runstream_runs r WHERE r.thread_id = t.thread_id
                   AND r.status IN ('queued', 'running')) THEN 'busy'
      WHEN EXISTS (SELECT 1 FROM runstream_runs r WHERE r.thread_id = t.thread_id
                   AND r.status = 'interrupted') THEN 'interrupted'
"""
_THREAD_STATUS = f"CASE {_BUSY_OR_INTERRUPTED} ELSE 'idle' END"
_THREAD_COLUMNS = (
    "t.thread_id::text, t.owner, t.title, t.metadata, t.created_at, t.updated_at,"
    f" {_THREAD_STATUS} AS status"
)
# A thread's status as LangGraph's server sets it when a run ends (what `search_threads` and
# `count_threads` filter on; server/langgraph/views.py computes the same for one thread): busy
# while a run is queued or running, otherwise from the latest run that started: `error` if it
# failed, `interrupted` if it stopped at an interrupt or was cancelled mid-step (LangGraph:
# the checkpoint still has a next step), else `idle`.
_LANGGRAPH_THREAD_STATUS = f"""
    CASE {_BUSY_OR_INTERRUPTED}
      ELSE COALESCE((SELECT CASE r.status WHEN 'failed' THEN 'error'
                                          WHEN 'cancelled' THEN 'interrupted' ELSE 'idle' END
                     FROM runstream_runs r WHERE r.thread_id = t.thread_id
                     AND r.started_at IS NOT NULL
                     ORDER BY r.created_at DESC LIMIT 1), 'idle')
    END
"""


class RunRecord(msgspec.Struct, kw_only=True):
    """One row of `runstream_runs`."""

    run_id: str
    thread_id: str
    owner: str
    graph: str
    status: RunStatus
    attempt: int
    dispatch: int
    input: dict[str, Any]
    config: dict[str, Any]
    metadata: dict[str, Any]
    multitask: str
    resume: Any = None
    idempotency_key: str | None = None
    request_hash: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: dict[str, Any] | None = None
    interrupt: Any = None
    output: dict[str, Any] | None = None
    last_event_id: str | None = None
    # Extra LangGraph stream modes the worker records (`values`, `updates`), and the LangGraph
    # API's own fields of the request; both empty for runs submitted to `/v1`.
    stream_modes: list[str] = []
    kwargs: dict[str, Any] = {}
    # Traces (stream_store/tracing.py): the submit span's `traceparent`, and that of the attempt
    # that claimed the run last; `claim_run` returns the one before its own claim.
    traceparent: str | None = None
    attempt_traceparent: str | None = None


class ThreadRecord(msgspec.Struct, kw_only=True):
    thread_id: str
    owner: str
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    status: str


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
    traceparent: str | None = None  # of the submit span, continued by every attempt


# Inserts the run on the thread named by a CTE `thread` (new or updated in the same statement).
_INSERT_RUN = (
    "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input, config,"
    " metadata, multitask, idempotency_key, request_hash, stream_modes, kwargs, resume,"
    " traceparent)"
    " SELECT %s, thread.thread_id, %s, %s, 'queued', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s"
    " FROM thread"
    " ON CONFLICT (owner, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
)


# Runs inside a transition's transaction, its row locked, before the commit: the Redis write
# that announces the transition, so that a refusal (Redis at `maxmemory`) rolls it back.
BeforeCommit = Callable[["RunRecord"], Awaitable[None]]


class _KeyTaken(Exception):
    """Internal: the idempotency key already names a run."""


class Created(msgspec.Struct):
    run: RunRecord
    created: bool
    dispatch_now: bool
    superseded: list[RunRecord] = []  # interrupted runs this one ended (`supersede_interrupted`)


def _run(row: dict[str, Any]) -> RunRecord:
    return msgspec.convert(row, RunRecord, from_attributes=False)


def _thread(row: dict[str, Any]) -> ThreadRecord:
    return msgspec.convert(row, ThreadRecord)


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    """Turn connection-level psycopg failures into StoreUnavailable where they enter."""
    try:
        yield
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise StoreUnavailable(f"postgres: {exc}") from exc


class Records:
    """Queries on runs and threads; one instance per process, over its connection pool."""

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool
        # One limited submit per owner at a time in this process, before it takes a pooled
        # connection: a submit waiting on its owner's advisory lock holds a connection, and a
        # burst from one caller would otherwise take the whole pool while it queues there.
        self._owner_turns: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    # -- runs -------------------------------------------------------------------------------

    async def create_run(
        self, new: NewRun, *, before_commit: Callable[[RunRecord], Awaitable[None]]
    ) -> Created:
        """Record a run (and its thread when none is given), honouring idempotency and multitask.

        `before_commit` runs inside the transaction once the run is known to be new, so the
        run's stream exists before anyone can read the run; if it raises, nothing is recorded.

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

    async def _insert_run(
        self, new: NewRun, before_commit: Callable[[RunRecord], Awaitable[None]]
    ) -> Created:
        # Two statements between BEGIN and COMMIT, whatever the case, and one more pipeline with
        # an active-run limit: this is on the way from submit to first token, and each
        # statement is a round trip.
        run_id = str(uuid.uuid4())
        run_values = (
            run_id,
            new.owner,
            new.graph,
            Jsonb(new.input),
            Jsonb(new.config),
            Jsonb(new.metadata),
            new.multitask,
            new.idempotency_key,
            new.request_hash,
            new.stream_modes,
            Jsonb(new.kwargs),
            Jsonb(new.resume) if new.resume is not None else None,
            new.traceparent,
        )
        turn: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if new.max_active_runs:
            turn = self._owner_turns.setdefault(new.owner, asyncio.Lock())
        async with turn, _translated(), self.pool.connection() as conn, conn.transaction():
            if new.max_active_runs:
                await self._check_active_runs(conn, new)
            busy = False
            superseded: list[RunRecord] = []
            if new.thread_id is None or (
                new.create_thread and not await self._thread_exists(conn, new.thread_id)
            ):
                thread_id = new.thread_id or str(uuid.uuid4())
                cur = await conn.execute(
                    "WITH thread AS (INSERT INTO runstream_threads (thread_id, owner, title,"
                    " metadata) VALUES (%s, %s, %s, %s) RETURNING thread_id)"
                    f" {_INSERT_RUN} RETURNING {_RUN_COLUMNS}",
                    (thread_id, new.owner, new.title, Jsonb({}), *run_values),
                )
            else:
                thread_id = new.thread_id
                cur = await conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM runstream_runs WHERE thread_id = t.thread_id"
                    " AND status = ANY(%s)) AS busy,"
                    " EXISTS (SELECT 1 FROM runstream_runs WHERE thread_id = t.thread_id"
                    " AND status IN ('queued', 'running')) AS working"
                    " FROM runstream_threads t WHERE thread_id = %s AND owner = %s FOR UPDATE",
                    (sorted(ACTIVE_STATUSES), thread_id, new.owner),
                )
                found = await cur.fetchone()
                if found is None:
                    raise NotFound(f"thread {thread_id} not found")
                busy = found["busy"]
                if busy and new.supersede_interrupted:
                    superseded = await self._end_interrupted(conn, thread_id)
                    busy = found["working"]  # the interrupted run just ended
                if busy and new.multitask == "reject":
                    # A replay of an earlier request by key answers 200, busy or not.
                    if new.idempotency_key and await self._key_used(conn, new):
                        raise _KeyTaken
                    raise Conflict(
                        f"thread {thread_id} already has an active run", code="thread_busy"
                    )
                cur = await conn.execute(
                    "WITH thread AS (UPDATE runstream_threads SET updated_at = clock_timestamp(),"
                    " title = coalesce(title, %s) WHERE thread_id = %s RETURNING thread_id)"
                    f" {_INSERT_RUN} RETURNING {_RUN_COLUMNS}",
                    (new.title, thread_id, *run_values),
                )
            row = await cur.fetchone()
            if row is None:
                # The key was used before: leaving by exception rolls back any new thread.
                raise _KeyTaken
            run = _run(row)
            await before_commit(run)
        return Created(run=run, created=True, dispatch_now=not busy, superseded=superseded)

    async def _thread_exists(self, conn: AsyncConnection[DictRow], thread_id: str) -> bool:
        """Whether any owner has the thread: an id taken by another owner is not reusable."""
        cur = await conn.execute(
            "SELECT 1 FROM runstream_threads WHERE thread_id = %s", (thread_id,)
        )
        return await cur.fetchone() is not None

    async def _end_interrupted(
        self, conn: AsyncConnection[DictRow], thread_id: str
    ) -> list[RunRecord]:
        """interrupted -> succeeded for the thread's waiting run (its thread row is locked).

        Its events are the caller's to write after the commit; `settled_at` without a
        `last_event_id` lets the reaper write them if the caller dies first.
        """
        cur = await conn.execute(
            "UPDATE runstream_runs SET status = 'succeeded', finished_at = clock_timestamp(),"
            " settled_at = clock_timestamp(), last_event_id = NULL"
            " WHERE thread_id = %s AND status = 'interrupted'"
            f" RETURNING {_RUN_COLUMNS}",
            (thread_id,),
        )
        return [_run(row) for row in await cur.fetchall()]

    async def _check_active_runs(self, conn: AsyncConnection[DictRow], new: NewRun) -> None:
        """Refuse the run if its owner already has `new.max_active_runs` queued or running runs.

        The owner's advisory lock, held to the end of the transaction, puts concurrent submits
        of one owner in a line: each counts after the one before it committed or rolled back.
        The count is a statement of its own, after the lock, so that it sees what the lock
        waited for; the two go in one pipeline, one round trip.
        """
        async with conn.pipeline():
            await conn.execute(
                f"SELECT pg_advisory_xact_lock({_OWNER_SUBMIT_LOCK}, hashtext(%s))", (new.owner,)
            )
            cur = await conn.execute(
                "SELECT count(*) AS active FROM runstream_runs"
                " WHERE owner = %s AND status IN ('queued', 'running')",
                (new.owner,),
            )
        counted = await cur.fetchone()
        if counted is None or counted["active"] < new.max_active_runs:
            return
        if new.idempotency_key and await self._key_used(conn, new):
            raise _KeyTaken  # a replay by key answers 200 with the run, at the limit or not
        raise LimitReached(
            f"you have {counted['active']} queued or running runs and"
            f" RUNSTREAM_MAX_ACTIVE_RUNS allows {new.max_active_runs}; submit again when one"
            " has finished, or cancel one",
            code="too_many_active_runs",
            retry_after_s=ACTIVE_RUNS_RETRY_AFTER_S,
        )

    async def _key_used(self, conn: AsyncConnection[DictRow], new: NewRun) -> bool:
        # Not `_run_by_key`: that takes a second pooled connection while this one holds the
        # thread's row lock, and enough such submits at once would exhaust the pool.
        cur = await conn.execute(
            "SELECT 1 FROM runstream_runs WHERE owner = %s AND idempotency_key = %s",
            (new.owner, new.idempotency_key),
        )
        return await cur.fetchone() is not None

    async def _run_by_key(self, owner: str, key: str) -> RunRecord | None:
        return await self._one_run(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs WHERE owner = %s AND idempotency_key = %s",
            (owner, key),
        )

    async def _rows(self, query: str, params: Sequence[Any]) -> list[DictRow]:
        async with _translated(), self.pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def _runs(self, query: str, params: Sequence[Any] = ()) -> list[RunRecord]:
        return [_run(row) for row in await self._rows(query, params)]

    async def _threads(self, query: str, params: Sequence[Any] = ()) -> list[ThreadRecord]:
        return [_thread(row) for row in await self._rows(query, params)]

    async def _one_run(
        self, query: str, params: tuple[Any, ...], *, before_commit: BeforeCommit | None = None
    ) -> RunRecord | None:
        if before_commit is None:
            async with _translated(), self.pool.connection() as conn:
                cur = await conn.execute(query, params)
                row = await cur.fetchone()
            return _run(row) if row else None
        async with _translated(), self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(query, params)
            row = await cur.fetchone()
            run = _run(row) if row else None
            if run is not None:
                await before_commit(run)
        return run

    async def get_run(self, run_id: str, owner: str | None = None) -> RunRecord | None:
        """The run, or None when unknown or (with `owner`) not that owner's."""
        if owner is None:
            return await self._one_run(
                f"SELECT {_RUN_COLUMNS} FROM runstream_runs WHERE run_id = %s", (run_id,)
            )
        return await self._one_run(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs WHERE run_id = %s AND owner = %s",
            (run_id, owner),
        )

    async def claim_run(
        self, run_id: str, attempt_traceparent: str | None = None
    ) -> RunRecord | None:
        """queued -> running, for the worker that got the job; None if someone else won.

        Records the claiming attempt's `attempt_traceparent` and returns the previous one (the
        CTE reads the row as it was), which the new attempt's span links to.
        """
        previous = "(SELECT attempt_traceparent FROM before) AS attempt_traceparent"
        return await self._one_run(
            "WITH before AS (SELECT attempt_traceparent FROM runstream_runs WHERE run_id = %s)"
            " UPDATE runstream_runs SET status = 'running', claimed_at = clock_timestamp(),"
            " started_at = coalesce(started_at, clock_timestamp()),"
            " attempt_traceparent = coalesce(%s, attempt_traceparent)"
            " WHERE run_id = %s AND status = 'queued'"
            f" RETURNING {_RUN_COLUMNS.replace('attempt_traceparent', previous)}",
            (run_id, attempt_traceparent, run_id),
        )

    async def running_claimed_before(self, age_s: float) -> list[RunRecord]:
        """Runs running for at least `age_s` since their claim: the reaper checks their leases."""
        return await self._runs(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs WHERE status = 'running'"
            " AND claimed_at < clock_timestamp() - make_interval(secs => %s)",
            (age_s,),
        )

    async def queued_heads(self) -> list[RunRecord]:
        """Per thread, the queued run that may go next (nothing else of its thread in flight)."""
        return await self._runs(
            f"SELECT DISTINCT ON (thread_id) {_RUN_COLUMNS} FROM runstream_runs r"
            " WHERE status = 'queued' AND NOT EXISTS (SELECT 1 FROM runstream_runs o"
            "   WHERE o.thread_id = r.thread_id AND o.status IN ('running', 'interrupted'))"
            " ORDER BY thread_id, created_at"
        )

    async def redispatch_if_stuck(
        self, run_id: str, dispatch: int, age_s: float
    ) -> RunRecord | None:
        """A new job id for a run queued longer than `age_s` (its job may be stuck in arq).

        arq keeps a picked job "in progress" for the whole job timeout even if its worker
        died before claiming the run; a fresh dispatch number gives the run a fresh job.
        """
        return await self._one_run(
            "UPDATE runstream_runs SET dispatch = dispatch + 1, queued_at = clock_timestamp()"
            " WHERE run_id = %s AND dispatch = %s AND status = 'queued'"
            " AND queued_at < clock_timestamp() - make_interval(secs => %s)"
            f" RETURNING {_RUN_COLUMNS}",
            (run_id, dispatch, age_s),
        )

    async def requeue_attempt(self, run_id: str, attempt: int) -> RunRecord | None:
        """running as `attempt` -> queued as `attempt + 1`: the attempt died or handed back."""
        return await self._one_run(
            "UPDATE runstream_runs SET status = 'queued', attempt = attempt + 1,"
            " dispatch = dispatch + 1, claimed_at = NULL, queued_at = clock_timestamp()"
            " WHERE run_id = %s AND attempt = %s AND status = 'running'"
            f" RETURNING {_RUN_COLUMNS}",
            (run_id, attempt),
        )

    async def fail_attempts_exhausted(
        self, run_id: str, attempt: int, error: dict[str, Any]
    ) -> RunRecord | None:
        """running as `attempt` -> failed as `attempt + 1`: no attempts left."""
        return await self._one_run(
            "UPDATE runstream_runs SET status = 'failed', attempt = attempt + 1,"
            " finished_at = clock_timestamp(), settled_at = clock_timestamp(), error = %s"
            " WHERE run_id = %s AND attempt = %s AND status = 'running'"
            f" RETURNING {_RUN_COLUMNS}",
            (Jsonb(error), run_id, attempt),
        )

    async def unsettled(self, age_s: float) -> list[RunRecord]:
        """Runs whose outcome Postgres holds but whose stream was never told (writer died)."""
        return await self._runs(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs"
            " WHERE last_event_id IS NULL AND settled_at IS NOT NULL"
            " AND settled_at < clock_timestamp() - make_interval(secs => %s)",
            (age_s,),
        )

    async def active_runs(self) -> list[RunRecord]:
        """Every queued, running or interrupted run (recovery after Redis lost its data)."""
        return await self._runs(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs"
            " WHERE status IN ('queued', 'running', 'interrupted')"
        )

    async def finish_run(
        self,
        run_id: str,
        attempt: int,
        status: RunStatus,
        *,
        output: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> RunRecord | None:
        """running -> succeeded/failed/cancelled by the attempt that holds it."""
        return await self._one_run(
            "UPDATE runstream_runs SET status = %s, finished_at = clock_timestamp(),"
            " settled_at = clock_timestamp(), output = %s, error = %s, resume = NULL"
            " WHERE run_id = %s AND attempt = %s AND status = 'running'"
            f" RETURNING {_RUN_COLUMNS}",
            (
                status,
                Jsonb(output) if output else None,
                Jsonb(error) if error else None,
                run_id,
                attempt,
            ),
        )

    async def interrupt_run(self, run_id: str, attempt: int, interrupt: Any) -> RunRecord | None:
        """running -> interrupted: the graph is waiting for `/resume`."""
        return await self._one_run(
            "UPDATE runstream_runs SET status = 'interrupted', interrupt = %s, resume = NULL,"
            " settled_at = clock_timestamp(), last_event_id = NULL"
            " WHERE run_id = %s AND attempt = %s AND status = 'running'"
            f" RETURNING {_RUN_COLUMNS}",
            (Jsonb(interrupt), run_id, attempt),
        )

    async def cancel_idle_run(
        self, run_id: str, owner: str, *, before_commit: BeforeCommit | None = None
    ) -> RunRecord | None:
        """queued/interrupted -> cancelled directly: no worker is executing it.

        `before_commit` gets the cancelled run while its row is locked; raising rolls back.
        """
        return await self._one_run(
            "UPDATE runstream_runs SET status = 'cancelled', finished_at = clock_timestamp(),"
            " settled_at = clock_timestamp()"
            " WHERE run_id = %s AND owner = %s AND status IN ('queued', 'interrupted')"
            f" RETURNING {_RUN_COLUMNS}",
            (run_id, owner),
            before_commit=before_commit,
        )

    async def resume_run(
        self, run_id: str, owner: str, value: Any, *, before_commit: BeforeCommit | None = None
    ) -> RunRecord | None:
        """interrupted -> queued with the resume value, as a new dispatch of the same run.

        `before_commit` gets the resumed run while its row is locked; raising rolls back.
        """
        return await self._one_run(
            "UPDATE runstream_runs SET status = 'queued', resume = %s, interrupt = NULL,"
            " dispatch = dispatch + 1, queued_at = clock_timestamp(), settled_at = NULL,"
            " last_event_id = NULL"
            " WHERE run_id = %s AND owner = %s AND status = 'interrupted'"
            f" RETURNING {_RUN_COLUMNS}",
            (Jsonb({"value": value}), run_id, owner),
            before_commit=before_commit,
        )

    async def next_queued(self, thread_id: str) -> RunRecord | None:
        """The oldest queued run of the thread, if nothing else on the thread is in flight."""
        return await self._one_run(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs r WHERE thread_id = %s"
            " AND status = 'queued' AND NOT EXISTS (SELECT 1 FROM runstream_runs o"
            "   WHERE o.thread_id = r.thread_id AND o.status IN ('running', 'interrupted'))"
            " ORDER BY created_at LIMIT 1",
            (thread_id,),
        )

    async def set_attempt(self, run_id: str, attempt: int) -> None:
        """Align an interrupted run's attempt with the Redis record after a repair."""
        async with _translated(), self.pool.connection() as conn:
            await conn.execute(
                "UPDATE runstream_runs SET attempt = %s WHERE run_id = %s AND attempt < %s",
                (attempt, run_id, attempt),
            )

    async def set_last_event_id(self, run_id: str, event_id: str) -> None:
        async with _translated(), self.pool.connection() as conn:
            await conn.execute(
                "UPDATE runstream_runs SET last_event_id = %s WHERE run_id = %s",
                (event_id, run_id),
            )

    # -- threads ----------------------------------------------------------------------------

    async def create_thread(
        self, owner: str, metadata: dict[str, Any], thread_id: str | None = None
    ) -> ThreadRecord | None:
        """A new thread; None when `thread_id` is given and already taken (by anyone)."""
        found = await self._threads(
            "INSERT INTO runstream_threads AS t (thread_id, owner, metadata)"
            " VALUES (%s, %s, %s) ON CONFLICT (thread_id) DO NOTHING"
            f" RETURNING {_THREAD_COLUMNS}",
            (thread_id or str(uuid.uuid4()), owner, Jsonb(metadata)),
        )
        return found[0] if found else None

    async def copy_thread(
        self, thread_id: str, owner: str, metadata: dict[str, Any]
    ) -> ThreadRecord | None:
        """A new thread of `owner` with `metadata` and a copy of `thread_id`'s checkpoints
        (not its runs), taken from one snapshot; None when `thread_id` is not the owner's."""
        async with _translated(), self.pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur = await conn.execute(
                "SELECT 1 FROM runstream_threads WHERE thread_id = %s AND owner = %s",
                (thread_id, owner),
            )
            if await cur.fetchone() is None:
                return None
            cur = await conn.execute(
                "INSERT INTO runstream_threads AS t (thread_id, owner, metadata)"
                f" VALUES (%s, %s, %s) RETURNING {_THREAD_COLUMNS}",
                (str(uuid.uuid4()), owner, Jsonb(metadata)),
            )
            row = await cur.fetchone()
            assert row is not None  # INSERT ... RETURNING always returns the row
            copied = _thread(row)
            await copy_thread_checkpoints(conn, thread_id, copied.thread_id)
        return copied

    async def update_thread_metadata(
        self, thread_id: str, owner: str, metadata: dict[str, Any]
    ) -> ThreadRecord | None:
        """Merge `metadata` into the thread's (LangGraph's PATCH); None: not the owner's."""
        found = await self._threads(
            "UPDATE runstream_threads AS t SET metadata = t.metadata || %s,"
            " updated_at = clock_timestamp() WHERE t.thread_id = %s AND t.owner = %s"
            f" RETURNING {_THREAD_COLUMNS}",
            (Jsonb(metadata), thread_id, owner),
        )
        return found[0] if found else None

    def _thread_filter(
        self, owner: str, metadata: dict[str, Any], status: str | None, ids: list[str] | None
    ) -> tuple[str, list[Any]]:
        """The owner's threads whose metadata contains `metadata` (and LangGraph's status,
        ids), as a subquery `found`."""
        query = (
            f"SELECT * FROM (SELECT {_THREAD_COLUMNS} FROM runstream_threads t"
            " WHERE t.owner = %s AND t.metadata @> %s"
        )
        params: list[Any] = [owner, Jsonb(metadata)]
        if ids is not None:
            query += " AND t.thread_id::text = ANY(%s)"
            params.append(ids)
        if status is not None:
            query += f" AND ({_LANGGRAPH_THREAD_STATUS}) = %s"
            params.append(status)
        query += ") found"
        return query, params

    async def search_threads(
        self,
        owner: str,
        *,
        metadata: dict[str, Any],
        status: str | None,
        limit: int,
        offset: int,
        ids: list[str] | None = None,
    ) -> list[ThreadRecord]:
        """The owner's threads that match (see `_thread_filter`), newest first."""
        query, params = self._thread_filter(owner, metadata, status, ids)
        query += " ORDER BY created_at DESC, thread_id DESC LIMIT %s OFFSET %s"
        return await self._threads(query, [*params, limit, offset])

    async def count_threads(
        self, owner: str, *, metadata: dict[str, Any], status: str | None
    ) -> int:
        query, params = self._thread_filter(owner, metadata, status, None)
        rows = await self._rows(f"SELECT count(*) AS n FROM ({query}) counted", params)
        return int(rows[0]["n"])

    async def get_thread(self, thread_id: str, owner: str) -> ThreadRecord | None:
        found = await self._threads(
            f"SELECT {_THREAD_COLUMNS} FROM runstream_threads t"
            " WHERE t.thread_id = %s AND t.owner = %s",
            (thread_id, owner),
        )
        return found[0] if found else None

    async def list_threads(
        self, owner: str, limit: int, before: tuple[datetime, str] | None
    ) -> list[ThreadRecord]:
        """The owner's threads, newest first; `before` is the (created_at, id) keyset cursor."""
        query = f"SELECT {_THREAD_COLUMNS} FROM runstream_threads t WHERE t.owner = %s"
        params: list[Any] = [owner]
        if before is not None:
            query += " AND (t.created_at, t.thread_id) < (%s, %s)"
            params += [before[0], before[1]]
        query += " ORDER BY t.created_at DESC, t.thread_id DESC LIMIT %s"
        params.append(limit)
        return await self._threads(query, params)

    async def idle_threads(self, idle_s: int, limit: int = 100) -> list[tuple[str, str]]:
        """(thread_id, owner) of threads untouched for `idle_s` with nothing in flight."""
        rows = await self._rows(
            "SELECT t.thread_id::text AS thread_id, t.owner FROM runstream_threads t"
            " WHERE t.updated_at < clock_timestamp() - make_interval(secs => %s)"
            " AND NOT EXISTS (SELECT 1 FROM runstream_runs r WHERE r.thread_id = t.thread_id"
            "   AND r.status IN ('queued', 'running', 'interrupted'))"
            " ORDER BY t.updated_at LIMIT %s",
            (idle_s, limit),
        )
        return [(row["thread_id"], row["owner"]) for row in rows]

    async def working_runs(self, owner: str, statuses: Sequence[str]) -> list[RunRecord]:
        """The owner's runs in `statuses` (a subset of queued and running), oldest first."""
        return await self._runs(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs WHERE owner = %s"
            " AND status IN ('queued', 'running') AND status = ANY(%s) ORDER BY created_at",
            (owner, list(statuses)),
        )

    async def thread_runs(self, thread_id: str, owner: str) -> list[RunRecord]:
        return await self._runs(
            f"SELECT {_RUN_COLUMNS} FROM runstream_runs"
            " WHERE thread_id = %s AND owner = %s ORDER BY created_at",
            (thread_id, owner),
        )

    async def delete_run(self, run_id: str, owner: str) -> bool:
        """Delete a run that is over (its thread's checkpoints stay: they are the thread's)."""
        async with _translated(), self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM runstream_runs WHERE run_id = %s AND owner = %s"
                " AND status <> ALL(%s) RETURNING run_id",
                (run_id, owner, sorted(ACTIVE_STATUSES)),
            )
            return await cur.fetchone() is not None

    async def ask_rollback(self, run_id: str, *, wanted: bool = True) -> None:
        """Remember that the run, once cancelled, goes with what it wrote (`roll_back_run`);
        `wanted=False` forgets it again (the cancel that asked was refused)."""
        async with _translated(), self.pool.connection() as conn:
            await conn.execute(
                "UPDATE runstream_runs SET kwargs = kwargs || '{\"rollback\": true}'"
                " WHERE run_id = %s"
                if wanted
                else "UPDATE runstream_runs SET kwargs = kwargs - 'rollback' WHERE run_id = %s",
                (run_id,),
            )

    async def roll_back_run(self, run_id: str, thread_id: str) -> None:
        """Delete a cancelled run with the checkpoints it wrote, in one transaction."""
        async with _translated(), self.pool.connection() as conn, conn.transaction():
            await delete_run_checkpoints(conn, thread_id, run_id)
            await conn.execute(
                "DELETE FROM runstream_runs WHERE run_id = %s AND status = 'cancelled'",
                (run_id,),
            )

    async def delete_thread(self, thread_id: str, owner: str) -> list[str]:
        """Delete the thread, its runs and its checkpoints in one transaction; all or nothing.

        Returns the ids of the deleted runs, whose streams the caller removes from Redis once
        this has committed (they expire on their own if that fails).

        Raises:
            NotFound: unknown or not the owner's.
            Conflict: a run of the thread is queued, running or interrupted.
        """
        async with _translated(), self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT thread_id FROM runstream_threads"
                " WHERE thread_id = %s AND owner = %s FOR UPDATE",
                (thread_id, owner),
            )
            if await cur.fetchone() is None:
                raise NotFound(f"thread {thread_id} not found")
            cur = await conn.execute(
                "SELECT run_id::text AS run_id, status FROM runstream_runs WHERE thread_id = %s",
                (thread_id,),
            )
            runs = await cur.fetchall()
            if any(r["status"] in ACTIVE_STATUSES for r in runs):
                raise Conflict(f"thread {thread_id} has an active run", code="thread_busy")
            await conn.execute("DELETE FROM runstream_threads WHERE thread_id = %s", (thread_id,))
            await delete_thread_checkpoints(conn, thread_id)
        return [r["run_id"] for r in runs]
