"""Run records in Postgres (`runstream_runs`), the system of record for a run's status.

Every state change is one conditional UPDATE (`WHERE status IN ...`), so two processes racing
on one run (a cancel and a worker's claim, two resumes) cannot both win; the statuses each one
moves a run from are `run_status.TRANSITIONS`, never written here. Owner scoping lives in
the SQL: a query for another owner's run finds nothing, which the server answers as 404.
Creating a run is the submit's transaction, in `run_submit.py`.

Every other statement on `runstream_runs` is here, so that each condition is read beside the
others it must agree with.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec
from psycopg.types.json import Jsonb

from .checkpoints import delete_run_checkpoints
from .coalesce import Coalescer
from .connections import ConnectionSource
from .errors import postgres_errors
from .pg import execute, fetch_all, pipelined_transaction
from .run_status import (
    ACTIVE,
    STARTED,
    TRANSITIONS,
    WORKING,
    Decision,
    RunStatus,
    sources,
    sql_list,
)

__all__ = [
    "RUN_COLUMNS",
    "RUN_SUBMIT_LOCK",
    "TAKE_SUBMIT_LOCKS",
    "BeforeCommit",
    "RunRecord",
    "RunRecords",
]

# What every statement that returns runs selects (or RETURNs), as `RunRecord` reads it.
RUN_COLUMNS = (
    "run_id::text, thread_id::text, owner, graph, status, attempt, dispatch, input, config,"
    " metadata, multitask, resume, idempotency_key, request_hash, created_at, started_at,"
    " finished_at, error, interrupt, interrupt_id, output, last_event_id, stream_modes, kwargs,"
    " traceparent, attempt_traceparent, queued_at, claimed_at, x_trace_id"
)
# Another run of the thread (`r`) has started: a queued one waits behind it.
_THREAD_STARTED = (
    "EXISTS (SELECT 1 FROM runstream_runs o"
    f" WHERE o.thread_id = r.thread_id AND o.status IN {sql_list(STARTED)})"
)
# A queued run of a thread may go next when nothing else of its thread has started.
_MAY_GO_NEXT = f"status = '{RunStatus.QUEUED}' AND NOT {_THREAD_STARTED}"


def _from(decision: Decision) -> str:
    """The condition that lets `decision` move a run: it is in one of the decision's sources
    (`run_status.TRANSITIONS`)."""
    return f"status IN {sql_list(sources(decision))}"


def _held_by_attempt(decision: Decision) -> str:
    """The fence of a worker's transitions: only the attempt that holds the run moves it."""
    return f"run_id = %s AND attempt = %s AND {_from(decision)}"


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
    interrupt_id: str | None = None  # LangGraph's id of the question `interrupt` is
    output: dict[str, Any] | None = None
    last_event_id: str | None = None
    # Extra LangGraph stream modes the worker records (`values`, `updates`), and the LangGraph
    # API's own fields of the request; both empty for runs submitted to `/v1`.
    stream_modes: list[str] = []
    kwargs: dict[str, Any] = {}
    # Traces (stream_store/tracing.py): the submit span's `traceparent`, and that of the attempt
    # that claimed the run last; `claim_runs` returns the one before its own claim.
    traceparent: str | None = None
    attempt_traceparent: str | None = None
    queued_at: datetime | None = None  # since its current attempt (or dispatch) was queued
    claimed_at: datetime | None = None  # by its current attempt; None while queued
    # The `X-Trace-ID` of the request that submitted it (server/trace_ids.py)
    x_trace_id: str | None = None
    # Read by `claim_runs` only (None elsewhere): whether the thread had any checkpoint when
    # the attempt claimed the run. Nothing else writes a running run's thread, so with False
    # the attempt skips LangGraph's read of it at the graph's start (stream_store/checkpoints.py).
    thread_has_checkpoints: bool | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunRecord:
        """The record of a row selected as `RUN_COLUMNS`."""
        return msgspec.convert(row, cls, from_attributes=False)


# Runs inside a transition's transaction, its row locked, before the commit: the Redis write
# that announces the transition, so that a refusal (Redis at `maxmemory`) rolls it back.
BeforeCommit = Callable[[RunRecord], Awaitable[None]]

# The advisory-lock class (first of two int4 keys, the run id's `hashtext` the second) that a
# run's submit holds until its commit. The submit queues the run's job before it commits (issue
# 36: the worker's wake-up and read overlap the commit), and a claim takes the lock first: one
# that comes before the commit waits for it rather than finding no run.
RUN_SUBMIT_LOCK = 0x636C616D  # "clam"
# Takes the submit locks of the runs whose ids are its one parameter (a list), in one order
# for any caller.
TAKE_SUBMIT_LOCKS = (
    f"SELECT pg_advisory_xact_lock({RUN_SUBMIT_LOCK}, hashtext(id::text))"
    " FROM (SELECT DISTINCT unnest(%s::uuid[]) AS id ORDER BY 1) ids"
)


