"""`once`: a side effect of any graph's node run once per run and key, whatever the retries.

A worker that dies mid-run hands it to another attempt, which runs again the steps whose
checkpoint was not saved: a tool that sent an email would send it twice. `await once(key,
effect)` claims (run, key) in runstream's write-once ledger (`runner.tools`), runs the effect
with no database connection held (it may be slow, or use the store), and records its result
(JSON); a later attempt reaching the same key gets the recorded result back, decoded as the
first call's was, and the effect does not run again. The run and attempt come from a context
variable the worker sets around the graph's stream (`running`), so any node of any graph can
call it, with no runstream context; `runner.evaluations.record_evaluation` reads the same
variable (`current_run`).

The guarantee: once the result is recorded, the effect never runs again for that run and key.
An effect whose worker died after the claim and before the record runs again in the next
attempt: make one outside runstream's Postgres idempotent by the key (an idempotency key of
the API it calls), as `runner.tools` says. A result that is not JSON cannot be recorded: the
call raises `EffectNotRecorded`, and so does every later call with the key, without running
the effect again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from stream_store.evaluations import Evaluations
from stream_store.run_records import RunRecord
from stream_store.tracing import trace_id_of

from .errors import RunnerError
from .tools import ToolLedger

__all__ = ["CurrentRun", "NotInARun", "current_run", "once", "running"]


class NotInARun(RunnerError, RuntimeError):
    """`once` (or `record_evaluation`) was called outside a run that runstream's worker
    executes."""


@dataclass(frozen=True)
class CurrentRun:
    """The run whose graph the worker is streaming, as the calls a node may make need it."""

    run_id: str
    thread_id: str
    owner: str
    graph: str
    attempt: int
    trace_id: str | None  # the run's trace (its submit span's), which every attempt continues
    ledger: ToolLedger
    evaluations: Evaluations
    max_facts: int  # RUNSTREAM_MAX_FACTS: facts the memory assistant keeps per user (0: no limit)
    x_trace_id: str | None = None  # the `X-Trace-ID` of the request that submitted the run


_current: ContextVar[CurrentRun | None] = ContextVar("runstream_run_effects", default=None)


@contextlib.contextmanager
def running(
    run: RunRecord, ledger: ToolLedger, evaluations: Evaluations, *, max_facts: int
) -> Iterator[None]:
    """Within this block (the worker's stream of a run's graph), `once` and
    `runner.evaluations.record_evaluation` record under `run` as its current attempt, and the
    memory assistant keeps at most `max_facts` facts; LangGraph's node tasks, started inside
    it, inherit the variable."""
    current = CurrentRun(
        run_id=run.run_id,
        thread_id=run.thread_id,
        owner=run.owner,
        graph=run.graph,
        attempt=run.attempt,
        trace_id=trace_id_of(run.traceparent),
        ledger=ledger,
        evaluations=evaluations,
        max_facts=max_facts,
        x_trace_id=run.x_trace_id,
    )
    token = _current.set(current)
    try:
        yield
    finally:
        _current.reset(token)


def current_run(caller: str) -> CurrentRun:
    """The run a node runs in.

    Raises:
        NotInARun: called outside a run of runstream's worker (`caller` names what was called).
    """
    run = _current.get()
    if run is None:
        raise NotInARun(f"{caller} is called from a node of a run runstream executes")
    return run


async def once(key: str, effect: Callable[[], Awaitable[Any]], *, name: str = "effect") -> Any:
    """`await effect()` the first time this run reaches `key`, and its recorded result (JSON)
    every later time, in this attempt or a later one. `name` labels the ledger row and logs.

    Raises:
        NotInARun: called outside a run of runstream's worker.
    """
    run = current_run("runner.effects.once")
    execution = await run.ledger.once(
        run_id=run.run_id, key=key, tool=name, attempt=run.attempt, effect=effect
    )
    return execution.result
