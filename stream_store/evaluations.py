"""Evaluations in Postgres (`runstream_evaluations`): the grades a graph records of its own work.

A row is written once per run and key, whatever the retries (`INSERT ... ON CONFLICT DO
NOTHING` on the primary key, in the spirit of the write-once ledger, `runner/tools.py`): a later
attempt recording the same key changes nothing. The insert is fenced like every write of an
attempt: it lands only while that attempt holds the run (`running` as its attempt number), so
an attempt that lost its lease, or whose run was deleted, writes nothing. Rows go with their
run (a foreign key, `ON DELETE CASCADE`), and so with its thread, whichever way either is
deleted (the APIs' deletes, a cancelled run's rollback, the threads' retention sweep).

Each write also adds to the totals of its graph and kind (`runstream_evaluation_totals`), in the
same transaction, which a server's /metrics reads (stream_store/deployment_metrics.py): a count
read there at each scrape would scan every evaluation held. Totals only grow, as counters do;
deleting evaluations takes nothing from them.

Owner scoping lives in the SQL, as in `run_records.py`: another owner's run reads as empty, and
the server answers 404 before it asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from .connections import PgPool
from .errors import postgres_errors
from .limits import EVALUATION_KINDS_PER_GRAPH_IN_METRICS, EVALUATIONS_MAX_PER_RUN
from .pg import fetch_all
from .run_status import RunStatus

__all__ = [
    "OTHER_KIND",
    "SCORE_BUCKETS",
    "EvaluationRecord",
    "Evaluations",
    "NewEvaluation",
    "Recorded",
]

# The upper bounds of the totals' score buckets (a Prometheus histogram's `le`).
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# The totals' kind of a graph's evaluations past its first EVALUATION_KINDS_PER_GRAPH_IN_METRICS
# kinds (two first writes racing for the last place may both take one).
OTHER_KIND = "other"

# What `Evaluations.record` did: wrote the row; found the key recorded already (by this attempt
# or an earlier one); wrote nothing because the attempt no longer holds its run; or wrote
# nothing because the run holds `EVALUATIONS_MAX_PER_RUN` evaluations already.
Recorded = Literal["recorded", "replayed", "fenced", "full"]

# Read with the run's answer (`r`, its output message), which the evaluations grade.
_COLUMNS = (
    "e.run_id::text, e.key, e.thread_id::text, e.owner, e.graph, e.kind, e.score, e.passed,"
    " e.detail, e.attempt, e.trace_id, e.x_trace_id, e.created_at,"
    " r.output->>'id' AS message_id"
)


@dataclass(frozen=True)
class NewEvaluation:
    """One evaluation to record, already checked (runner/evaluations.py checks its inputs)."""

    run_id: str
    key: str
    thread_id: str
    owner: str
    graph: str
    attempt: int
    trace_id: str | None
    kind: str
    score: float
    passed: bool | None
    detail: dict[str, Any] | None
    x_trace_id: str | None = None  # the run's `X-Trace-ID` (server/trace_ids.py)


class EvaluationRecord(msgspec.Struct, kw_only=True):
    """One row of `runstream_evaluations`."""

    run_id: str
    key: str
    thread_id: str
    owner: str
    graph: str
    kind: str
    score: float
    passed: bool | None = None
    detail: dict[str, Any] | None = None
    attempt: int
    trace_id: str | None = None
    x_trace_id: str | None = None
    created_at: datetime
    message_id: str | None = None  # the run's answer, once it succeeded with one


class Evaluations:
    """Writes and reads of evaluations; one instance per process, over its connection pool."""

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    async def record(self, new: NewEvaluation) -> Recorded:
        """Write `new` unless its run already has its key; what happened (see `Recorded`).

        Nothing is written when the key is recorded already (an earlier attempt's row stands,
        whatever its values), when `new.attempt` no longer holds the run, or when the run holds
        `EVALUATIONS_MAX_PER_RUN` evaluations.
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            # The run's row, locked as the fence reads it: a delete of the run (or of its
            # thread) waits for this insert, or this insert finds no run.
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM runstream_evaluations e WHERE e.run_id = r.run_id)"
                " AS held FROM runstream_runs r"
                f" WHERE r.run_id = %s AND r.attempt = %s AND r.status = '{RunStatus.RUNNING}'"
                " FOR SHARE",
                (new.run_id, new.attempt),
            )
            fence = await cur.fetchone()
            if fence is None:
                return "fenced"
            if fence["held"] >= EVALUATIONS_MAX_PER_RUN:
                cur = await conn.execute(
                    "SELECT 1 FROM runstream_evaluations WHERE run_id = %s AND key = %s",
                    (new.run_id, new.key),
                )
                return "replayed" if await cur.fetchone() is not None else "full"
            cur = await conn.execute(
                "INSERT INTO runstream_evaluations (run_id, key, thread_id, owner, graph, kind,"
                " score, passed, detail, attempt, trace_id, x_trace_id)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (run_id, key) DO NOTHING RETURNING run_id",
                (
                    new.run_id,
                    new.key,
                    new.thread_id,
                    new.owner,
                    new.graph,
                    new.kind,
                    new.score,
                    new.passed,
                    None if new.detail is None else Jsonb(new.detail),
                    new.attempt,
                    new.trace_id,
                    new.x_trace_id,
                ),
            )
            if await cur.fetchone() is None:
                return "replayed"
            await _add_to_totals(conn, new)
        return "recorded"

    async def for_run(self, run_id: str, owner: str) -> list[EvaluationRecord]:
        """The run's evaluations, oldest first (none for another owner's run)."""
        return await self._select("e.run_id = %s AND e.owner = %s", (run_id, owner))

    async def for_thread(self, thread_id: str, owner: str) -> list[EvaluationRecord]:
        """The evaluations of the thread's runs, oldest first (none for another owner's)."""
        return await self._select("e.thread_id = %s AND e.owner = %s", (thread_id, owner))

    async def _select(self, where: str, params: tuple[str, str]) -> list[EvaluationRecord]:
        rows = await fetch_all(
            self.pool,
            f"SELECT {_COLUMNS} FROM runstream_evaluations e"
            f" JOIN runstream_runs r ON r.run_id = e.run_id WHERE {where}"
            " ORDER BY e.created_at, e.run_id, e.key",
            params,
        )
        return [msgspec.convert(row, EvaluationRecord, from_attributes=False) for row in rows]


