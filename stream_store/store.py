"""LangGraph's store (long-term memory shared across threads), kept apart per owner.

There is one store, LangGraph's own `AsyncPostgresStore`, in runstream's schema (its tables are
created by its `setup()`, run by `migrate`). Every owner sees it through `OwnerStore`, which puts
a label naming the owner in front of every namespace it is given and takes it off every
namespace it returns. No namespace a caller can send reaches another owner's items: the owner's
label is always the first one, and the store matches namespaces label by label (a prefix ends on
a label boundary, with `_` and `%` taken literally). The LangGraph API's `/store` routes and the
graphs a worker runs (`get_store()`, `runtime.store`) both go through it, and so both meet the
owner's caps there (`StoreCaps`): a batch that puts is counted with what the owner keeps, in the
put's own transaction, whichever path sent it.

A project's `store.index` and `store.ttl` (`StoreOptions`) configure it: with an index the
store embeds items into pgvector's `vector` columns (`store_vectors`) and `search` with a
`query` ranks by cosine similarity. Expired items are deleted by the workers'
`sweep_expired_items`, one worker at a time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.store.postgres.base import ANNIndexConfig, PostgresIndexConfig
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow

from .connections import PgPool, plain_index_builds, table_missing
from .errors import QuotaExceeded, StoreUnavailable
from .owner_caps import count_locked
from .pg import pipelined_transaction
from .settings import Settings, SettingsError

__all__ = [
    "HALFVEC_MAX_DIMS",
    "HNSW_MAX_DIMS",
    "SWEEP_LOCK",
    "OwnerStore",
    "ReportedEmbeddings",
    "StoreCaps",
    "StoreOptions",
    "VectorsUnavailable",
    "index_config",
    "open_store",
    "owner_label",
    "owner_store_on",
    "setup_store",
    "sweep_expired_items",
]

# pgvector's HNSW index takes `vector`s of at most 2000 dimensions and `halfvec`s (half
# precision, ample for ranking) of at most 4000: larger embeddings are kept as `halfvec`, and
# `store.index.dims` is at most 4000. (LangGraph's "flat", no index at all, does not set up:
# its async `setup` does not skip the index's migration.)
HNSW_MAX_DIMS = 2000
HALFVEC_MAX_DIMS = 4000

# The advisory lock (one int8 key) under which one worker at a time deletes expired items.
SWEEP_LOCK = 0x5357_4545  # "SWEE"


def _default_ttl() -> TTLConfig:
    # Items put with a `ttl` (minutes) are hidden once it has passed and deleted by the sweep;
    # reading an item restarts its TTL, as on LangGraph's server.
    return TTLConfig(omit_expired=True, refresh_on_read=True)


class StoreOptions:
    """How the store is kept: the project's `store.index` (LangGraph's Postgres index config,
    its `embed` resolved to embeddings; None: no semantic search) and `store.ttl` (the TTL
    defaults, and how often the workers delete expired items: hourly unless it says).

    A plain class, not a dataclass: Litestar, which injects the server's `Resources`, reads a
    dataclass's field types, and cannot type the union in the index config's `embed`.
    """

    def __init__(
        self,
        index: PostgresIndexConfig | None = None,
        ttl: TTLConfig | None = None,
        sweep_interval_s: float = 3600.0,
    ) -> None:
        self.index = index
        self.ttl = ttl if ttl is not None else _default_ttl()
        self.sweep_interval_s = sweep_interval_s


class ReportedEmbeddings(Embeddings):
    """The project's embeddings, whose failures (a provider down, a key refused) become
    `StoreUnavailable`: a store route answers 503 and logs the cause, a run fails saying it."""

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with _reported():
            return self.embeddings.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        with _reported():
            return self.embeddings.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        with _reported():
            return await self.embeddings.aembed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        with _reported():
            return await self.embeddings.aembed_query(text)


@contextlib.contextmanager
def _reported() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        raise StoreUnavailable(
            f"the project's embeddings failed: {type(exc).__name__}: {str(exc)[:200]}",
            code="embeddings_unavailable",
        ) from exc


def index_config(dims: int, embed: Embeddings, fields: list[str] | None) -> PostgresIndexConfig:
    """LangGraph's index config for `store.index`: an HNSW index of `vector`s (its default),
    of `halfvec`s above `HNSW_MAX_DIMS`; `fields` None embeds the whole value (LangGraph's
    `["$"]`)."""
    config = PostgresIndexConfig(dims=dims, embed=ReportedEmbeddings(embed), fields=fields or ["$"])
    if dims > HNSW_MAX_DIMS:
        config["ann_index_config"] = ANNIndexConfig(kind="hnsw", vector_type="halfvec")
    return config


class VectorsUnavailable(SettingsError):
    """The project has a `store.index` and the database cannot hold its vectors."""


def owner_label(owner: str) -> str:
    """The namespace label in front of all of `owner`'s items: the owner in URL-safe base64,
    which has no `.` (the store's label separator) and cannot be `langgraph` (reserved)."""
    return base64.urlsafe_b64encode(owner.encode()).decode().rstrip("=")


async def setup_store(conn: AsyncConnection[DictRow], options: StoreOptions) -> None:
    """Create or upgrade the store's tables, with those of its index when it has one (`conn`
    must be in autocommit).

    Raises:
        VectorsUnavailable: an index, and pgvector is not installed in the database's server,
            or its `vector` type is out of reach, or the stored vectors have other dimensions.
    """
    if options.index is not None:
        await _check_vectors(conn, options.index["dims"])
    store = AsyncPostgresStore(conn, index=options.index)
    if await table_missing(conn, "store_migrations"):
        store.MIGRATIONS = [plain_index_builds(step) for step in store.MIGRATIONS]
    if await table_missing(conn, "vector_migrations"):
        store.VECTOR_MIGRATIONS = [
            step._replace(sql=plain_index_builds(step.sql)) for step in store.VECTOR_MIGRATIONS
        ]
    try:
        await store.setup()
    except psycopg.errors.InsufficientPrivilege as exc:
        raise VectorsUnavailable(
            f"store.index: {str(exc).splitlines()[0]}: the first start with an index creates"
            " the vector extension (CREATE EXTENSION vector), which takes a superuser (or the"
            " database's owner where pgvector is trusted): run that once as one"
        ) from None
    finally:
        await _stop_tasks(store)


async def _check_vectors(conn: AsyncConnection[DictRow], dims: int) -> None:
    """pgvector can be used here, and vectors stored before have `dims` dimensions."""
    cur = await conn.execute(
        "SELECT e.extname IS NOT NULL AS installed, n.nspname AS schema,"
        " n.nspname = ANY (current_schemas(false)) OR e.extname IS NULL AS reachable,"
        " EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS available"
        " FROM (SELECT 1) AS one"
        " LEFT JOIN pg_extension e ON e.extname = 'vector'"
        " LEFT JOIN pg_namespace n ON n.oid = e.extnamespace"
    )
    found = await cur.fetchone()
    assert found is not None
    if not found["installed"] and not found["available"]:
        raise VectorsUnavailable(
            "store.index needs the pgvector extension, which this PostgreSQL server does not"
            " have: install it (Debian/Ubuntu with PGDG's apt repository: apt-get install"
            " postgresql-<major>-pgvector; or build https://github.com/pgvector/pgvector),"
            " or leave RUNSTREAM_DATABASE_URL unset to use runstream's embedded PostgreSQL,"
            " which has it (docs/operations.md)"
        )
    if not found["reachable"]:
        raise VectorsUnavailable(
            f"store.index: the database's vector extension is in schema {found['schema']!r},"
            " which is not on runstream's search_path: move it"
            " (ALTER EXTENSION vector SET SCHEMA <runstream's schema>) or use a database"
            " without it"
        )
    cur = await conn.execute(
        "SELECT atttypmod AS dims FROM pg_attribute"
        " WHERE attrelid = to_regclass('store_vectors') AND attname = 'embedding'"
    )
    stored = await cur.fetchone()
    if stored is not None and stored["dims"] != dims:
        raise VectorsUnavailable(
            f"store.index.dims is {dims}, but the store's vectors have {stored['dims']}"
            " dimensions (embedded before with another model): keep the dims, or drop the"
            " vectors to embed anew (DROP TABLE store_vectors; DELETE FROM vector_migrations)"
            " and put the items again"
        )


@contextlib.asynccontextmanager
async def open_store(pool: PgPool, options: StoreOptions) -> AsyncIterator[AsyncPostgresStore]:
    """The process's store on `pool` (its tables exist: `migrate` ran); on exit its batching
    task is not left pending. It sweeps nothing itself: the workers do
    (`sweep_expired_items`)."""
    store = AsyncPostgresStore(pool, index=options.index, ttl=options.ttl)
    try:
        yield store
    finally:
        await _stop_tasks(store)


@dataclass(frozen=True)
class StoreCaps:
    """What one owner may keep in the store, items and bytes of their values (0: no limit):
    `RUNSTREAM_MAX_STORE_ITEMS`, `RUNSTREAM_MAX_STORE_BYTES`."""

    max_items: int = 0
    max_bytes: int = 0

    @classmethod
    def of(cls, settings: Settings) -> StoreCaps:
        return cls(max_items=settings.max_store_items, max_bytes=settings.max_store_bytes)


@contextlib.asynccontextmanager
async def owner_store_on(
    conn: AsyncConnection[DictRow], owner: str, options: StoreOptions, caps: StoreCaps
) -> AsyncIterator[OwnerStore]:
    """`owner`'s view of the store with every statement on `conn`, in its transaction: the
    server's store routes run there, under their statement timeout (`caller_queries`)."""
    store = AsyncPostgresStore(conn, index=options.index, ttl=options.ttl)
    try:
        yield OwnerStore(store, owner, caps)
    finally:
        await _stop_tasks(store)


async def sweep_expired_items(pool: PgPool) -> int | None:
    """Delete the items past their TTL (their vectors go with them) in one transaction; how
    many, or None when another worker is sweeping now (it holds the sweep's advisory lock to
    the end of its transaction)."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s) AS mine", (SWEEP_LOCK,))
        row = await cur.fetchone()
        if row is None or not row["mine"]:
            return None
        store = AsyncPostgresStore(conn)
        try:
            return await store.sweep_ttl()
        finally:
            await _stop_tasks(store)


# A put's (namespace, key) as the caller names it, and the bytes of its value as JSON (None:
# the batch deletes that item)
Written = dict[tuple[tuple[str, ...], str], int | None]


async def _refuse_past_caps(
    conn: AsyncConnection[DictRow], owner: str, caps: StoreCaps, written: Written
) -> None:
    """Refuse a batch that would leave `owner` with more items or bytes of values than `caps`
    allow, in `conn`'s transaction before its writes, under the owner's lock (held to its
    end), so that batches at once cannot pass together. The items the batch replaces or
    deletes do not count; each it puts does, with its value.

    Stored values count as Postgres keeps them (`pg_column_size`, after compression), the new
    ones as their JSON: a little generous to the caller, and no value is read back to count
    it. An index's vectors do not count (their size follows the project's `dims`, not the
    caller). Items past their TTL count until the sweep deletes them.

    Raises:
        QuotaExceeded: 413 `store_full`.
    """
    label = owner_label(owner)
    sizes = [size for size in written.values() if size is not None]
    kept = await count_locked(
        conn,
        owner,
        "store",
        "SELECT count(*) AS items, coalesce(sum(pg_column_size(value)), 0) AS bytes"
        " FROM store WHERE prefix LIKE %(pattern)s AND (prefix, key) NOT IN"
        " (SELECT * FROM unnest(%(prefixes)s::text[], %(keys)s::text[]))",
        {
            # `_` is a LIKE wildcard; `-` and the rest of the label's alphabet are not
            "pattern": label.replace("_", "\\_") + ".%",
            "prefixes": [".".join((label, *namespace)) for namespace, _ in written],
            "keys": [key for _, key in written],
        },
    )
    items, stored = int(kept["items"]), int(kept["bytes"])
    adding = f", this write {len(sizes)}," if len(sizes) > 1 else ""
    if caps.max_items and items + len(sizes) > caps.max_items:
        raise QuotaExceeded(
            f"you keep {items} store items{adding} and RUNSTREAM_MAX_STORE_ITEMS allows"
            f" {caps.max_items}; delete some before putting more",
            code="store_full",
        )
    if caps.max_bytes and stored + sum(sizes) > caps.max_bytes:
        raise QuotaExceeded(
            f"your store items hold {stored} bytes, this write {sum(sizes)}, and"
            f" RUNSTREAM_MAX_STORE_BYTES allows {caps.max_bytes}; delete some before putting"
            " more",
            code="store_full",
        )


def _written(ops: Iterable[Op]) -> Written:
    """What a batch leaves written, by item: the last put of each (LangGraph's store keeps
    that one), with its value's size, or None for a delete."""
    written: Written = {}
    for op in ops:
        if isinstance(op, PutOp):
            written[(op.namespace, op.key)] = (
                None if op.value is None else len(msgspec.json.encode(op.value, enc_hook=str))
            )
    return written


