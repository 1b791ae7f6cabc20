"""The one table of moves between a run's statuses (the statuses and their named sets are
`wire.run_status`'s).

Every rule about a run's status is written here once: the SQL conditions of
`run_records.py` and `run_submit.py` and the arguments of the Lua scripts are built from these
names, never typed out again. `stream_store.lifecycle` sequences the moves (Postgres first,
then the events); `TRANSITIONS` says which moves exist, and `tests/test_run_transitions.py`
walks every pair of statuses against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple

# the statuses and their named sets are the wire's (every side says them); the moves are here
from wire.run_status import ACTIVE, IDLE, STARTED, TERMINAL, WORKING, RunStatus

__all__ = [
    "ACTIVE",
    "IDLE",
    "STARTED",
    "TERMINAL",
    "TRANSITIONS",
    "WORKING",
    "Decision",
    "RunStatus",
    "Transition",
    "sources",
    "sql_list",
]


class Decision(StrEnum):
    """What moves a run from one status to another; each is executed in one place."""

    CLAIM = "claim"  # a worker got the run's job (RunRecords.claim_run)
    REDISPATCH = "redispatch"  # its job looks stuck in arq: a new one (redispatch_if_stuck)
    REQUEUE = "requeue"  # the attempt died or handed back: the next one (requeue_attempt)
    EXHAUST = "exhaust"  # the attempt died and none are left (fail_attempts_exhausted)
    FINISH = "finish"  # the attempt ended the graph, or stopped on a cancel (finish_run)
    INTERRUPT = "interrupt"  # the graph called interrupt() (interrupt_run)
    CANCEL = "cancel"  # a cancel of a run no worker holds (cancel_idle_run)
    RESUME = "resume"  # the answer to the interrupt came (resume_run)
    SUPERSEDE = "supersede"  # a LangGraph run or state update ended the interrupted run
    # (run_submit._end_interrupted)


class Transition(NamedTuple):
    """The statuses `decision` moves a run from, and those it may move it to."""

    sources: frozenset[RunStatus]
    targets: frozenset[RunStatus]


def _move(sources: Iterable[RunStatus], *targets: RunStatus) -> Transition:
    return Transition(frozenset(sources), frozenset(targets))


# Every move of a run's status there is; anything not here is refused by the condition its
# statement is built with (`sources`). A queued-to-queued redispatch keeps the status and
# changes the job.
TRANSITIONS: dict[Decision, Transition] = {
    Decision.CLAIM: _move({RunStatus.QUEUED}, RunStatus.RUNNING),
    Decision.REDISPATCH: _move({RunStatus.QUEUED}, RunStatus.QUEUED),
    Decision.REQUEUE: _move({RunStatus.RUNNING}, RunStatus.QUEUED),
    Decision.EXHAUST: _move({RunStatus.RUNNING}, RunStatus.FAILED),
    Decision.FINISH: _move({RunStatus.RUNNING}, *TERMINAL),
    Decision.INTERRUPT: _move({RunStatus.RUNNING}, RunStatus.INTERRUPTED),
    Decision.CANCEL: _move(IDLE, RunStatus.CANCELLED),
    Decision.RESUME: _move({RunStatus.INTERRUPTED}, RunStatus.QUEUED),
    Decision.SUPERSEDE: _move({RunStatus.INTERRUPTED}, RunStatus.SUCCEEDED),
}


def sources(decision: Decision) -> frozenset[RunStatus]:
    """The statuses `decision` may move a run from."""
    return TRANSITIONS[decision].sources


def sql_list(statuses: Iterable[RunStatus]) -> str:
    """`statuses` as an SQL list, `('queued', 'running')`, for `status IN <list>`.

    Written into the statement rather than passed as a parameter: the partial indexes on
    `runstream_runs.status` (migrations.py) serve only a query whose condition names their
    statuses. Safe to format in: the values are this module's own members.
    """
    return "(" + ", ".join(f"'{RunStatus(status).value}'" for status in sorted(statuses)) + ")"
