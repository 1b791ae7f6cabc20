"""A run's status moves only as `run_status.TRANSITIONS` says, and by every move it lists.

For every pair of statuses (from, to) and every decision that moves a run to `to`, a run put
in `from` in Postgres and given that decision through the method that executes it
(`RunRecords`, or `RunSubmitter.end_interrupted` for a superseded interrupt) changes exactly
when the table has the move, and then to `to`; otherwise its row is left as it was.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from stream_store.connections import PgPool, open_pg_pool
from stream_store.run_records import RunRecord, RunRecords
from stream_store.run_status import (
    ACTIVE,
    IDLE,
    STARTED,
    TERMINAL,
    TRANSITIONS,
    WORKING,
    Decision,
    RunStatus,
    sources,
)
from stream_store.run_submit import RunSubmitter
from stream_store.settings import Settings

# One pool and event loop for the module: each case records a thread and a run of its own.
in_module_loop = pytest.mark.asyncio(loop_scope="module")

QUEUED, RUNNING, INTERRUPTED = RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.INTERRUPTED
SUCCEEDED, FAILED, CANCELLED = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED

# The moves runstream makes, written out: a change to `TRANSITIONS` changes this on purpose.
MOVES = {
    (Decision.CLAIM, QUEUED, RUNNING),
    (Decision.REDISPATCH, QUEUED, QUEUED),
    (Decision.REQUEUE, RUNNING, QUEUED),
    (Decision.EXHAUST, RUNNING, FAILED),
    (Decision.FINISH, RUNNING, SUCCEEDED),
    (Decision.FINISH, RUNNING, FAILED),
    (Decision.FINISH, RUNNING, CANCELLED),
    (Decision.INTERRUPT, RUNNING, INTERRUPTED),
    (Decision.CANCEL, QUEUED, CANCELLED),
    (Decision.CANCEL, INTERRUPTED, CANCELLED),
    (Decision.RESUME, INTERRUPTED, QUEUED),
    (Decision.SUPERSEDE, INTERRUPTED, SUCCEEDED),
}


class Decisions:
    """Each decision applied to a run through the one method that executes it."""

    def __init__(self, pool: PgPool) -> None:
        self.records = RunRecords(pool)
        self.submitter = RunSubmitter(pool)

    async def apply(self, decision: Decision, run: RunRecord, to: RunStatus) -> bool:
        """True when the run moved."""
        records, run_id, attempt = self.records, run.run_id, run.attempt
        moved: RunRecord | list[RunRecord] | None
        match decision:
            case Decision.CLAIM:
                moved = await records.claim_run(run_id)
            case Decision.REDISPATCH:
                moved = await records.redispatch_if_stuck(run_id, run.dispatch, 0)
            case Decision.REQUEUE:
                moved = await records.requeue_attempt(run_id, attempt)
            case Decision.EXHAUST:
                moved = await records.fail_attempts_exhausted(run_id, attempt, {"code": "x"})
            case Decision.FINISH:
                moved = await records.finish_run(run_id, attempt, to)
            case Decision.INTERRUPT:
                moved = await records.interrupt_run(run_id, attempt, {"ask": "?"})
            case Decision.CANCEL:
                moved = await records.cancel_idle_run(run_id, run.owner)
            case Decision.RESUME:
                moved = await records.resume_run(run_id, run.owner, "yes")
            case Decision.SUPERSEDE:
                moved = await self.submitter.end_interrupted(run.thread_id)
        return bool(moved)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(module_settings: Settings) -> AsyncIterator[PgPool]:
    opened = await open_pg_pool(module_settings, max_size=2)
    yield opened
    await opened.close()


async def _run_in(pool: PgPool, status: RunStatus) -> RunRecord:
    """A run of a thread of its own, recorded in `status` as its attempt 1 (claimed and queued
    a minute ago, so that no age condition stands in the way)."""
    thread_id, run_id, owner = str(uuid.uuid4()), str(uuid.uuid4()), f"owner-{uuid.uuid4()}"
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO runstream_threads (thread_id, owner) VALUES (%s, %s)", (thread_id, owner)
        )
        await conn.execute(
            "INSERT INTO runstream_runs (run_id, thread_id, owner, graph, status, input,"
            " queued_at, claimed_at) VALUES (%s, %s, %s, 'chat', %s, '{}',"
            " clock_timestamp() - interval '1 minute', clock_timestamp() - interval '1 minute')",
            (run_id, thread_id, owner, status),
        )
    run = await RunRecords(pool).get_run(run_id)
    assert run is not None
    return run


def test_the_table_is_the_moves_runstream_makes() -> None:
    table = {
        (decision, source, target)
        for decision, move in TRANSITIONS.items()
        for source in move.sources
        for target in move.targets
    }
    assert table == MOVES
    assert set(TRANSITIONS) == set(Decision)


def test_the_named_sets() -> None:
    assert {SUCCEEDED, FAILED, CANCELLED} == TERMINAL
    assert {QUEUED, RUNNING, INTERRUPTED} == ACTIVE
    assert set(RunStatus) == TERMINAL | ACTIVE and not TERMINAL & ACTIVE
    assert {QUEUED, RUNNING} == WORKING
    assert {RUNNING, INTERRUPTED} == STARTED
    assert {QUEUED, INTERRUPTED} == IDLE
    assert all(sources(decision) <= ACTIVE for decision in Decision)  # nothing leaves an end


@in_module_loop
@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(RunStatus, RunStatus)), ids=lambda s: str(s)
)
async def test_a_decision_moves_a_run_exactly_when_the_table_has_the_move(
    pool: PgPool, source: RunStatus, target: RunStatus
) -> None:
    decisions = Decisions(pool)
    aimed = [d for d in Decision if target in TRANSITIONS[d].targets]
    assert aimed, f"no decision moves a run to {target}"
    for decision in aimed:
        run = await _run_in(pool, source)
        moved = await decisions.apply(decision, run, target)
        after = await decisions.records.get_run(run.run_id)
        assert after is not None
        allowed = source in sources(decision)
        assert moved == allowed, f"{decision}: {source} -> {target}"
        assert after.status == (target if allowed else source), f"{decision}: {source}"
        if not allowed:
            assert (after.attempt, after.dispatch) == (run.attempt, run.dispatch)


@in_module_loop
async def test_finish_refuses_a_status_that_does_not_end_a_run(pool: PgPool) -> None:
    run = await _run_in(pool, RunStatus.RUNNING)
    for status in ACTIVE:
        with pytest.raises(ValueError):
            await RunRecords(pool).finish_run(run.run_id, run.attempt, status)
    after = await RunRecords(pool).get_run(run.run_id)
    assert after is not None and after.status == RunStatus.RUNNING
