"""LangGraph's store routes (`client.store.*`): put, get, delete and search items, list
namespaces. Each caller sees only its own items (`stream_store.store.OwnerStore`).

A namespace is a list of labels; the SDKs refuse labels with `.` (the store joins labels with
it), and so does the server, with the other labels the store cannot keep. Every refusal is a
422 naming the field, before the store is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from litestar import Controller, Response, delete, get, post, put
from litestar.params import Parameter

from stream_store.store import OwnerStore

from ..auth import Caller
from ..errors import ApiError
from ..resources import Resources
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
    return key


def _filter(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A search filter the store can run: `{field: value}` or `{field: {"$op": value}}`."""
    for field, condition in (value or {}).items():
        if isinstance(condition, dict) and (unknown := set(condition) - _FILTER_OPERATORS):
            operators = ", ".join(sorted(_FILTER_OPERATORS))
            raise _unprocessable(
                f"filter.{field[:80]}: unknown operator {sorted(unknown)[0][:40]!r};"
                f" use one of {operators}"
            )
    return value


class StoreController(Controller):
    """The caller's items in LangGraph's store (long-term memory shared across threads)."""

    path = "/store"
    tags = ["langgraph"]

    @put("/items", status_code=204, summary="Store or replace an item")
    async def put_item(self, data: StorePut, resources: Resources, caller: Caller) -> None:
        namespace = _namespace(data.namespace, "namespace", required=True)
        store = OwnerStore(resources.store, caller.owner)
        await store.aput(namespace, _key(data.key), data.value, index=data.index, ttl=data.ttl)

    @get("/items", summary="An item, or null")
    async def get_item(
        self,
        resources: Resources,
        caller: Caller,
        key: str,
        namespace: str = "",
        refresh_ttl: Annotated[bool | None, Parameter(required=False)] = None,
    ) -> Response[dict[str, Any] | None]:
        labels = _namespace(namespace.split(".") if namespace else [], "namespace")
        store = OwnerStore(resources.store, caller.owner)
        item = await store.aget(labels, _key(key), refresh_ttl=refresh_ttl)
        return Response(item.dict() if item is not None else None)

    @delete("/items", status_code=204, summary="Delete an item")
    async def delete_item(self, data: StoreDelete, resources: Resources, caller: Caller) -> None:
        namespace = _namespace(data.namespace, "namespace")
        await OwnerStore(resources.store, caller.owner).adelete(namespace, _key(data.key))

    @post("/items/search", status_code=200, summary="Items under a namespace prefix")
    async def search_items(
        self, data: StoreSearch, resources: Resources, caller: Caller
    ) -> dict[str, list[dict[str, Any]]]:
        prefix = _namespace(data.namespace_prefix, "namespace_prefix")
        items = await OwnerStore(resources.store, caller.owner).asearch(
            prefix,
            filter=_filter(data.filter),
            limit=data.limit,
            offset=data.offset,
            refresh_ttl=data.refresh_ttl,
        )
        return {"items": [item.dict() for item in items]}

    @post("/namespaces", status_code=200, summary="The caller's namespaces")
    async def list_namespaces(
        self, data: StoreListNamespaces, resources: Resources, caller: Caller
    ) -> dict[str, list[list[str]]]:
        namespaces = await OwnerStore(resources.store, caller.owner).alist_namespaces(
            prefix=_namespace(data.prefix, "prefix") if data.prefix else None,
            suffix=_namespace(data.suffix, "suffix") if data.suffix else None,
            max_depth=data.max_depth,
            limit=data.limit,
            offset=data.offset,
        )
        return {"namespaces": [list(namespace) for namespace in namespaces]}
