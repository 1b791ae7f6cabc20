"""LangGraph's thread search: its filters, order and `select`, and the `values` filter.

runstream keeps no copy of a thread's values beside it: they are read from its checkpoints
through its graph, as `threads.get` reads them. So a `values` filter cannot be one SQL
condition: the threads the other filters leave are read in the order asked, page by page,
and Postgres's `@>` (LangGraph's containment) decides on each one's values as JSON, until the
page asked for is full. Bounded: at most `limits.THREAD_VALUES_SCAN_MAX` candidates read (then
422: narrow it), each page's queries on the caller's query connections, and the
whole search under the caller query timeout (`RUNSTREAM_QUERY_TIMEOUT_MS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from server.errors import ApiError
from server.resources import Resources
from stream_store import limits
from stream_store.errors import QueryTimeout
from stream_store.thread_records import ThreadRecord, ThreadRecords

from .statuses import THREAD_STATUS
from .views import thread_view
from .wire import Thread, ThreadSearch

__all__ = ["search_threads"]

_PAGE = 50  # candidates read at once for a `values` filter


async def search_threads(
    resources: Resources,
    owner: str,
    body: ThreadSearch,
    ids: list[str] | None,
    auth_filters: dict[str, Any] | None,
) -> list[Any]:
    """The page of `owner`'s threads `body` asks for, as LangGraph shows them (only the
    `select`ed fields when it names some).

    Order as LangGraph's: by `sort_by` (descending unless `sort_order` is `asc`); without
    `sort_by`, most recently updated first (`sort_order` alone changes nothing).

    Raises:
        ApiError: 422, a `values` filter that would read more than the bound.
        QueryTimeout: the search ran past the caller query timeout.
    """
    records = resources.searched_threads(owner)

    async def page(limit: int, offset: int) -> list[ThreadRecord]:
        return await records.search_threads(
            owner,
            metadata=body.metadata or {},
            named=(THREAD_STATUS, body.status),
            limit=limit,
            offset=offset,
            ids=ids,
            auth_filters=auth_filters,
            sort_by=body.sort_by or "updated_at",
            descending=body.sort_by is None or body.sort_order != "asc",
        )

    if body.values:
        timeout_s = resources.settings.query_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                views = await _with_values(resources, records, page, body)
        except TimeoutError:
            raise QueryTimeout(
                f"the search ran past {resources.settings.query_timeout_ms} ms"
                " (RUNSTREAM_QUERY_TIMEOUT_MS); narrow it (metadata, status, ids)"
            ) from None
    else:
        views = [await thread_view(resources, t) for t in await page(body.limit, body.offset)]
    if not body.select:
        return views
    return [
        {k: v for k, v in msgspec.to_builtins(view).items() if k in body.select} for view in views
    ]


async def _with_values(
    resources: Resources,
    records: ThreadRecords,
    page: Callable[[int, int], Awaitable[list[ThreadRecord]]],
    body: ThreadSearch,
) -> list[Thread]:
    """The threads whose current values contain `body.values`, `body.offset` of them skipped,
    at most `body.limit`, reading at most `THREAD_VALUES_SCAN_MAX` candidates."""
    assert body.values
    found: list[Thread] = []
    wanted = body.offset + body.limit
    scanned = 0
    while len(found) < wanted:
        if scanned >= limits.THREAD_VALUES_SCAN_MAX:
            raise ApiError(
                422,
                "invalid_request",
                f"the values filter read {scanned} threads' state and found {len(found)} of"
                f" the {wanted} asked for; narrow it with metadata, status or ids",
            )
        candidates = await page(_PAGE, scanned)
        views = [await thread_view(resources, t) for t in candidates]
        documents = [
            None if v.values is None else msgspec.json.encode(v.values).decode() for v in views
        ]
        hits = await records.containing(documents, body.values) if views else []
        found += [view for view, hit in zip(views, hits, strict=True) if hit]
        scanned += len(candidates)
        if len(candidates) < _PAGE:
            break
    return found[body.offset : wanted]
