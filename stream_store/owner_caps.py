"""How many assistants and crons one caller may keep (`RUNSTREAM_MAX_ASSISTANTS`,
`RUNSTREAM_MAX_CRONS`).

Both are rows a caller makes once and keeps: without a cap one caller could fill Postgres, and
every cron is a claim the shared scheduler makes each time it is due. The count is taken in the
creating transaction under the caller's advisory lock (one per kind), so two creates at once
cannot both pass at the limit; the lock is held to the end of that transaction.
"""

from __future__ import annotations

from typing import Literal

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .errors import Conflict

__all__ = ["make_room"]

Kind = Literal["assistants", "crons"]

# The advisory-lock classes (first of two int4 keys), one per kind; the caller is the second.
_LOCK_CLASS: dict[Kind, int] = {"assistants": 0x61737374, "crons": 0x63726F6E}  # "asst", "cron"
_SETTING: dict[Kind, str] = {
    "assistants": "RUNSTREAM_MAX_ASSISTANTS",
    "crons": "RUNSTREAM_MAX_CRONS",
}


async def make_room(conn: AsyncConnection[DictRow], owner: str, kind: Kind, limit: int) -> None:
    """Refuse one more of `kind` for `owner` when it already has `limit` (0: no limit), in
    `conn`'s transaction, before the insert.

    Raises:
        Conflict: 409 `too_many_assistants` / `too_many_crons` (waiting does not help: the
            caller deletes one first).
    """
    if not limit:
        return
    async with conn.pipeline():  # the lock, then a count that sees what it waited for
        await conn.execute(
            f"SELECT pg_advisory_xact_lock({_LOCK_CLASS[kind]}, hashtext(%s))", (owner,)
        )
        cur = await conn.execute(
            f"SELECT count(*) AS kept FROM runstream_{kind} WHERE owner = %s", (owner,)
        )
    counted = await cur.fetchone()
    if counted is not None and counted["kept"] >= limit:
        raise Conflict(
            f"you have {counted['kept']} {kind} and {_SETTING[kind]} allows {limit};"
            f" delete one before making another",
            code=f"too_many_{kind}",
        )