async def _add_to_totals(conn: AsyncConnection[DictRow], new: NewEvaluation) -> None:
    """Count `new` in the totals of its graph and kind (or `OTHER_KIND`)."""
    cur = await conn.execute(
        "SELECT count(*) AS kinds, coalesce(bool_or(kind = %s), false) AS known"
        " FROM runstream_evaluation_totals WHERE graph = %s",
        (new.kind, new.graph),
    )
    seen = await cur.fetchone()
    assert seen is not None
    counted_apart = seen["known"] or seen["kinds"] < EVALUATION_KINDS_PER_GRAPH_IN_METRICS
    await conn.execute(
        "INSERT INTO runstream_evaluation_totals AS t"
        " (graph, kind, evaluations, passed, failed, score_sum, at_most)"
        " VALUES (%s, %s, 1, %s, %s, %s, %s::bigint[])"
        " ON CONFLICT (graph, kind) DO UPDATE SET evaluations = t.evaluations + 1,"
        " passed = t.passed + excluded.passed, failed = t.failed + excluded.failed,"
        " score_sum = t.score_sum + excluded.score_sum,"
        " at_most = ARRAY(SELECT a + b FROM unnest(t.at_most, excluded.at_most)"
        "   WITH ORDINALITY AS u(a, b, i) ORDER BY i)",
        (
            new.graph,
            new.kind if counted_apart else OTHER_KIND,
            int(new.passed is True),
            int(new.passed is False),
            new.score,
            [int(new.score <= bound) for bound in SCORE_BUCKETS],
        ),
    )