async def _stop_tasks(store: AsyncPostgresStore) -> None:
    """Stop the store's batching task (and a TTL sweeper, though runstream starts none).

    LangGraph starts the batching task in the store's constructor and never stops it, not even
    in `__aexit__` (langgraph#6367), so a closed process would log "Task was destroyed but it
    is pending". Cancelling it loses nothing: runstream never queues an operation on it
    (`OwnerStore` calls `abatch` directly).
    """
    await store.stop_ttl_sweeper()
    task, store._task = store._task, None
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class OwnerStore(BaseStore):
    """One owner's view of `store`: namespaces without the owner's label, only its items, and
    no put past its `caps`.

    A batch that puts (with caps on) runs on one connection in one transaction: the owner's
    lock, the count, then the batch, so the count and the put agree. On the pooled store of a
    worker that is a connection of the pool for the batch alone; on the store of one
    connection (a store route's) that connection, in its transaction. Reads and deletes take
    no lock and count nothing: they run as the store runs them.
    """

    supports_ttl = True

    def __init__(self, store: AsyncPostgresStore, owner: str, caps: StoreCaps) -> None:
        self._store = store
        self._owner = owner
        self._label = owner_label(owner)
        self._caps = caps
        self.ttl_config = store.ttl_config

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        scoped = [self._scoped(op) for op in ops]
        written = _written(ops) if self._caps.max_items or self._caps.max_bytes else {}
        if any(size is not None for size in written.values()):
            async with self._writing() as (conn, store):
                await _refuse_past_caps(conn, self._owner, self._caps, written)
                results = await store.abatch(scoped)
        else:
            results = await self._store.abatch(scoped)
        return [self._unscoped(op, result) for op, result in zip(scoped, results, strict=True)]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """`abatch` on the store's event loop, for a sync node (LangGraph runs those in a
        thread), so that its puts meet the same caps."""
        loop = self._store.loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: a sync node's
            here = None
        if here is loop:
            raise asyncio.InvalidStateError(
                "a sync store call on the store's own event loop would wait for ever: use"
                " `await store.aput(...)` (`aget`, `asearch`, ...)"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), loop).result()

    @contextlib.asynccontextmanager
    async def _writing(
        self,
    ) -> AsyncIterator[tuple[AsyncConnection[DictRow], AsyncPostgresStore]]:
        """A connection in a transaction and the store on it, for one batch that puts."""
        where = self._store.conn
        if isinstance(where, AsyncConnection):
            if where.info.transaction_status == TransactionStatus.INTRANS:
                yield where, self._store  # a store route's, in the request's transaction
            else:
                async with where.transaction():
                    yield where, self._store
            return
        # BEGIN goes with the lock and the count (`count_locked`): no round trip of its own
        async with where.connection() as conn, pipelined_transaction(conn):
            store = AsyncPostgresStore(
                conn, index=self._store.index_config, ttl=self._store.ttl_config
            )
            try:
                yield conn, store
            finally:
                await _stop_tasks(store)

    def _scoped(self, op: Op) -> Op:
        match op:
            case GetOp() | PutOp():
                return op._replace(namespace=(self._label, *op.namespace))
            case SearchOp():
                return op._replace(namespace_prefix=(self._label, *op.namespace_prefix))
            case ListNamespacesOp():
                conditions = [c for c in op.match_conditions or () if c.match_type == "suffix"]
                prefixes = [c for c in op.match_conditions or () if c.match_type == "prefix"]
                # the store ANDs its conditions: each prefix is put under the owner, and a
                # listing without one gets the owner's label as its prefix
                for prefix in prefixes or [MatchCondition("prefix", ())]:
                    conditions.append(MatchCondition("prefix", (self._label, *prefix.path)))
                depth = None if op.max_depth is None else op.max_depth + 1
                return op._replace(match_conditions=tuple(conditions), max_depth=depth)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    def _unscoped(self, op: Op, result: Result) -> Result:
        if isinstance(op, ListNamespacesOp) and isinstance(result, list):
            return [self._unscoped_namespace(namespace) for namespace in result]
        if isinstance(result, list):
            return [self._item(item) for item in result]
        if isinstance(result, Item):
            return self._item(result)
        return result

    def _unscoped_namespace(self, namespace: Any) -> tuple[str, ...]:
        """A namespace the store answered, without the owner's label `_scoped` put first."""
        if not namespace or namespace[0] != self._label:
            raise RuntimeError("the store returned a namespace outside the caller's")
        return tuple(namespace[1:])

    def _item(self, item: Any) -> Any:
        fields: dict[str, Any] = {
            "value": item.value,
            "key": item.key,
            "namespace": self._unscoped_namespace(item.namespace),
            "created_at": item.created_at,
            "updated_at": item.updated_at,
        }
        if isinstance(item, SearchItem):
            return SearchItem(**fields, score=item.score)
        return Item(**fields)
