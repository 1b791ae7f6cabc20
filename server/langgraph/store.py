"""LangGraph's store routes (`client.store.*`): put, get, delete and search items, list
namespaces. Each caller sees only its own items (`stream_store.store.OwnerStore`). A
project's `@auth.on.store` handlers see each request as LangGraph shows it (`namespace`, `key`,
...) and may rewrite its namespace, which is checked again after them; a search's filter from
them narrows the caller's own.

A namespace is a list of labels; the SDKs refuse labels with `.` (the store joins labels with
it), and so does the server, with the other labels the store cannot keep. Every refusal is a
422 naming the field, before the store is touched.

A caller shapes these queries (a filter, a prefix, an offset), so each runs on the connections
for such queries (`server.callers.caller_queries`: a pool of their own, a turn per caller, a
statement timeout), with its filter bounded here. A put meets the caller's caps on items and
bytes (`RUNSTREAM_MAX_STORE_ITEMS`, `RUNSTREAM_MAX_STORE_BYTES`) in `OwnerStore` itself, where
a graph's puts meet them too. docs/security.md, "Per-caller limits", has the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from langgraph.store.base import NOT_PROVIDED
from litestar import Controller, Response, delete, get, post, put

from server import inputs
from server.access.store import ask_store, caller_store, check_put, shown
from server.callers.auth import Caller
from server.callers.budgets import QUERY, WRITE
from server.errors import ApiError
from server.resources import Resources
from stream_store import limits

from .wire import StoreDelete, StoreListNamespaces, StorePut, StoreSearch

__all__ = ["StoreController"]

_FILTER_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def _namespace(labels: Sequence[str], field: str, *, required: bool = False) -> tuple[str, ...]:
    """`labels` as the store's namespace tuple.

    Raises:
        ApiError: 422 for an empty namespace where one is `required`, an empty label, a label
            with `.` or NUL, or `langgraph` as the first label (LangGraph reserves it).
    """
    if required and not labels:
        raise _unprocessable(f"{field} must have at least one label")
    if len(".".join(labels).encode()) > limits.STORE_NAMESPACE_MAX_BYTES:
        raise _unprocessable(
            f"{field} must be at most {limits.STORE_NAMESPACE_MAX_BYTES} bytes"
            " with its labels joined by '.'"
        )
    for place, label in enumerate(labels):
        if not label or "." in label or "\x00" in label:
            raise _unprocessable(
                f"{field}[{place}] must be a non-empty label without '.' (got {label[:80]!r})"
            )
    if labels and labels[0] == "langgraph":
        raise _unprocessable(f"{field} cannot start with 'langgraph': LangGraph reserves it")
    return tuple(labels)


def _key(key: str) -> str:
    if "\x00" in key:
        raise _unprocessable("key must not contain the NUL character")
    if len(key.encode()) > limits.STORE_KEY_MAX_BYTES:
        raise _unprocessable(f"key must be at most {limits.STORE_KEY_MAX_BYTES} bytes")
    return key


def _filter(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A search filter the store can run: `{field: value}` or `{field: {"$op": value}}`, within
    the bounds on its fields, its size and its values' nesting (`stream_store.limits`): each
    field is a condition on every item under the prefix."""
    if not value:
        return value
    if len(value) > limits.STORE_FILTER_MAX_FIELDS:
        raise _unprocessable(
            f"filter has {len(value)} fields; at most {limits.STORE_FILTER_MAX_FIELDS} are allowed"
        )
    if len(msgspec.json.encode(value)) > limits.STORE_FILTER_MAX_BYTES:
        raise _unprocessable(
            f"filter must be at most {limits.STORE_FILTER_MAX_BYTES} bytes as compact JSON"
        )
    for field, condition in value.items():
        if isinstance(condition, dict) and (unknown := set(condition) - _FILTER_OPERATORS):
            operators = ", ".join(sorted(_FILTER_OPERATORS))
            raise _unprocessable(
                f"filter.{field[:80]}: unknown operator {sorted(unknown)[0][:40]!r};"
                f" use one of {operators}"
            )
        if _depth(condition) > limits.STORE_FILTER_MAX_DEPTH:
            raise _unprocessable(
                f"filter.{field[:80]}: values may nest at most"
                f" {limits.STORE_FILTER_MAX_DEPTH} levels deep"
            )
    return value


