"""Assistant records in Postgres (`runstream_assistants`, `runstream_assistant_versions`):
LangGraph's assistants that callers create, each owner's apart, with every version kept.

An assistant is a graph with a saved `config`, `context`, `metadata`, name and description.
The row in `runstream_assistants` is its active version; `runstream_assistant_versions` holds
every version (the first is the create's, each update adds one). Owner scoping lives in the
SQL, as for threads and crons: another owner's assistant is not found (404).

The graph assistants (one per registered graph, docs/langgraph.md) are not stored: a search
or count takes them as rows of its own (`shared`), so they sort and page with the stored ones
in one statement.

Create, update, versions, latest, delete (with its threads and crons), search and count: each
one statement with the owner rule in it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import msgspec
import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from .connections import ConnectionSource
from .errors import Conflict, postgres_errors
from .metadata_filters import sql_condition
from .owner_caps import refuse_at_cap
from .pg import fetch_all
from .record_columns import column_names, parameters, placeholders, select_list
from .run_status import WORKING, sql_list
from .thread_records import DeletedThreads, delete_langgraph_threads

__all__ = [
    "ASSISTANT_SORT_COLUMNS",
    "ActiveVersion",
    "AssistantFields",
    "AssistantRecord",
    "AssistantRecords",
    "AssistantVersion",
]

# What a search may sort by (LangGraph's `AssistantSortBy`): its expression here. Names sort
# without case, as LangGraph's do.
ASSISTANT_SORT_COLUMNS = {
    "assistant_id": "assistant_id",
    "graph_id": "lower(graph)",
    "name": "lower(name)",
    "created_at": "created_at",
    "updated_at": "updated_at",
}


class AssistantFields(msgspec.Struct, kw_only=True):
    """An assistant's id and what each of its versions holds: the one declaration of an
    assistant's fields. The Structs below add what storage keeps, the SQL column lists come
    from them (`record_columns`), and LangGraph's `Assistant` and `AssistantVersion`
    (server/langgraph/wire.py) derive from them: a new field is one line here and a column
    in a migration."""

    assistant_id: str
    graph: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]


class AssistantVersion(AssistantFields, kw_only=True):
    """One version of an assistant, as it was saved (a row of `runstream_assistant_versions`)."""

    version: int
    created_at: datetime


class ActiveVersion(AssistantVersion, kw_only=True):
    """An assistant at its active version, as anyone who may read it sees it."""

    updated_at: datetime  # when that version became the active one


class AssistantRecord(ActiveVersion, kw_only=True):
    """A row of `runstream_assistants`: the assistant and whose it is (None: a graph's own)."""

    owner: str | None


_ID_AS_TEXT = ("assistant_id",)  # a uuid column, held as a str
_COLUMNS = select_list(AssistantRecord, as_text=_ID_AS_TEXT)
# What each version holds (the id is the assistant's): what an update or `set_latest` sets.
_FIELDS = column_names(AssistantFields)
_VERSION_FIELDS = tuple(name for name in _FIELDS if name != "assistant_id")
_CREATED = (*_FIELDS, "owner")
_SAVED = column_names(AssistantVersion)


async def _refuse_past_versions(
    conn: AsyncConnection[DictRow], assistant_id: str, limit: int
) -> None:
    """Every version is kept (an assistant can be set back to any): a cap bounds what one
    caller's patches keep (`RUNSTREAM_MAX_ASSISTANT_VERSIONS`). Run under the row's lock."""
    cur = await conn.execute(
        "SELECT count(*) AS kept FROM runstream_assistant_versions WHERE assistant_id = %s",
        (assistant_id,),
    )
    counted = await cur.fetchone()
    if counted is not None and counted["kept"] >= limit:
        raise Conflict(
            f"assistant {assistant_id} has {counted['kept']} versions and"
            f" RUNSTREAM_MAX_ASSISTANT_VERSIONS allows {limit}; delete the assistant and"
            " create it again to start over",
            code="too_many_versions",
        )


async def _locked(
    conn: psycopg.AsyncConnection[DictRow], assistant_id: str, owner: str
) -> AssistantRecord | None:
    """The owner's assistant, its row locked until the transaction ends; None: not theirs."""
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM runstream_assistants"
        " WHERE assistant_id = %s AND owner = %s FOR UPDATE",
        (assistant_id, owner),
    )
    row = await cur.fetchone()
    return _record(row) if row is not None else None


# The owner's threads that a run of an assistant ran on, or whose metadata names it
# (`assistant_id`, as LangGraph's server sets it): LangGraph's `delete_threads`.
_THREADS_OF = (
    "SELECT thread_id::text AS thread_id FROM runstream_threads t WHERE owner = %s AND ("
    " metadata ->> 'assistant_id' = %s OR EXISTS (SELECT 1 FROM runstream_runs r"
    "   WHERE r.thread_id = t.thread_id AND r.kwargs ->> 'assistant_id' = %s))"
)


def _record(row: DictRow) -> AssistantRecord:
    return msgspec.convert(row, AssistantRecord)


