"""A run's statuses and the named sets of them, as every side of runstream says them: the
storage decides with them (`stream_store.run_status` holds the moves between them), the server
maps them to LangGraph's words, and a client can ask whether a status it polled is over.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIVE", "IDLE", "STARTED", "TERMINAL", "WORKING", "RunStatus"]


class RunStatus(StrEnum):
    """Where a run is in its life: the moves between statuses are `stream_store.run_status`'s,
    and `stream_store.lifecycle` makes every move.

    Members compare equal to their names as strings, which is what the wire, the database and
    the live record carry. A run is recorded `queued`.
    """

    QUEUED = "queued"  # recorded, waiting for a worker (or for the thread's active run)
    RUNNING = "running"  # an attempt holds the lease and executes the graph
    INTERRUPTED = "interrupted"  # the graph called interrupt(); waiting for a resume
    SUCCEEDED = "succeeded"  # terminal: the graph ran to its end
    FAILED = "failed"  # terminal: the graph raised, or no attempts were left
    CANCELLED = "cancelled"  # terminal: stopped on request


# Over: nothing moves the run again, its stream has its terminal event.
TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
# Not over: the run holds its thread (no other run starts, the thread can't be deleted) and
# recovery rebuilds its stream after Redis lost it.
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.INTERRUPTED})
# Has work to do without anyone's answer: makes its thread `busy`, counts against the owner's
# active-run limit (RUNSTREAM_MAX_ACTIVE_RUNS) and keeps its stream from expiring.
WORKING = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})
# Has the thread's turn: a queued run of the same thread waits behind it.
STARTED = frozenset({RunStatus.RUNNING, RunStatus.INTERRUPTED})
# Not executing, not over: no worker holds it, so a cancel ends it at once.
IDLE = frozenset({RunStatus.QUEUED, RunStatus.INTERRUPTED})
