"""Write tools: side effects that happen at most once per tool call, whatever the retries.

A write tool's effect runs inside a Postgres transaction that also records the execution
under (run id, tool-call id). A retried attempt that reaches the same tool call finds the
record and gets the recorded result back instead of running the effect again; two attempts
racing on one call serialise on the primary key, and the loser reads the winner's result.
Effects that live in the same Postgres database (like `save_note`) are therefore exactly once;
an effect outside it should be made idempotent by the tool-call id it is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from stream_store.connections import PgPool

__all__ = ["Execution", "ToolLedger"]

logger = structlog.get_logger()

Effect = Callable[[AsyncConnection[DictRow]], Awaitable[Any]]


@dataclass(frozen=True)
class Execution:
    result: Any
    replayed: bool  # True: an earlier attempt ran the effect; this is its recorded result


class ToolLedger:
    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    async def execute(
        self, *, run_id: str, tool_call_id: str, tool: str, attempt: int, effect: Effect
    ) -> Execution:
        """Run `effect` once for this tool call, or return what it returned the first time."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "INSERT INTO runstream_tool_executions (run_id, tool_call_id, tool, attempt)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING attempt",
                (run_id, tool_call_id, tool, attempt),
            )
            if await cur.fetchone() is None:
                cur = await conn.execute(
                    "SELECT result FROM runstream_tool_executions"
                    " WHERE run_id = %s AND tool_call_id = %s",
                    (run_id, tool_call_id),
                )
                row = await cur.fetchone()
                assert row is not None
                logger.info("write tool replayed", tool=tool, tool_call_id=tool_call_id)
                return Execution(result=row["result"], replayed=True)
            result = await effect(conn)
            await conn.execute(
                "UPDATE runstream_tool_executions SET result = %s"
                " WHERE run_id = %s AND tool_call_id = %s",
                (Jsonb(result), run_id, tool_call_id),
            )
        logger.info("write tool executed", tool=tool, tool_call_id=tool_call_id)
        return Execution(result=result, replayed=False)