def _shared_rows(shared: Sequence[AssistantRecord]) -> Jsonb:
    return Jsonb([msgspec.to_builtins(a) for a in shared])


# The graph assistants as rows, beside the owner's stored ones: typed by the table's own row.
_SHARED = f"SELECT {_COLUMNS} FROM jsonb_populate_recordset(NULL::runstream_assistants, %s)"


class AssistantRecords:
    """Queries and changes of assistants; one instance per process, over its connection pool."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def create_assistant(
        self, new: AssistantFields, *, owner: str, limit: int = 0
    ) -> AssistantRecord | None:
        """A new assistant of `owner`'s at version 1; None when its id is taken (by anyone).

        Raises:
            Conflict: the owner already has `limit` assistants (`owner_caps`).
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            await refuse_at_cap(conn, owner, "assistants", limit)
            cur = await conn.execute(
                f"INSERT INTO runstream_assistants ({', '.join(_CREATED)})"
                f" VALUES ({placeholders(_CREATED)})"
                f" ON CONFLICT (assistant_id) DO NOTHING RETURNING {_COLUMNS}",
                (*parameters(new, _FIELDS), owner),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            created = _record(row)
            await self._add_version(conn, created)
        return created

    async def _add_version(
        self, conn: psycopg.AsyncConnection[DictRow], assistant: AssistantRecord
    ) -> None:
        """Save the active version of `assistant`, made at its `updated_at`."""
        saved = msgspec.convert(assistant, AssistantVersion, from_attributes=True)
        saved = msgspec.structs.replace(saved, created_at=assistant.updated_at)
        await conn.execute(
            f"INSERT INTO runstream_assistant_versions ({', '.join(_SAVED)})"
            f" VALUES ({placeholders(_SAVED)})",
            parameters(saved, _SAVED),
        )

    async def get_assistant(self, assistant_id: str, owner: str) -> AssistantRecord | None:
        found = await fetch_all(
            self.pool,
            f"SELECT {_COLUMNS} FROM runstream_assistants WHERE assistant_id = %s AND owner = %s",
            (assistant_id, owner),
        )
        return _record(found[0]) if found else None

    async def update_assistant(
        self,
        assistant_id: str,
        owner: str,
        change: Callable[[AssistantRecord], AssistantFields],
        *,
        max_versions: int = 0,
    ) -> AssistantRecord | None:
        """A new version from `change(active version)` (its fields but the id), made the active
        one; None: not the owner's. The row is locked meanwhile, so two updates make two
        versions, one after the other. `change` may raise to change nothing.

        Raises:
            Conflict: 409 `too_many_versions`, the assistant has `max_versions` (0: no limit).
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            active = await _locked(conn, assistant_id, owner)
            if active is None:
                return None
            if max_versions:
                await _refuse_past_versions(conn, assistant_id, max_versions)
            fields = change(active)
            assignments = ", ".join(f"{name} = %s" for name in _VERSION_FIELDS)
            cur = await conn.execute(
                f"UPDATE runstream_assistants SET {assignments},"
                " version = (SELECT max(version) + 1 FROM runstream_assistant_versions"
                "   WHERE assistant_id = %s),"
                " updated_at = clock_timestamp()"
                f" WHERE assistant_id = %s RETURNING {_COLUMNS}",
                (
                    *parameters(fields, _VERSION_FIELDS),
                    assistant_id,
                    assistant_id,
                ),
            )
            updated = await cur.fetchone()
            assert updated is not None  # the row is locked: it is still there
            record = _record(updated)
            await self._add_version(conn, record)
        return record

    async def set_latest(
        self, assistant_id: str, owner: str, version: int
    ) -> tuple[AssistantRecord | None, bool]:
        """Make `version` the active one: (the assistant or None when not the owner's,
        whether it has that version)."""
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            active = await _locked(conn, assistant_id, owner)
            if active is None:
                return None, False
            restored = ("version", *_VERSION_FIELDS)
            cur = await conn.execute(
                f"UPDATE runstream_assistants a SET ({', '.join(restored)}) ="
                f" ({', '.join(f'v.{name}' for name in restored)}),"
                " updated_at = clock_timestamp()"
                " FROM runstream_assistant_versions v"
                " WHERE a.assistant_id = %s AND v.assistant_id = a.assistant_id"
                " AND v.version = %s"
                f" RETURNING {select_list(AssistantRecord, as_text=_ID_AS_TEXT, table='a')}",
                (assistant_id, version),
            )
            updated = await cur.fetchone()
        if updated is None:
            return active, False
        return _record(updated), True

    async def versions(
        self,
        assistant_id: str,
        owner: str,
        *,
        metadata: dict[str, Any],
        limit: int,
        offset: int,
    ) -> list[AssistantVersion] | None:
        """The assistant's versions whose metadata contains `metadata`, newest first; None:
        not the owner's assistant."""
        if await self.get_assistant(assistant_id, owner) is None:
            return None
        found = await fetch_all(
            self.pool,
            f"SELECT {select_list(AssistantVersion, as_text=_ID_AS_TEXT)}"
            " FROM runstream_assistant_versions WHERE assistant_id = %s AND metadata @> %s"
            " ORDER BY version DESC LIMIT %s OFFSET %s",
            (assistant_id, Jsonb(metadata), limit, offset),
        )
        return [msgspec.convert(row, AssistantVersion) for row in found]

    async def delete_assistant(
        self, assistant_id: str, owner: str, *, with_threads: bool = False
    ) -> DeletedThreads | None:
        """Delete the owner's assistant with its versions and the owner's crons that name it;
        `with_threads`: with its threads too (`_THREADS_OF`, LangGraph's `delete_threads`), their
        runs and checkpoints. One transaction: all of it, or nothing.

        The assistant's row is locked first, then the threads' (thread_records.py,
        `delete_langgraph_threads`): a cron's create holds the assistant's row as it inserts
        (`CronRecords.create_cron`), so no cron is left naming a deleted assistant.

        Returns:
            None when the owner has no such assistant; else its threads deleted, and their runs,
            whose streams the caller removes from Redis once this has committed.

        Raises:
            Conflict: `with_threads`, and one of them has a queued or running run.
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            if await _locked(conn, assistant_id, owner) is None:
                return None
            deleted = DeletedThreads([], [])
            if with_threads:
                cur = await conn.execute(_THREADS_OF, (owner, assistant_id, assistant_id))
                threads = [row["thread_id"] for row in await cur.fetchall()]
                deleted = await delete_langgraph_threads(conn, owner, threads)
            await conn.execute(
                "DELETE FROM runstream_crons WHERE assistant_id = %s AND owner = %s",
                (assistant_id, owner),
            )
            await conn.execute(
                "DELETE FROM runstream_assistants WHERE assistant_id = %s", (assistant_id,)
            )
        return deleted

    async def active_runs(self, assistant_id: str, owner: str) -> list[str]:
        """Ids of the owner's queued and running runs of the assistant (one waiting at an
        interrupt is over, to LangGraph)."""
        found = await fetch_all(
            self.pool,
            "SELECT run_id::text FROM runstream_runs WHERE owner = %s"
            f" AND status IN {sql_list(WORKING)}"
            " AND kwargs ->> 'assistant_id' = %s ORDER BY created_at",
            (owner, assistant_id),
        )
        return [row["run_id"] for row in found]

    def _matching(
        self,
        owner: str,
        shared: Sequence[AssistantRecord],
        *,
        graph: str | None,
        name: str | None,
        metadata: dict[str, Any],
        auth_filters: dict[str, Any] | None = None,
    ) -> tuple[sql.Composable, list[Any]]:
        """The owner's assistants and `shared` that match (an auth handler's filter too,
        stream_store/metadata_filters.py), as one relation."""
        query = f"SELECT {_COLUMNS} FROM runstream_assistants WHERE owner = %s UNION ALL {_SHARED}"
        condition, condition_params = sql_condition("metadata", auth_filters)
        where = f"metadata @> %s AND {condition}"
        params: list[Any] = [owner, _shared_rows(shared), Jsonb(metadata), *condition_params]
        if graph is not None:
            where += " AND graph = %s"
            params.append(graph)
        if name is not None:
            where += " AND strpos(lower(name), lower(%s)) > 0"
            params.append(name)
        return sql.SQL(f"(SELECT * FROM ({query}) u WHERE {where})"), params

    async def search_assistants(
        self,
        owner: str,
        shared: Sequence[AssistantRecord],
        *,
        graph: str | None,
        name: str | None,
        metadata: dict[str, Any],
        limit: int,
        offset: int,
        sort_by: str = "created_at",
        descending: bool = True,
        auth_filters: dict[str, Any] | None = None,
    ) -> list[AssistantRecord]:
        """The owner's assistants and `shared` that match (`name`: a part of the name, in any
        case), ordered by `sort_by` (an `ASSISTANT_SORT_COLUMNS` key)."""
        matching, params = self._matching(
            owner, shared, graph=graph, name=name, metadata=metadata, auth_filters=auth_filters
        )
        order = "DESC" if descending else "ASC"
        column = ASSISTANT_SORT_COLUMNS[sort_by]
        query = sql.SQL("SELECT * FROM {} a ORDER BY {} {}, assistant_id {} LIMIT %s OFFSET %s")
        async with postgres_errors(), self.pool.connection() as conn:
            cur = await conn.execute(
                query.format(matching, sql.SQL(column), sql.SQL(order), sql.SQL(order)),
                [*params, limit, offset],
            )
            found = await cur.fetchall()
        return [_record(row) for row in found]

    async def count_assistants(
        self,
        owner: str,
        shared: Sequence[AssistantRecord],
        *,
        graph: str | None,
        name: str | None,
        metadata: dict[str, Any],
        auth_filters: dict[str, Any] | None = None,
    ) -> int:
        matching, params = self._matching(
            owner, shared, graph=graph, name=name, metadata=metadata, auth_filters=auth_filters
        )
        async with postgres_errors(), self.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT count(*) AS n FROM {} a").format(matching), params
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row["n"])
