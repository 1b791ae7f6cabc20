"""Store items, as the store routes reach them; a graph's `runtime.store` reaches the same
items through `stream_store.store.OwnerStore` in the worker, which holds the rules both
share: the owner's namespaces only, and the owner's caps on every put."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from langgraph.store.base import Item

from server.callers.auth import Caller
from server.errors import ApiError
from server.resources import Resources
from stream_store.metadata_filters import matches
from stream_store.store import OwnerStore, StoreCaps, owner_store_on

__all__ = ["ask_store", "caller_store", "check_put", "shown"]


async def ask_store(caller: Caller, action: str, value: dict[str, Any]) -> dict[str, Any] | None:
    """The project's `store` handler on `action` (`put`, `get`, `delete`, `search`,
    `list_namespaces`): None, or a filter on the items' values. It may rewrite
    `value["namespace"]` (LangGraph's docs put the user's identity in front).

    Raises:
        ApiError: the handler refused.
    """
    return await caller.authorize("store", action, value)


@contextlib.asynccontextmanager
async def caller_store(resources: Resources, caller: Caller) -> AsyncIterator[OwnerStore]:
    """The caller's store, within its caps, on a connection of the caller's query pool (its
    statement timeout and its turn, `server/callers/caller_queries.py`)."""
    async with resources.queries.connection(caller.owner) as conn:
        caps = StoreCaps.of(resources.settings)
        async with owner_store_on(conn, caller.owner, resources.store_options, caps) as store:
            yield store


def shown(item: Item | None, filters: dict[str, Any] | None) -> Item | None:
    """`item`, unless the handler's filter leaves it out: then it is not there."""
    return item if item is not None and matches(item.value, filters) else None


def check_put(value: Any, replaced: Item | None, filters: dict[str, Any] | None) -> None:
    """A put within the handler's filter: the value written, and any item it replaces.

    Raises:
        ApiError: 403, outside the filter.
    """
    if filters and (
        not matches(value, filters)
        or (replaced is not None and not matches(replaced.value, filters))
    ):
        raise ApiError(403, "forbidden", "the item is outside what you may write")
