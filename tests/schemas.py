"""Migrated schemas handed to one test at a time, emptied between tests instead of remade.

Creating a test's schema (runstream's migrations, the checkpointer's, the store's) and dropping
it after cost about 0.35 s of Postgres DDL per test, more than most tests take themselves;
emptying its tables costs about 4 ms. A schema comes back to the pool only when nothing in it
changed shape (its relations, functions and triggers are those of a fresh migration: a test that
adds a trigger gets its schema dropped), and only once the test's connections have let go of
its rows (else it is dropped, as before).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from stream_store.connections import open_pg_pool
from stream_store.migrations import migrate
from stream_store.settings import Settings

__all__ = ["DatabasePool", "SchemaPool", "drop_database", "drop_schema"]

# Their rows say which migrations ran: kept, so a reused schema migrates as one already done.
_MIGRATION_TABLES = frozenset(
    {"runstream_migrations", "checkpoint_migrations", "store_migrations", "vector_migrations"}
)

_SHAPE = """
SELECT coalesce(array_agg(x ORDER BY x), '{}') AS shape FROM (
    SELECT 'relation ' || relname || ' ' || relkind::text FROM pg_class
        WHERE relnamespace = to_regnamespace(%(schema)s)
    UNION ALL SELECT 'function ' || proname FROM pg_proc
        WHERE pronamespace = to_regnamespace(%(schema)s)
    UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = to_regnamespace(%(schema)s) AND NOT t.tgisinternal
) AS objects(x)
"""


@dataclass
class SchemaPool:
    """The free schemas of one test process (xdist worker) on `database_url`."""

    database_url: str
    free: list[str] = field(default_factory=list)
    fresh_shape: list[str] | None = None

    async def take(self, base: Settings) -> str:
        """A migrated, empty schema for one test."""
        if self.free:
            return self.free.pop()
        schema = f"t_{uuid.uuid4().hex[:10]}"
        pool = await open_pg_pool(replace(base, database_schema=schema), max_size=1)
        try:
            await migrate(pool, schema)
        finally:
            await pool.close()
        if self.fresh_shape is None:
            async with await psycopg.AsyncConnection.connect(self.database_url) as conn:
                self.fresh_shape = await _shape(conn, schema)
        return schema

    async def give_back(self, schema: str) -> None:
        """Empty `schema` for the next test, or drop it if the test changed its shape or still
        holds its rows."""
        async with await psycopg.AsyncConnection.connect(
            self.database_url, autocommit=True
        ) as conn:
            if await emptied(conn, schema, self.fresh_shape):
                self.free.append(schema)
            else:
                await drop_schema(conn, schema)

    def drop_all(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            for schema in self.free:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
        self.free.clear()


@dataclass
class DatabasePool:
    """The same through PgBouncer, where no session setting survives: a database per test, its
    tables in `public`, reached through the pooler (`url`) or directly (`direct_url`)."""

    server_url: str
    free: list[str] = field(default_factory=list)
    fresh_shape: list[str] | None = None

    def direct_url(self, name: str) -> str:
        return urlunsplit(urlsplit(self.server_url)._replace(path=f"/{name}"))

    async def take(self, base: Settings) -> str:
        """A migrated, empty database for one test."""
        if self.free:
            return self.free.pop()
        name = f"t_{uuid.uuid4().hex[:10]}"
        async with await psycopg.AsyncConnection.connect(self.server_url, autocommit=True) as c:
            await c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        direct = replace(base, database_url=self.direct_url(name), database_schema="public")
        pool = await open_pg_pool(direct, max_size=1)
        try:
            await migrate(pool, "public")
        finally:
            await pool.close()
        if self.fresh_shape is None:
            async with await psycopg.AsyncConnection.connect(self.direct_url(name)) as conn:
                self.fresh_shape = await _shape(conn, "public")
        return name

    async def give_back(self, name: str) -> None:
        async with await psycopg.AsyncConnection.connect(
            self.direct_url(name), autocommit=True
        ) as conn:
            if await emptied(conn, "public", self.fresh_shape):
                self.free.append(name)
                return
        async with await psycopg.AsyncConnection.connect(self.server_url, autocommit=True) as c:
            await drop_database(c, name)

    def drop_all(self) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            for name in self.free:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        self.free.clear()


async def emptied(
    conn: psycopg.AsyncConnection[object], schema: str, fresh_shape: list[str] | None
) -> bool:
    """Delete the rows of `schema`'s tables, if it has a fresh migration's shape and no
    connection still holds them."""
    shape = await _shape(conn, schema)
    if shape != fresh_shape:
        return False
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL lock_timeout = '2s'")
            for table in _tables(shape):
                await conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, table)))
    except psycopg.errors.LockNotAvailable:
        return False
    return True


async def drop_database(conn: psycopg.AsyncConnection[object], name: str) -> None:
    await conn.execute(
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    )


async def drop_schema(conn: psycopg.AsyncConnection[object], schema: str) -> None:
    await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _shape(conn: psycopg.AsyncConnection[object], schema: str) -> list[str]:
    cur = await conn.execute(_SHAPE, {"schema": schema})
    row = await cur.fetchone()
    assert row is not None
    return list(row[0])  # type: ignore[index]


def _tables(shape: list[str]) -> list[str]:
    """The tables of a schema's `shape` whose rows tests write."""
    tables = [x.split()[1] for x in shape if x.startswith("relation ") and x.endswith(" r")]
    return [name for name in tables if name not in _MIGRATION_TABLES]