def _depth(value: Any) -> int:
    """How deep `value` nests arrays and objects (a scalar: 0)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


class StoreController(Controller):
    """The caller's items in LangGraph's store (long-term memory shared across threads)."""

    path = "/store"
    tags = ["langgraph"]

    @put("/items", status_code=204, summary="Store or replace an item", dependencies=WRITE)
    async def put_item(self, data: StorePut, resources: Resources, caller: Caller) -> None:
        namespace = _namespace(data.namespace, "namespace", required=True)
        value: dict[str, Any] = {
            "namespace": namespace,
            "key": _key(data.key),
            "value": data.value,
            "index": data.index,
            "ttl": data.ttl,
        }
        filters = await ask_store(caller, "put", value)
        namespace = _namespace(list(value["namespace"]), "namespace", required=True)
        key = _key(value["key"])
        # no `ttl`: the project's `store.ttl.default_ttl`, as for the graphs' puts
        ttl = NOT_PROVIDED if data.ttl is None else data.ttl
        async with caller_store(resources, caller) as store:
            if filters:  # the value written, and any it replaces, must be within the filter
                check_put(data.value, await store.aget(namespace, key), filters)
            await store.aput(namespace, key, data.value, index=data.index, ttl=ttl)

    @get("/items", summary="An item, or null", dependencies=QUERY)
    async def get_item(
        self,
        resources: Resources,
        caller: Caller,
        key: str,
        namespace: str = "",
        refresh_ttl: inputs.FlagQuery = None,  # absent: the store's `refresh_on_read`
    ) -> Response[dict[str, Any] | None]:
        labels = _namespace(namespace.split(".") if namespace else [], "namespace")
        value: dict[str, Any] = {"namespace": labels, "key": _key(key)}
        filters = await ask_store(caller, "get", value)
        labels = _namespace(list(value["namespace"]), "namespace")
        async with caller_store(resources, caller) as store:
            refresh = None if refresh_ttl is None else inputs.flag(refresh_ttl, "refresh_ttl")
            item = shown(await store.aget(labels, _key(value["key"]), refresh_ttl=refresh), filters)
        return Response(item.dict() if item is not None else None)

    @delete("/items", status_code=204, summary="Delete an item", dependencies=WRITE)
    async def delete_item(self, data: StoreDelete, resources: Resources, caller: Caller) -> None:
        value: dict[str, Any] = {
            "namespace": _namespace(data.namespace, "namespace"),
            "key": _key(data.key),
        }
        filters = await ask_store(caller, "delete", value)
        namespace = _namespace(list(value["namespace"]), "namespace")
        key = _key(value["key"])
        async with caller_store(resources, caller) as store:
            if filters and shown(await store.aget(namespace, key), filters) is None:
                return  # an item the handler's filter leaves out is not there to delete
            await store.adelete(namespace, key)

    @post(
        "/items/search",
        status_code=200,
        summary="Items under a namespace prefix",
        dependencies=QUERY,
    )
    async def search_items(
        self, data: StoreSearch, resources: Resources, caller: Caller
    ) -> dict[str, list[dict[str, Any]]]:
        value: dict[str, Any] = {
            "namespace": _namespace(data.namespace_prefix, "namespace_prefix"),
            "filter": _filter(data.filter),
            "limit": data.limit,
            "offset": data.offset,
            "query": None,
            "refresh_ttl": data.refresh_ttl,
        }
        narrowed = await ask_store(caller, "search", value)
        prefix = _namespace(list(value["namespace"]), "namespace_prefix")
        # the handler's filter over the caller's: on a field both name, the handler's holds
        conditions = _filter({**(value["filter"] or {}), **(narrowed or {})})
        async with caller_store(resources, caller) as store:
            items = await store.asearch(
                prefix,
                query=data.query,
                filter=conditions,
                limit=data.limit,
                offset=data.offset,
                refresh_ttl=data.refresh_ttl,
            )
        return {"items": [item.dict() for item in items]}

    @post("/namespaces", status_code=200, summary="The caller's namespaces", dependencies=QUERY)
    async def list_namespaces(
        self, data: StoreListNamespaces, resources: Resources, caller: Caller
    ) -> dict[str, list[list[str]]]:
        value: dict[str, Any] = {
            "namespace": _namespace(data.prefix, "prefix") if data.prefix else None,
            "suffix": _namespace(data.suffix, "suffix") if data.suffix else None,
            "max_depth": data.max_depth,
            "limit": data.limit,
            "offset": data.offset,
        }
        await ask_store(caller, "list_namespaces", value)  # no values for a filter to match
        prefix = _namespace(list(value["namespace"]), "prefix") if value["namespace"] else None
        suffix = _namespace(list(value["suffix"]), "suffix") if value["suffix"] else None
        async with caller_store(resources, caller) as store:
            namespaces = await store.alist_namespaces(
                prefix=prefix,
                suffix=suffix,
                max_depth=data.max_depth,
                limit=data.limit,
                offset=data.offset,
            )
        return {"namespaces": [list(namespace) for namespace in namespaces]}
