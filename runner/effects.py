"""`once`: a side effect of any graph's node run once per run and key, whatever the retries.

A worker that dies mid-run hands it to another attempt, which runs again the steps whose
checkpoint was not saved: a tool that sent an email would send it twice. `await once(key,
effect)` records the effect's result under (run, key) in the same Postgres transaction that
runs it (runstream's write-once ledger, `runner.tools`, which the built-in graphs' `save_note`
uses); a later attempt reaching the same key gets the recorded result back and the effect does
not run again. The run and attempt come from a context variable the worker sets around the
graph's stream (`running`), so any node of any graph can call it, with no runstream context.

The guarantee: once the ledger's transaction committed, the effect never runs again for that
run and key. An effect outside runstream's Postgres that finished just before its worker died
(before the commit) runs again: make it idempotent by the key (an idempotency key of the API
it calls), as `runner.tools` says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .tools import ToolLedger

__all__ = ["NotInARun", "once", "running"]


class NotInARun(RuntimeError):
    """`once` was called outside a run that runstream's worker executes."""


@dataclass(frozen=True)
class _Run:
    run_id: str
    attempt: int
    ledger: ToolLedger


_current: ContextVar[_Run | None] = ContextVar("runstream_run_effects", default=None)


@contextlib.contextmanager
def running(run_id: str, attempt: int, ledger: ToolLedger) -> Iterator[None]:
    """Within this block (the worker's stream of a run's graph), `once` records under `run_id`;
    LangGraph's node tasks, started inside it, inherit the variable."""
    token = _current.set(_Run(run_id, attempt, ledger))
    try:
        yield
    finally:
        _current.reset(token)


async def once(key: str, effect: Callable[[], Awaitable[Any]], *, name: str = "effect") -> Any:
    """`await effect()` the first time this run reaches `key`, and its recorded result (JSON)
    every later time, in this attempt or a later one. `name` labels the ledger row and logs.

    Raises:
        NotInARun: called outside a run of runstream's worker.
    """
    run = _current.get()
    if run is None:
        raise NotInARun("runner.effects.once is called from a node of a run runstream executes")

    async def in_ledger(_conn: AsyncConnection[DictRow]) -> Any:
        return await effect()

    execution = await run.ledger.execute(
        run_id=run.run_id, tool_call_id=key, tool=name, attempt=run.attempt, effect=in_ledger
    )
    return execution.result
