"""How many assistants and crons one caller may keep (`RUNSTREAM_MAX_ASSISTANTS`,
`RUNSTREAM_MAX_CRONS`), and the count under the caller's lock that every cap on what a caller
keeps is taken with (`count_locked`: these two, the store's items and bytes, checkpoints).

Both are rows a caller makes once and keeps: without a cap one caller could fill Postgres, and
every cron is a claim the shared scheduler makes each time it is due. The count is taken in the
creating transaction under the caller's advisory lock (one per kind), so two creates at once
cannot both pass at the limit; the lock is held to the end of that transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .errors import Conflict
from .pg import pipelined

__all__ = ["count_locked", "refuse_at_cap"]

Kind = Literal["assistants", "crons"]
LockedKind = Literal["assistants", "crons", "store", "checkpoints"]

# The advisory-lock classes (first of two int4 keys), one per kind; the caller is the second.
_LOCK_CLASS: dict[LockedKind, int] = {
    "assistants": 0x61737374,  # "asst"
    "crons": 0x63726F6E,  # "cron"
    "store": 0x73746F72,  # "stor"
    "checkpoints": 0x636B7074,  # "ckpt"
}
_SETTING: dict[Kind, str] = {
    "assistants": "RUNSTREAM_MAX_ASSISTANTS",
    "crons": "RUNSTREAM_MAX_CRONS",
}


async def refuse_at_cap(conn: AsyncConnection[DictRow], owner: str, kind: Kind, limit: int) -> None:
    """Refuse one more of `kind` for `owner` when it already has `limit` (0: no limit), in
    `conn`'s transaction, before the insert.

    Raises:
        Conflict: 409 `too_many_assistants` / `too_many_crons` (waiting does not help: the
            caller deletes one first).
    """
    if not limit:
        return
    counted = await count_locked(
        conn,
        owner,
        kind,
        f"SELECT count(*) AS kept FROM runstream_{kind} WHERE owner = %(owner)s",
        {"owner": owner},
    )
    if counted is not None and counted["kept"] >= limit:
        raise Conflict(
            f"you have {counted['kept']} {kind} and {_SETTING[kind]} allows {limit};"
            f" delete one before making another",
            code=f"too_many_{kind}",
        )


async def count_locked(
    conn: AsyncConnection[DictRow],
    owner: str,
    kind: LockedKind,
    query: str,
    params: Mapping[str, Any],
) -> DictRow:
    """The one row of `query` (what `owner` keeps of `kind`), counted in `conn`'s transaction
    under the caller's advisory lock for `kind`, held to the transaction's end: the write that
    follows the check commits before another write of the caller counts. One round trip."""
    async with pipelined(conn):  # the lock, then a count that sees what it waited for
        await conn.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS[kind], owner)
        )
        cur = await conn.execute(query, params)
    row = await cur.fetchone()
    assert row is not None  # an aggregate without GROUP BY has one row
    return row
