"""LangGraph's words for runstream's run and thread states, all of them here (docs/langgraph.md).

Storage keeps runstream's own facts: a run's status, a thread's own status (busy while a run is
queued or running, interrupted while one waits at its interrupt, else idle) and its latest
started run (stream_store/thread_facts.py). LangGraph names them otherwise:

- a run: queued is `pending`; a run stopped at interrupt() ended, to LangGraph (`success`), on a
  thread left `interrupted`; LangGraph's `interrupted` run is one cancelled on request.
- a thread, as LangGraph's server sets it when a run ends: `busy` while a run is queued or
  running, `interrupted` while one waits at its interrupt; otherwise from the latest run that
  started: `error` if it failed, `interrupted` if it was cancelled mid-step or stopped at a
  breakpoint (LangGraph: the checkpoint still has a next step), else `idle`. A run cancelled
  before it started changes nothing. `THREAD_STATUS` is applied in SQL too, for a search's
  filter and sort (`ThreadRecords.search_threads`).
"""

from __future__ import annotations

from typing import cast

from stream_store.thread_facts import ThreadFacts, ThreadNaming
from stream_store.thread_records import ThreadRecord
from wire.run_status import WORKING, RunStatus

from .wire import RunStatusName, ThreadStatus

__all__ = ["BULK_CANCEL_STATUSES", "THREAD_STATUS", "is_over", "run_status", "thread_status"]

_RUN_STATUSES: dict[str, RunStatusName] = {
    RunStatus.QUEUED: "pending",
    RunStatus.RUNNING: "running",
    RunStatus.INTERRUPTED: "success",
    RunStatus.SUCCEEDED: "success",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "interrupted",
}

# LangGraph's names of the statuses a bulk cancel may pick, as runstream's.
BULK_CANCEL_STATUSES: dict[str, list[str]] = {
    "pending": [RunStatus.QUEUED],
    "running": [RunStatus.RUNNING],
    "all": sorted(WORKING),
}

THREAD_STATUS = ThreadNaming(
    rules=(
        ("busy", ThreadFacts(status="busy")),
        ("interrupted", ThreadFacts(status="interrupted")),
        ("error", ThreadFacts(latest_status=RunStatus.FAILED)),
        ("interrupted", ThreadFacts(latest_status=RunStatus.CANCELLED)),
        ("interrupted", ThreadFacts(latest_breakpoint=True)),
    ),
    otherwise="idle",
)


def is_over(engine_status: str) -> bool:
    """Whether LangGraph sees the run as over: ended, or stopped at interrupt() (`success`,
    above); only a queued or running run goes on."""
    return engine_status not in WORKING


def run_status(engine_status: str) -> RunStatusName:
    """LangGraph's status for a run in runstream's `engine_status`.

    Raises:
        ValueError: not a runstream run status.
    """
    try:
        return _RUN_STATUSES[engine_status]
    except KeyError:
        raise ValueError(f"unknown run status {engine_status!r}") from None


def thread_status(thread: ThreadRecord) -> ThreadStatus:
    """LangGraph's status of `thread`, read with its latest run (`latest_run=True`).

    Raises:
        ValueError: `thread` was read without its latest run.
    """
    if thread.latest_run is None:
        raise ValueError("LangGraph's thread status needs the thread's latest run")
    return cast(ThreadStatus, THREAD_STATUS.name(thread.status, thread.latest_run))
