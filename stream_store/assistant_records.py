"""Assistant records in Postgres (`runstream_assistants`, `runstream_assistant_versions`):
LangGraph's assistants that callers create, each owner's apart, with every version kept.

An assistant is a graph with a saved `config`, `context`, `metadata`, name and description.
The row in `runstream_assistants` is its active version; `runstream_assistant_versions` holds
every version (the first is the create's, each update adds one). Owner scoping lives in the
SQL, as for threads and crons: another owner's assistant is not found (404).

The graph assistants (one per registered graph, docs/langgraph.md) are not stored: a search
or count takes them as rows of its own (`shared`), so they sort and page with the stored ones
in one statement.

Over 300 lines: create, update, versions, latest, delete (with its threads and crons), search
and count, each one statement with the owner rule in it.
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
from .owner_caps import make_room
from .pg import fetch_all
from .run_status import WORKING, sql_list
from .thread_records import DeletedThreads, delete_langgraph_threads

__all__ = [
    "ASSISTANT_SORT_COLUMNS",
    "AssistantChange",
    "AssistantRecord",
    "AssistantRecords",
    "AssistantVersion",
    "NewAssistant",
]

_VERSION_FIELDS = "graph, name, description, config, context, metadata"
_COLUMNS = f"assistant_id::text, owner, {_VERSION_FIELDS}, version, created_at, updated_at"
# What a search may sort by (LangGraph's `AssistantSortBy`): its expression here. Names sort
# without case, as LangGraph's do.
ASSISTANT_SORT_COLUMNS = {
    "assistant_id": "assistant_id",
    "graph_id": "lower(graph)",
    "name": "lower(name)",
    "created_at": "created_at",
    "updated_at": "updated_at",
}


class AssistantRecord(msgspec.Struct, kw_only=True):
    """An assistant at its active version. `owner` is None for a graph's own assistant."""

    assistant_id: str
    owner: str | None
    graph: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime


class AssistantVersion(msgspec.Struct, kw_only=True):
    """One version of an assistant, as it was saved."""

    assistant_id: str
    version: int
    graph: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    created_at: datetime


class NewAssistant(msgspec.Struct, kw_only=True):
    assistant_id: str
    owner: str
    graph: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]


class AssistantChange(msgspec.Struct, kw_only=True):
    """The fields of an assistant's next version (`update_assistant` works them out from the
    active version, with its row locked)."""

    graph: str
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]


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


# The graph assistants as rows, beside the owner's stored ones.
_SHARED = (
    "SELECT assistant_id::text, owner, graph, name, description, config, context, metadata,"
    " version, created_at, updated_at FROM jsonb_to_recordset(%s) AS g(assistant_id uuid,"
    " owner text, graph text, name text, description text, config jsonb, context jsonb,"
    " metadata jsonb, version integer, created_at timestamptz, updated_at timestamptz)"
)


class AssistantRecords:
    """Queries and changes of assistants; one instance per process, over its connection pool."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def create_assistant(
        self, new: NewAssistant, *, limit: int = 0
    ) -> AssistantRecord | None:
        """A new assistant at version 1; None when its id is taken (by anyone).

        Raises:
            Conflict: the owner already has `limit` assistants (`owner_caps`).
        """
        async with postgres_errors(), self.pool.connection() as conn, conn.transaction():
            await make_room(conn, new.owner, "assistants", limit)
            cur = await conn.execute(
                f"INSERT INTO runstream_assistants (assistant_id, owner, {_VERSION_FIELDS})"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                f" ON CONFLICT (assistant_id) DO NOTHING RETURNING {_COLUMNS}",
                (
                    new.assistant_id,
                    new.owner,
                    new.graph,
                    new.name,
                    new.description,
                    Jsonb(new.config),
                    Jsonb(new.context),
                    Jsonb(new.metadata),
                ),
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
        await conn.execute(
            f"INSERT INTO runstream_assistant_versions (assistant_id, version, {_VERSION_FIELDS},"
            " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                assistant.assistant_id,
                assistant.version,
                assistant.graph,
                assistant.name,
                assistant.description,
                Jsonb(assistant.config),
                Jsonb(assistant.context),
                Jsonb(assistant.metadata),
                assistant.updated_at,
            ),
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
        change: Callable[[AssistantRecord], AssistantChange],
        *,
        max_versions: int = 0,
    ) -> AssistantRecord | None:
        """A new version from `change(active version)`, made the active one; None: not the
        owner's. The row is locked meanwhile, so two updates make two versions, one after the
        other. `change` may raise to change nothing.

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
            cur = await conn.execute(
                "UPDATE runstream_assistants SET graph = %s, name = %s, description = %s,"
                " config = %s, context = %s, metadata = %s,"
                " version = (SELECT max(version) + 1 FROM runstream_assistant_versions"
                "   WHERE assistant_id = %s),"
                " updated_at = clock_timestamp()"
                f" WHERE assistant_id = %s RETURNING {_COLUMNS}",
                (
                    fields.graph,
                    fields.name,
                    fields.description,
                    Jsonb(fields.config),
                    Jsonb(fields.context),
                    Jsonb(fields.metadata),
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
            cur = await conn.execute(
                f"UPDATE runstream_assistants a SET (version, {_VERSION_FIELDS}) ="
                f" (v.version, v.graph, v.name, v.description, v.config, v.context, v.metadata),"
                " updated_at = clock_timestamp()"
                " FROM runstream_assistant_versions v"
                " WHERE a.assistant_id = %s AND v.assistant_id = a.assistant_id"
                " AND v.version = %s"
                " RETURNING a.assistant_id::text, a.owner, a.graph, a.name, a.description,"
                " a.config, a.context, a.metadata, a.version, a.created_at, a.updated_at",
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
            f"SELECT assistant_id::text, version, {_VERSION_FIELDS}, created_at"
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
