"""The write-once ledger behind `runner.run_scope.once`: a side effect of a graph's node at most
once per run and key (a write tool's call id, for the built-in `save_note`), whatever the
retries. Table `runstream_tool_executions`, (run id, key) its primary key.

Two phases. The claim commits first; the effect then runs with no connection or transaction
held (it may be slow, or use the pool itself, the store included); its result, checked as JSON,
is recorded after it. A later attempt gets the recorded result back, decoded as the first call's
was. An attempt that died between its claim and its record leaves a claim without an outcome:
the next attempt takes the claim over and runs the effect again, so an effect is made
idempotent by its key (`save_note`'s insert is: runner/graphs.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg.rows import DictRow

from stream_store.connections import PgPool
from stream_store.errors import Fenced

from .errors import RunnerError

__all__ = ["EffectNotRecorded", "Execution", "ToolLedger"]

logger = structlog.get_logger()


class EffectNotRecorded(RunnerError, TypeError):
    """The effect of a `once` call ran, but its result is not JSON, so it cannot be recorded
    (and replayed): raised then, and by every later call with the key, which does not run the
    effect again."""


@dataclass(frozen=True)
class Execution:
    result: Any
    replayed: bool  # True: an earlier attempt ran the effect; this is its recorded result


class ToolLedger:
    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    async def once(
        self,
        *,
        run_id: str,
        key: str,
        tool: str,
        attempt: int,
        effect: Callable[[], Awaitable[Any]],
    ) -> Execution:
        """Run `effect` once for this run and `key` (the two phases of the module's
        docstring), or return its recorded result.

        Raises:
            EffectNotRecorded: the effect's result (now or when it first ran) is not JSON.
            Fenced: a later attempt of the run holds the claim (this one lost the run).
            RuntimeError: another call of this attempt runs the same key now.
        """
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO runstream_tool_executions (run_id, tool_call_id, tool, attempt)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (run_id, tool_call_id) DO UPDATE"
                " SET attempt = EXCLUDED.attempt"
                " WHERE runstream_tool_executions.result IS NULL"
                " AND runstream_tool_executions.error IS NULL"
                " AND runstream_tool_executions.attempt < EXCLUDED.attempt"
                " RETURNING attempt",
                (run_id, key, tool, attempt),
            )
            claimed = await cur.fetchone() is not None
            if not claimed:
                cur = await conn.execute(
                    "SELECT result, error, attempt FROM runstream_tool_executions"
                    " WHERE run_id = %s AND tool_call_id = %s",
                    (run_id, key),
                )
                row = await cur.fetchone()
        if not claimed:
            assert row is not None  # a claim is never deleted but with its run
            return _replayed(row, tool, key, attempt)
        try:
            result = await effect()  # no connection held
        except BaseException:
            await self._release(run_id, key, attempt)  # it did not happen: a retry may run it
            raise
        try:
            encoded = json.dumps(result)
        except (TypeError, ValueError) as exc:
            error = f"{tool}: the result of once({key!r}) is not JSON ({exc})"
            await self._record(run_id, key, attempt, error=error)
            raise EffectNotRecorded(error) from None
        await self._record(run_id, key, attempt, result=encoded)
        logger.info("effect executed", tool=tool, tool_call_id=key)
        return Execution(result=json.loads(encoded), replayed=False)

    async def _release(self, run_id: str, key: str, attempt: int) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "DELETE FROM runstream_tool_executions WHERE run_id = %s AND tool_call_id = %s"
                " AND attempt = %s AND result IS NULL AND error IS NULL",
                (run_id, key, attempt),
            )

    async def _record(
        self, run_id: str, key: str, attempt: int, *, result: str | None = None, error: str = ""
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE runstream_tool_executions SET result = %s::jsonb, error = nullif(%s, '')"
                " WHERE run_id = %s AND tool_call_id = %s AND attempt = %s",
                (result, error, run_id, key, attempt),
            )


def _replayed(row: DictRow, tool: str, key: str, attempt: int) -> Execution:
    """What a call whose key was claimed already answers."""
    if row["error"] is not None:
        raise EffectNotRecorded(row["error"])
    if row["result"] is not None:
        logger.info("effect replayed", tool=tool, tool_call_id=key)
        return Execution(result=row["result"], replayed=True)
    if row["attempt"] > attempt:
        raise Fenced(f"once({key!r}): attempt {row['attempt']} of the run holds it now")
    raise RuntimeError(f"once({key!r}) is already running in this attempt")
