"""Cron records in Postgres (`runstream_crons`): LangGraph's scheduled runs, each owner's apart.

Owner scoping lives in the SQL, as for threads: another owner's cron is not found (404). The
scheduler (server/langgraph/cron_scheduler.py) claims a due cron with `FOR UPDATE SKIP
LOCKED` and a lease (`claimed_until`, committed at once), so of several servers only one fires
a slot; no lock is held while it submits (a submit waits on the thread's row, which a thread
delete may hold while it waits on the cron's). A claim whose scheduler died lapses, and the
slot's idempotency key keeps its second firing to the same run.

One statement per SDK call (create, get, search, count, update, delete) and the scheduler's
three (claim, release, advance), with the owner rule in each.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from psycopg import sql
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from .connections import ConnectionSource
from .errors import NotFound, postgres_errors
from .metadata_filters import sql_condition
from .owner_caps import refuse_at_cap
from .pg import execute, fetch_all
from .record_columns import column_names, parameters, placeholders, select_list

__all__ = ["CRON_SORT_COLUMNS", "CronFields", "CronRecord", "CronRecords", "SavedCron"]

# What a search may sort by (LangGraph's `CronSortBy`): its column here.
CRON_SORT_COLUMNS = {
    "cron_id": "cron_id",
    "assistant_id": "coalesce(assistant_id::text, graph)",
    "thread_id": "thread_id",
    "created_at": "created_at",
    "updated_at": "updated_at",
    "next_run_date": "next_run_date",
    "end_time": "end_time",
}


class CronFields(msgspec.Struct, kw_only=True):
    """What a cron is made of: the one declaration of a cron's fields. The Structs below add
    what storage keeps, the SQL column lists come from them (`record_columns`), and LangGraph's
    `Cron` (server/langgraph/wire.py) derives from them: a new field is one line here and a
    column in a migration. `payload` is the LangGraph run request each firing submits;
    `next_run_date` is null once the schedule has no slot left before `end_time`."""

    assistant_id: str | None  # a created assistant's; None: the graph's own
    thread_id: str | None
    on_run_completed: str | None
    end_time: datetime | None
    schedule: str
    timezone: str | None
    payload: dict[str, Any]
    next_run_date: datetime | None
    metadata: dict[str, Any]
    enabled: bool


class SavedCron(CronFields, kw_only=True):
    """A cron as saved, as its owner sees it."""

    cron_id: str
    created_at: datetime
    updated_at: datetime


class CronRecord(SavedCron, kw_only=True):
    """A row of `runstream_crons`: the cron, whose it is and the graph its runs run."""

    owner: str
    graph: str


_IDS_AS_TEXT = ("cron_id", "assistant_id", "thread_id")  # uuid columns, held as a str
_COLUMNS = select_list(CronRecord, as_text=_IDS_AS_TEXT)
_FIELDS = column_names(CronFields)
_CREATED = ("cron_id", "owner", "graph", *_FIELDS)
# The columns an update may set (`update_cron`'s change): a cron's assistant and thread are
# its own from its creation.
_UPDATABLE = frozenset(_FIELDS) - {"assistant_id", "thread_id"}


def _record(row: DictRow) -> CronRecord:
    return msgspec.convert(row, CronRecord)


class CronRecords:
    """Queries and changes of crons; one instance per process, over its connection pool."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def create_cron(
        self, new: CronFields, *, owner: str, graph: str, limit: int = 0
    ) -> CronRecord:
        """A new cron of `owner`'s, whose runs run `graph`.

        A created assistant's row is held (`FOR KEY SHARE`) until the insert commits: an
        assistant's delete locks it first (`AssistantRecords.delete_assistant`), so either
        the delete waits and then deletes this cron with the assistant's others, or this waits
        and finds the assistant gone. No cron is left naming a deleted assistant.

        Raises:
            NotFound: `new.assistant_id` is not the owner's assistant (deleted since it was
                checked), or `new.thread_id` not one of the owner's threads.
            Conflict: the owner already has `limit` crons (`owner_caps`).
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            await refuse_at_cap(conn, owner, "crons", limit)
            if new.assistant_id is not None:
                cur = await conn.execute(
                    "SELECT 1 FROM runstream_assistants WHERE assistant_id = %s AND owner = %s"
                    " FOR KEY SHARE",
                    (new.assistant_id, owner),
                )
                if await cur.fetchone() is None:
                    raise NotFound(f"assistant {new.assistant_id} not found")
            try:
                cur = await conn.execute(
                    f"INSERT INTO runstream_crons ({', '.join(_CREATED)})"
                    f" SELECT {placeholders(_CREATED)}"
                    " WHERE %s::uuid IS NULL OR EXISTS (SELECT 1 FROM runstream_threads"
                    "   WHERE thread_id = %s AND owner = %s)"
                    f" RETURNING {_COLUMNS}",
                    (
                        str(uuid.uuid4()),
                        owner,
                        graph,
                        *parameters(new, _FIELDS),
                        new.thread_id,
                        new.thread_id,
                        owner,
                    ),
                )
            except psycopg.errors.ForeignKeyViolation:  # the thread was deleted meanwhile
                raise NotFound(f"thread {new.thread_id} not found") from None
            row = await cur.fetchone()
            if row is None:
                raise NotFound(f"thread {new.thread_id} not found")
        return _record(row)

    async def get_cron(self, cron_id: str, owner: str) -> CronRecord | None:
        """The owner's cron; None for an unknown one or another owner's."""
        found = await fetch_all(
            self.pool,
            f"SELECT {_COLUMNS} FROM runstream_crons WHERE cron_id = %s AND owner = %s",
            (cron_id, owner),
        )
        return _record(found[0]) if found else None

    async def update_cron(
        self,
        cron_id: str,
        owner: str,
        change: Callable[[CronRecord], Awaitable[dict[str, Any]]],
    ) -> CronRecord | None:
        """Set the columns `change` gives for the cron as it is, its row locked meanwhile (so
        a new `next_run_date` is worked out from the schedule it replaces); None: not the
        owner's. `change` may raise to change nothing."""
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM runstream_crons"
                " WHERE cron_id = %s AND owner = %s FOR UPDATE",
                (cron_id, owner),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            values = await change(_record(row))
            unknown = set(values) - _UPDATABLE
            assert not unknown, f"not updatable: {unknown}"
            assignments = [
                *(sql.SQL("{} = %s").format(sql.Identifier(column)) for column in values),
                sql.SQL("updated_at = clock_timestamp()"),
            ]
            cur = await conn.execute(
                sql.SQL("UPDATE runstream_crons SET {} WHERE cron_id = %s RETURNING {}").format(
                    sql.SQL(", ").join(assignments), sql.SQL(_COLUMNS)
                ),
                (
                    *(Jsonb(v) if isinstance(v, dict) else v for v in values.values()),
                    cron_id,
                ),
            )
            updated = await cur.fetchone()
        assert updated is not None  # the row is locked: it is still there
        return _record(updated)

    async def delete_cron(self, cron_id: str, owner: str) -> bool:
        """Whether the owner had the cron (it is gone now)."""
        found = await fetch_all(
            self.pool,
            "DELETE FROM runstream_crons WHERE cron_id = %s AND owner = %s RETURNING cron_id",
            (cron_id, owner),
        )
        return bool(found)

    def _filter(
        self,
        owner: str,
        *,
        graph: str | None,
        assistant_id: str | None,
        thread_id: str | None,
        enabled: bool | None,
        metadata: dict[str, Any],
        auth_filters: dict[str, Any] | None = None,
    ) -> tuple[str, list[Any]]:
        """`graph`: crons of the graph's own assistant; `assistant_id`: of a created one;
        `auth_filters`: an auth handler's (stream_store/metadata_filters.py)."""
        condition, condition_params = sql_condition("metadata", auth_filters)
        query = f"FROM runstream_crons WHERE owner = %s AND metadata @> %s AND {condition}"
        params: list[Any] = [owner, Jsonb(metadata), *condition_params]
        if graph is not None:
            query += " AND assistant_id IS NULL"
        filters = (
            ("graph", graph),
            ("assistant_id", assistant_id),
            ("thread_id", thread_id),
            ("enabled", enabled),
        )
        for column, value in filters:
            if value is not None:
                query += f" AND {column} = %s"
                params.append(value)
        return query, params

    async def search_crons(
        self,
        owner: str,
        *,
        graph: str | None,
        thread_id: str | None,
        enabled: bool | None,
        metadata: dict[str, Any],
        limit: int,
        assistant_id: str | None = None,
        offset: int,
        sort_by: str = "created_at",
        descending: bool = True,
        auth_filters: dict[str, Any] | None = None,
    ) -> list[CronRecord]:
        """The owner's crons that match, ordered by `sort_by` (a `CRON_SORT_COLUMNS` key)."""
        where, params = self._filter(
            owner,
            graph=graph,
            assistant_id=assistant_id,
            thread_id=thread_id,
            enabled=enabled,
            metadata=metadata,
            auth_filters=auth_filters,
        )
        order = "DESC" if descending else "ASC"
        column = CRON_SORT_COLUMNS[sort_by]
        found = await fetch_all(
            self.pool,
            f"SELECT {_COLUMNS} {where}"
            f" ORDER BY {column} {order} NULLS LAST, cron_id {order} LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return [_record(row) for row in found]

    async def count_crons(
        self,
        owner: str,
        *,
        graph: str | None,
        thread_id: str | None,
        metadata: dict[str, Any],
        assistant_id: str | None = None,
        auth_filters: dict[str, Any] | None = None,
    ) -> int:
        where, params = self._filter(
            owner,
            graph=graph,
            assistant_id=assistant_id,
            thread_id=thread_id,
            enabled=None,
            metadata=metadata,
            auth_filters=auth_filters,
        )
        found = await fetch_all(self.pool, f"SELECT count(*) AS n {where}", params)
        return int(found[0]["n"])

    async def claim_due(
        self, now: datetime, lease_s: float, *, skip_owners: Collection[str] = ()
    ) -> CronRecord | None:
        """Claim the enabled cron due longest ago (`next_run_date <= now`) of an owner not in
        `skip_owners` for `lease_s` (of the database's clock), or None when none is due and
        unclaimed. The scheduler skips the owners that had their turn in its round: one owner's
        many due crons then do not all go before another's one.

        The claim is committed at once: no lock is held while the run is submitted (that
        submit locks the cron's thread, which a thread delete, waiting on the cron's row to
        cascade, may hold). A claimer that dies leaves the claim to lapse; the cron is then
        claimed again for the same slot.
        """
        found = await fetch_all(
            self.pool,
            "UPDATE runstream_crons"
            " SET claimed_until = clock_timestamp() + make_interval(secs => %s)"
            " WHERE cron_id = (SELECT cron_id FROM runstream_crons"
            "   WHERE enabled AND next_run_date <= %s"
            "   AND (claimed_until IS NULL OR claimed_until < clock_timestamp())"
            "   AND owner <> ALL(%s)"
            "   ORDER BY next_run_date LIMIT 1 FOR UPDATE SKIP LOCKED)"
            f" RETURNING {_COLUMNS}",
            (lease_s, now, list(skip_owners)),
        )
        return _record(found[0]) if found else None

    async def advance(
        self, claimed: CronRecord, next_run: Callable[[CronRecord], datetime | None]
    ) -> None:
        """End the claim of `claimed`, moving the cron to `next_run(cron)` as it is now (its
        schedule may have been changed meanwhile) unless an update already moved it."""
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM runstream_crons WHERE cron_id = %s FOR UPDATE",
                (claimed.cron_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return  # deleted meanwhile
            cron = _record(row)
            moved = cron.next_run_date != claimed.next_run_date
            await conn.execute(
                "UPDATE runstream_crons SET next_run_date = %s, claimed_until = NULL"
                " WHERE cron_id = %s",
                (cron.next_run_date if moved else next_run(cron), cron.cron_id),
            )

    async def release(self, cron_id: str, retry_after_s: float) -> None:
        """Shorten a claim to `retry_after_s` without moving the cron: its slot is claimed
        again then."""
        await execute(
            self.pool,
            "UPDATE runstream_crons"
            " SET claimed_until = clock_timestamp() + make_interval(secs => %s)"
            " WHERE cron_id = %s",
            (retry_after_s, cron_id),
        )
