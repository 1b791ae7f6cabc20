"""The worker's state: the services, and a table of the attempts this process is running.

The job loop's `ctx` gets the settings and the wake event (`runner/job_loop.py`), and
`ctx["state"]` from `worker.startup`; jobs read only the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass, field
from typing import Any

from stream_store.leases import LeaseKeeper
from stream_store.metrics import WorkerMetrics
from stream_store.services import Services

from .graph_registry import GraphRegistry

__all__ = ["Attempt", "AttemptPhase", "WorkerState"]


class AttemptPhase(enum.Enum):
    """Where a running attempt is; it decides what the attempt does when its task is cancelled."""

    RUNNING = "running"  # executing the graph
    CANCELLING = "cancelling"  # a client cancelled the run: record `cancelled`
    LOST = "lost"  # its lease ran out or was taken: stop without writing anything
    SETTLING = "settling"  # its outcome is being recorded: neither of the above may stop it


@dataclass
class Attempt:
    run_id: str
    task: asyncio.Task[Any]
    phase: AttemptPhase = AttemptPhase.RUNNING

    def cancel(self) -> None:
        """A client asked to stop the run (ignored once the outcome is being recorded)."""
        if self.phase is AttemptPhase.RUNNING:
            self.phase = AttemptPhase.CANCELLING
            self.task.cancel()

    def lose(self) -> bool:
        """The lease is gone: stop without writing. False if the outcome is already settling,
        whose events are exempt from the lease."""
        if self.phase is AttemptPhase.SETTLING:
            return False
        self.phase = AttemptPhase.LOST
        self.task.cancel()
        return True


@dataclass
class WorkerState:
    services: Services
    graphs: GraphRegistry
    wake: asyncio.Event  # set to make the worker read the queue now
    metrics: WorkerMetrics  # served on RUNSTREAM_WORKER_METRICS_PORT when set
    leases: LeaseKeeper  # renews the running attempts' leases from its own thread
    worker_id: str = ""  # this process's: its beat, its presence connection, its claims
    attempts: dict[str, Attempt] = field(default_factory=dict)  # by run id
    exit_stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    @classmethod
    def of(cls, ctx: dict[str, Any]) -> WorkerState:
        state = ctx["state"]
        assert isinstance(state, cls)
        return state