# The claim (`RunRecords.claim_runs`): queued -> running. The CTE reads each row as it was,
# so the returned `attempt_traceparent` is the previous attempt's, which the new attempt's span
# links to; `thread_has_checkpoints` says whether the thread has a checkpoint yet (LangGraph's
# `checkpoints` table), in the same round trip: a first message need not be looked up again
# when the graph starts.
_CLAIMED = (
    f"{RUN_COLUMNS.replace('attempt_traceparent', 'before_traceparent AS attempt_traceparent')},"
    " EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = runstream_runs.thread_id::text"
    " AND c.checkpoint_ns = '') AS thread_has_checkpoints"
)
_CLAIM_SET = (
    f"status = '{RunStatus.RUNNING}', claimed_at = clock_timestamp(),"
    " started_at = coalesce(started_at, clock_timestamp())"
)
# One run, the claim of every run but a burst's: on scalar parameters Postgres keeps the
# prepared statement's generic plan (a primary-key lookup), where the array form is planned
# again at every execution (0.5 ms of a claim's 2 ms on a quiet machine, 2026-12-07).
_CLAIM_ONE = (
    "WITH before AS (SELECT attempt_traceparent AS before_traceparent FROM runstream_runs"
    "  WHERE run_id = %s)"
    f" UPDATE runstream_runs SET {_CLAIM_SET},"
    " attempt_traceparent = coalesce(%s, attempt_traceparent)"
    f" FROM before WHERE run_id = %s AND {_from(Decision.CLAIM)} RETURNING {_CLAIMED}"
)
# Several runs (a burst's claims, sent together): the ids and traceparents as two arrays.
_CLAIM_MANY = (
    "WITH claim AS (SELECT * FROM unnest(%s::uuid[], %s::text[])"
    "  AS c(claim_id, claim_traceparent)),"
    " before AS (SELECT run_id AS before_id, attempt_traceparent AS before_traceparent"
    "  FROM runstream_runs WHERE run_id IN (SELECT claim_id FROM claim))"
    f" UPDATE runstream_runs SET {_CLAIM_SET},"
    " attempt_traceparent = coalesce(claim_traceparent, attempt_traceparent)"
    " FROM claim, before"
    f" WHERE run_id = claim_id AND before_id = run_id AND {_from(Decision.CLAIM)}"
    f" RETURNING {_CLAIMED}"
)


