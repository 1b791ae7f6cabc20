"""LangGraph's store (long-term memory shared across threads), kept apart per owner.

There is one store, LangGraph's own `AsyncPostgresStore`, in runstream's schema (its tables are
created by its `setup()`, run by `migrate`). Every owner sees it through `OwnerStore`, which puts
a label naming the owner in front of every namespace it is given and takes it off every
namespace it returns. No namespace a caller can send reaches another owner's items: the owner's
label is always the first one, and the store matches namespaces label by label (a prefix ends on
a label boundary, with `_` and `%` taken literally). The LangGraph API's `/store` routes and the
graphs a worker runs (`get_store()`, `runtime.store`) both go through it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

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
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from .connections import PgPool
from .errors import QuotaExceeded
from .owner_caps import count_locked

__all__ = [
    "STORE_TTL",
    "OwnerStore",
    "make_store_room",
    "open_store",
    "owner_label",
    "owner_store_on",
    "setup_store",
]

# Items put with a `ttl` (minutes) are hidden once it has passed, and deleted by the hourly
# sweep; reading an item restarts its TTL, as on LangGraph's server.
STORE_TTL = TTLConfig(omit_expired=True, refresh_on_read=True, sweep_interval_minutes=60)


def owner_label(owner: str) -> str:
    """The namespace label in front of all of `owner`'s items: the owner in URL-safe base64,
    which has no `.` (the store's label separator) and cannot be `langgraph` (reserved)."""
    return base64.urlsafe_b64encode(owner.encode()).decode().rstrip("=")


async def setup_store(conn: AsyncConnection[DictRow]) -> None:
    """Create or upgrade the store's tables (`conn` must be in autocommit)."""
    await AsyncPostgresStore(conn).setup()


@contextlib.asynccontextmanager
async def open_store(pool: PgPool) -> AsyncIterator[AsyncPostgresStore]:
    """The process's store on `pool` (its tables exist: `migrate` ran), sweeping expired items
    while open; on exit neither of its tasks is left pending."""
    store = AsyncPostgresStore(pool, ttl=STORE_TTL)
    try:
        await store.start_ttl_sweeper()
        yield store
    finally:
        await _stop_tasks(store)


@contextlib.asynccontextmanager
async def owner_store_on(conn: AsyncConnection[DictRow], owner: str) -> AsyncIterator[OwnerStore]:
    """`owner`'s view of the store with every statement on `conn`, in its transaction: the
    server's store routes run there, under their statement timeout (`caller_queries`)."""
    store = AsyncPostgresStore(conn, ttl=STORE_TTL)
    try:
        yield OwnerStore(store, owner)
    finally:
        await _stop_tasks(store)


async def make_store_room(
    conn: AsyncConnection[DictRow],
    owner: str,
    item: tuple[tuple[str, ...], str, int],
    *,
    max_items: int,
    max_bytes: int,
) -> None:
    """Refuse a put of `item` (namespace, key, bytes of its value as JSON) that would leave
    `owner` with more than `max_items` items or `max_bytes` bytes of values (0: no limit), in
    `conn`'s transaction before the put, under the owner's lock (held to its end), so that
    puts at once cannot pass together. An item the put replaces does not count.

    Stored values count as Postgres keeps them (`pg_column_size`, after compression), the new
    one as its JSON: a little generous to the caller, and no value is read back to count it.
    Items past their TTL count until the hourly sweep deletes them.

    Raises:
        QuotaExceeded: 413 `store_full`.
    """
    if not max_items and not max_bytes:
        return
    namespace, key, size = item
    label = owner_label(owner)
    prefix = ".".join((label, *namespace))
    pattern = label.replace("_", "\\_") + ".%"  # `_` is a LIKE wildcard; `-` and the rest not
    kept = await count_locked(
        conn,
        owner,
        "store",
        "SELECT count(*) AS items, coalesce(sum(pg_column_size(value)), 0) AS bytes"
        " FROM store WHERE prefix LIKE %(pattern)s"
        " AND NOT (prefix = %(prefix)s AND key = %(key)s)",
        {"pattern": pattern, "prefix": prefix, "key": key},
    )
    items, stored = int(kept["items"]), int(kept["bytes"])
    if max_items and items + 1 > max_items:
        raise QuotaExceeded(
            f"you keep {items} store items and RUNSTREAM_MAX_STORE_ITEMS allows {max_items};"
            " delete some before putting more",
            code="store_full",
        )
    if max_bytes and stored + size > max_bytes:
        raise QuotaExceeded(
            f"your store items hold {stored} bytes, this one {size}, and"
            f" RUNSTREAM_MAX_STORE_BYTES allows {max_bytes}; delete some before putting more",
            code="store_full",
        )


async def _stop_tasks(store: AsyncPostgresStore) -> None:
    """Stop the store's TTL sweeper and its batching task.

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
    """One owner's view of `store`: namespaces without the owner's label, and only its items."""

    supports_ttl = True

    def __init__(self, store: BaseStore, owner: str) -> None:
        self._store = store
        self._label = owner_label(owner)
        self.ttl_config = store.ttl_config

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        scoped = [self._scoped(op) for op in ops]
        results = await self._store.abatch(scoped)
        return [self._unscoped(op, result) for op, result in zip(scoped, results, strict=True)]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        scoped = [self._scoped(op) for op in ops]
        results = self._store.batch(scoped)
        return [self._unscoped(op, result) for op, result in zip(scoped, results, strict=True)]

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
            return [self._own(namespace) for namespace in result]
        if isinstance(result, list):
            return [self._item(item) for item in result]
        if isinstance(result, Item):
            return self._item(result)
        return result

    def _own(self, namespace: Any) -> tuple[str, ...]:
        if not namespace or namespace[0] != self._label:
            raise RuntimeError("the store returned a namespace outside the caller's")
        return tuple(namespace[1:])

    def _item(self, item: Any) -> Any:
        fields: dict[str, Any] = {
            "value": item.value,
            "key": item.key,
            "namespace": self._own(item.namespace),
            "created_at": item.created_at,
            "updated_at": item.updated_at,
        }
        if isinstance(item, SearchItem):
            return SearchItem(**fields, score=item.score)
        return Item(**fields)