class RunRecords:
    """Queries and status changes of runs; one instance per process, over its connection pool."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool
        self._claims: Coalescer[tuple[str, str | None], RunRecord | None] = Coalescer(
            self.claim_runs, name="the run records"
        )

    async def aclose(self) -> None:
        """Stop claiming (process shutdown); claims still waiting get StoreUnavailable."""
        await self._claims.aclose()

    async def _runs(self, query: str, params: Sequence[Any] = ()) -> list[RunRecord]:
        return [RunRecord.from_row(row) for row in await fetch_all(self.pool, query, params)]

    async def _select_runs(self, where: str, params: Sequence[Any] = ()) -> list[RunRecord]:
        """`SELECT` the runs `WHERE <where>` (the table is aliased `r`)."""
        return await self._runs(f"SELECT {RUN_COLUMNS} FROM runstream_runs r WHERE {where}", params)

    async def _one_run(
        self, query: str, params: Sequence[Any], *, before_commit: BeforeCommit | None = None
    ) -> RunRecord | None:
        """The one run `query` returns, if any; `before_commit` gets it inside the transaction."""
        if before_commit is None:
            found = await self._runs(query, params)
            return found[0] if found else None
        async with (
            postgres_errors(),
            self.pool.connection() as conn,
            pipelined_transaction(conn),  # BEGIN with the statement
        ):
            cur = await conn.execute(query, params)
            row = await cur.fetchone()
            run = RunRecord.from_row(row) if row else None
            if run is not None:
                await before_commit(run)
        return run

    async def _update_run(
        self,
        assignments: str,
        where: str,
        params: Sequence[Any],
        *,
        before_commit: BeforeCommit | None = None,
    ) -> RunRecord | None:
        """`UPDATE ... SET <assignments> WHERE <where>`: the run as it is after, or None when
        `where` no longer holds (another process won)."""
        return await self._one_run(
            f"UPDATE runstream_runs SET {assignments} WHERE {where} RETURNING {RUN_COLUMNS}",
            params,
            before_commit=before_commit,
        )

    # -- reads -------------------------------------------------------------------------------

    async def get_run(self, run_id: str, owner: str | None = None) -> RunRecord | None:
        """The run, or None when unknown or (with `owner`) not that owner's."""
        if owner is None:
            found = await self._select_runs("run_id = %s", (run_id,))
        else:
            found = await self._select_runs("run_id = %s AND owner = %s", (run_id, owner))
        return found[0] if found else None

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """Those of the runs that exist, in one statement, whoever owns them."""
        return await self._select_runs("run_id = ANY(%s::uuid[])", (list(run_ids),))

    async def thread_runs(self, thread_id: str, owner: str) -> list[RunRecord]:
        return await self._select_runs(
            "thread_id = %s AND owner = %s ORDER BY created_at", (thread_id, owner)
        )

    async def working_runs(self, owner: str, statuses: Sequence[str]) -> list[RunRecord]:
        """The owner's runs in `statuses` (a subset of queued and running), oldest first."""
        return await self._select_runs(
            f"owner = %s AND status IN {sql_list(WORKING)} AND status = ANY(%s)"
            " ORDER BY created_at",
            (owner, list(statuses)),
        )

    async def next_queued(self, thread_id: str) -> RunRecord | None:
        """The oldest queued run of the thread, if nothing else on the thread is in flight."""
        found = await self._select_runs(
            f"thread_id = %s AND {_MAY_GO_NEXT} ORDER BY created_at LIMIT 1", (thread_id,)
        )
        return found[0] if found else None

    # -- what the reaper looks for -------------------------------------------------------------

    async def running_claimed_before(self, age_s: float) -> list[RunRecord]:
        """Runs running for at least `age_s` since their claim, oldest claim first: the reaper
        checks their leases, and `runstream status` calls those without one stuck."""
        return await self._select_runs(
            f"status = '{RunStatus.RUNNING}'"
            " AND claimed_at < clock_timestamp() - make_interval(secs => %s) ORDER BY claimed_at",
            (age_s,),
        )

    async def queued_heads(self, *, after: str | None, limit: int) -> list[RunRecord]:
        """Per thread, the queued run that may go next (nothing else of its thread in flight):
        a page of at most `limit`, of the threads after `after` by id (a keyset cursor)."""
        after_thread = "" if after is None else " AND thread_id > %s"
        return await self._runs(
            f"SELECT DISTINCT ON (thread_id) {RUN_COLUMNS} FROM runstream_runs r"
            f" WHERE {_MAY_GO_NEXT}{after_thread} ORDER BY thread_id, created_at LIMIT %s",
            ([] if after is None else [after]) + [limit],
        )

    async def interrupted_runs(self, *, after: str | None, limit: int) -> list[RunRecord]:
        """A page of at most `limit` interrupted runs, of the run ids after `after`."""
        after_run = "" if after is None else " AND run_id > %s"
        return await self._select_runs(
            f"status = '{RunStatus.INTERRUPTED}'{after_run} ORDER BY run_id LIMIT %s",
            ([] if after is None else [after]) + [limit],
        )

    async def unsettled(self, age_s: float) -> list[RunRecord]:
        """Runs whose outcome Postgres holds but whose stream was never told (writer died)."""
        return await self._select_runs(
            "last_event_id IS NULL AND settled_at IS NOT NULL"
            " AND settled_at < clock_timestamp() - make_interval(secs => %s)",
            (age_s,),
        )

    # -- what an operator looks at (`runstream status`) ----------------------------------------

    async def active_counts(self) -> dict[str, int]:
        """How many runs are queued (`waiting_on_thread`: of those, behind another run of their
        thread that has started), running and interrupted."""
        found = await fetch_all(
            self.pool,
            f"SELECT count(*) FILTER (WHERE status = '{RunStatus.QUEUED}') AS queued,"
            f" count(*) FILTER (WHERE status = '{RunStatus.QUEUED}' AND {_THREAD_STARTED})"
            "   AS waiting_on_thread,"
            f" count(*) FILTER (WHERE status = '{RunStatus.RUNNING}') AS running,"
            f" count(*) FILTER (WHERE status = '{RunStatus.INTERRUPTED}') AS interrupted"
            f" FROM runstream_runs r WHERE status IN {sql_list(ACTIVE)}",
        )
        return dict(found[0])

    async def oldest_queued(self) -> RunRecord | None:
        """The run queued longest ago (since its current attempt or dispatch was queued)."""
        found = await self._select_runs(
            f"status = '{RunStatus.QUEUED}' ORDER BY queued_at, run_id LIMIT 1"
        )
        return found[0] if found else None

    # -- status changes ----------------------------------------------------------------------

    async def claim_run(
        self, run_id: str, attempt_traceparent: str | None = None
    ) -> RunRecord | None:
        """queued -> running, for the worker that got the job; None if someone else won.

        Records the claiming attempt's `attempt_traceparent` and returns the previous one, and
        whether the thread has a checkpoint yet (`claim_runs`). The claims of runs starting
        together (a burst) go as one statement: those arriving while one is in flight are
        sent together in the next.
        """
        return await self._claims.submit((run_id, attempt_traceparent))

    async def claim_runs(self, claims: Sequence[tuple[str, str | None]]) -> list[RunRecord | None]:
        """Each claim's (run id, attempt traceparent) run moved queued -> running, or None if
        someone else won it, in one statement (`_CLAIM_ONE`, `_CLAIM_MANY`); a run claimed
        twice goes to its first claim."""
        first: dict[str, str | None] = {}
        for run_id, attempt_traceparent in claims:
            first.setdefault(run_id, attempt_traceparent)
        params: tuple[Any, ...]
        if len(first) == 1:
            [(run_id, traceparent)] = first.items()
            update, params = _CLAIM_ONE, (run_id, traceparent, run_id)
        else:
            update, params = _CLAIM_MANY, (list(first), list(first.values()))
        # One transaction sent as one round trip (nothing is read before the commit): the
        # runs' submit locks first, so that the update's snapshot, taken once they are held,
        # sees a submit that just committed.
        async with postgres_errors(), self.pool.connection() as conn:
            async with pipelined_transaction(conn):
                await conn.execute(TAKE_SUBMIT_LOCKS, (list(first),))
                cur = await conn.execute(update, params)
            claimed = [RunRecord.from_row(row) for row in await cur.fetchall()]
        won = {run.run_id: run for run in claimed}
        return [won.pop(run_id, None) for run_id, _ in claims]

    async def redispatch_if_stuck(
        self, run_id: str, dispatch: int, age_s: float
    ) -> RunRecord | None:
        """A new job id for a run queued longer than `age_s` (its job may be stuck in the queue).

        A picked job stays "in progress" for the whole job timeout even if its worker
        died before claiming the run; a fresh dispatch number gives the run a fresh job.
        """
        return await self._update_run(
            "dispatch = dispatch + 1, queued_at = clock_timestamp()",
            f"run_id = %s AND dispatch = %s AND {_from(Decision.REDISPATCH)}"
            " AND queued_at < clock_timestamp() - make_interval(secs => %s)",
            (run_id, dispatch, age_s),
        )

    async def requeue_attempt(self, run_id: str, attempt: int) -> RunRecord | None:
        """running as `attempt` -> queued as `attempt + 1`: the attempt died or handed back."""
        return await self._update_run(
            f"status = '{RunStatus.QUEUED}', attempt = attempt + 1, dispatch = dispatch + 1,"
            " claimed_at = NULL, queued_at = clock_timestamp()",
            _held_by_attempt(Decision.REQUEUE),
            (run_id, attempt),
        )

    async def fail_attempts_exhausted(
        self, run_id: str, attempt: int, error: dict[str, Any]
    ) -> RunRecord | None:
        """running as `attempt` -> failed as `attempt + 1`: no attempts left."""
        return await self._update_run(
            f"status = '{RunStatus.FAILED}', attempt = attempt + 1,"
            " finished_at = clock_timestamp(), settled_at = clock_timestamp(), error = %s",
            _held_by_attempt(Decision.EXHAUST),
            (Jsonb(error), run_id, attempt),
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
        if status not in TRANSITIONS[Decision.FINISH].targets:
            raise ValueError(f"a run does not finish {status}")
        return await self._update_run(
            "status = %s, finished_at = clock_timestamp(), settled_at = clock_timestamp(),"
            " output = %s, error = %s, resume = NULL",
            _held_by_attempt(Decision.FINISH),
            (
                status,
                Jsonb(output) if output else None,
                Jsonb(error) if error else None,
                run_id,
                attempt,
            ),
        )

    async def interrupt_run(
        self, run_id: str, attempt: int, interrupt: Any, interrupt_id: str | None = None
    ) -> RunRecord | None:
        """running -> interrupted: the graph is waiting for `/resume`."""
        return await self._update_run(
            f"status = '{RunStatus.INTERRUPTED}', interrupt = %s, interrupt_id = %s,"
            " resume = NULL, settled_at = clock_timestamp(), last_event_id = NULL",
            _held_by_attempt(Decision.INTERRUPT),
            (Jsonb(interrupt), interrupt_id, run_id, attempt),
        )

    async def cancel_idle_run(
        self, run_id: str, owner: str, *, before_commit: BeforeCommit | None = None
    ) -> RunRecord | None:
        """queued/interrupted -> cancelled directly: no worker is executing it.

        `before_commit` gets the cancelled run while its row is locked; raising rolls back.
        """
        return await self._update_run(
            f"status = '{RunStatus.CANCELLED}', finished_at = clock_timestamp(),"
            " settled_at = clock_timestamp()",
            f"run_id = %s AND owner = %s AND {_from(Decision.CANCEL)}",
            (run_id, owner),
            before_commit=before_commit,
        )

    async def resume_run(
        self, run_id: str, owner: str, value: Any, *, before_commit: BeforeCommit | None = None
    ) -> RunRecord | None:
        """interrupted -> queued with the resume value, as a new dispatch of the same run.

        The value gets an id of its own, which the checkpoints saved after it carry, and the id
        of the question it answers (`interrupt_id`, when the graph gave one): a retried attempt
        then knows whether the graph already took the answer (runner/graph_input.py).
        `before_commit` gets the resumed run while its row is locked; raising rolls back.
        """
        resume = {"value": value, "id": uuid.uuid4().hex}
        return await self._update_run(
            f"status = '{RunStatus.QUEUED}',"
            " resume = %s || jsonb_strip_nulls(jsonb_build_object('interrupt_id', interrupt_id)),"
            " interrupt = NULL, interrupt_id = NULL, dispatch = dispatch + 1,"
            " queued_at = clock_timestamp(), settled_at = NULL, last_event_id = NULL",
            f"run_id = %s AND owner = %s AND {_from(Decision.RESUME)}",
            (Jsonb(resume), run_id, owner),
            before_commit=before_commit,
        )

    # -- bookkeeping -------------------------------------------------------------------------

    async def set_attempt(self, run_id: str, attempt: int) -> None:
        """Align an interrupted run's attempt with the Redis record after a repair."""
        await execute(
            self.pool,
            "UPDATE runstream_runs SET attempt = %s WHERE run_id = %s AND attempt < %s",
            (attempt, run_id, attempt),
        )

    async def set_last_event_id(self, run_id: str, event_id: str) -> None:
        await execute(
            self.pool,
            "UPDATE runstream_runs SET last_event_id = %s WHERE run_id = %s",
            (event_id, run_id),
        )

    async def ask_rollback(self, run_id: str, *, wanted: bool = True) -> None:
        """Remember that the run, once cancelled, goes with what it wrote (`roll_back_run`);
        `wanted=False` forgets it again (the cancel that asked was refused)."""
        await self._flag(run_id, "rollback", wanted)

    async def note_breakpoint(self, run_id: str) -> None:
        """Remember that the run stopped at a breakpoint (`interrupt_before`/`_after`): it
        succeeds, and LangGraph shows its thread `interrupted` until the next run."""
        await self._flag(run_id, "breakpoint", True)

    async def _flag(self, run_id: str, name: str, on: bool) -> None:
        """A note of runstream's own in the run's kwargs (`true`, or absent)."""
        await execute(
            self.pool,
            "UPDATE runstream_runs SET kwargs = kwargs || jsonb_build_object(%s::text, true)"
            " WHERE run_id = %s"
            if on
            else "UPDATE runstream_runs SET kwargs = kwargs - %s::text WHERE run_id = %s",
            (name, run_id),
        )

    # -- deletes -----------------------------------------------------------------------------

    async def delete_run(self, run_id: str, owner: str) -> bool:
        """Delete a run that is over (its thread's checkpoints stay: they are the thread's)."""
        deleted = await fetch_all(
            self.pool,
            "DELETE FROM runstream_runs WHERE run_id = %s AND owner = %s"
            f" AND status NOT IN {sql_list(ACTIVE)} RETURNING run_id",
            (run_id, owner),
        )
        return bool(deleted)

    async def roll_back_run(self, run_id: str, thread_id: str) -> None:
        """Delete a cancelled run with the checkpoints it wrote, in one transaction."""
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            await delete_run_checkpoints(conn, thread_id, run_id)
            await conn.execute(
                "DELETE FROM runstream_runs WHERE run_id = %s"
                f" AND status = '{RunStatus.CANCELLED}'",
                (run_id,),
            )
