"""LangGraph's store (`client.store.*`), driven by LangGraph's own Python SDK, unmodified.

The store is LangGraph's `AsyncPostgresStore` in runstream's schema; each owner (API key) sees
only its own items, through the HTTP routes and in the graphs its runs execute.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from server.langgraph.wire import STORE_MAX_DEPTH, STORE_MAX_TTL_MINUTES, STORE_MIN_TTL_MINUTES
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.store import owner_label
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.test_langgraph_api import API_KEYS, client_for, human, messages_of


async def store_rows(settings: Settings) -> list[tuple[Any, ...]]:
    """Every row of the store's table, in order: what must not change after a refusal."""
    async with await schema_connection(settings) as conn:
        cur = await conn.execute("SELECT prefix, key, value, expires_at FROM store ORDER BY 1, 2")
        return list(await cur.fetchall())


@pytest.fixture
async def keyed(start_server: StartServer) -> tuple[LangGraphClient, LangGraphClient, str]:
    """Alice's and bob's SDK clients on one server, and its URL."""
    server = await start_server(api_keys=API_KEYS)
    return client_for(server.url, "key-a"), client_for(server.url, "key-b"), server.url


async def test_put_get_search_list_and_delete_round_trip(
    keyed: tuple[LangGraphClient, LangGraphClient, str],
) -> None:
    alice, _, _ = keyed
    await alice.store.put_item(["memories", "u1"], "food", {"likes": "pizza", "n": 1})
    await alice.store.put_item(["memories", "u2"], "food", {"likes": "soup", "n": 2})
    await alice.store.put_item(["notes"], "todo", {"text": "buy milk"})

    item = await alice.store.get_item(["memories", "u1"], "food")
    assert {k: item[k] for k in ("namespace", "key", "value")} == {
        "namespace": ["memories", "u1"],
        "key": "food",
        "value": {"likes": "pizza", "n": 1},
    }
    created = datetime.fromisoformat(str(item["created_at"]))
    assert datetime.fromisoformat(str(item["updated_at"])) == created

    # a second put replaces the value and moves updated_at only
    await alice.store.put_item(["memories", "u1"], "food", {"likes": "pasta", "n": 3})
    replaced = await alice.store.get_item(["memories", "u1"], "food")
    assert replaced["value"] == {"likes": "pasta", "n": 3}
    assert datetime.fromisoformat(str(replaced["created_at"])) == created
    assert datetime.fromisoformat(str(replaced["updated_at"])) > created

    found = await alice.store.search_items(["memories"])
    assert sorted((i["namespace"][1], i["value"]["likes"]) for i in found["items"]) == [
        ("u1", "pasta"),
        ("u2", "soup"),
    ]
    assert all("score" in i for i in found["items"])
    filtered = await alice.store.search_items(["memories"], filter={"likes": "soup"})
    assert [i["namespace"] for i in filtered["items"]] == [["memories", "u2"]]
    ranged = await alice.store.search_items([], filter={"n": {"$gte": 3}})
    assert [i["namespace"] for i in ranged["items"]] == [["memories", "u1"]]
    assert len((await alice.store.search_items([], limit=1, offset=1))["items"]) == 1

    listed = await alice.store.list_namespaces()
    assert sorted(listed["namespaces"]) == [["memories", "u1"], ["memories", "u2"], ["notes"]]
    shallow = await alice.store.list_namespaces(max_depth=1)
    assert sorted(shallow["namespaces"]) == [["memories"], ["notes"]]
    under = await alice.store.list_namespaces(prefix=["memories"], suffix=["u2"])
    assert under["namespaces"] == [["memories", "u2"]]

    await alice.store.delete_item(["memories", "u1"], "food")
    assert await alice.store.get_item(["memories", "u1"], "food") is None
    remaining = await alice.store.search_items(["memories"])
    assert [i["namespace"] for i in remaining["items"]] == [["memories", "u2"]]


async def test_another_key_sees_nothing_and_cannot_overwrite_or_delete(
    keyed: tuple[LangGraphClient, LangGraphClient, str], settings: Settings
) -> None:
    alice, bob, _ = keyed
    await alice.store.put_item(["memories", "u_1"], "secret", {"text": "alice's"})
    before = await store_rows(settings)

    assert await bob.store.get_item(["memories", "u_1"], "secret") is None
    assert (await bob.store.search_items([]))["items"] == []
    assert (await bob.store.list_namespaces())["namespaces"] == []
    # the namespace as it is stored, alice's label first, is just another of bob's namespaces
    as_stored = [owner_label("alice"), "memories", "u_1"]
    assert await bob.store.get_item(as_stored, "secret") is None
    assert (await bob.store.search_items([owner_label("alice")]))["items"] == []
    # `_` and `%` are no wildcards; `*` in a listing matches bob's labels only
    assert (await bob.store.search_items(["memories", "u%"]))["items"] == []
    assert (await bob.store.list_namespaces(prefix=["*"]))["namespaces"] == []
    await bob.store.delete_item(["memories", "u_1"], "secret")
    assert await store_rows(settings) == before

    await bob.store.put_item(["memories", "u_1"], "secret", {"text": "bob's"})
    mine = await alice.store.get_item(["memories", "u_1"], "secret")
    theirs = await bob.store.get_item(["memories", "u_1"], "secret")
    assert (mine["value"], theirs["value"]) == ({"text": "alice's"}, {"text": "bob's"})
    assert (await alice.store.list_namespaces())["namespaces"] == [["memories", "u_1"]]


async def test_bad_input_is_a_clear_422_and_changes_nothing(
    keyed: tuple[LangGraphClient, LangGraphClient, str], settings: Settings
) -> None:
    alice, _, url = keyed
    await alice.store.put_item(["kept"], "k", {"v": 1})
    before = await store_rows(settings)
    refused: list[tuple[str, str, dict[str, Any]]] = [
        ("PUT", "/store/items", {"json": {"namespace": ["a.b"], "key": "k", "value": {}}}),
        ("PUT", "/store/items", {"json": {"namespace": [""], "key": "k", "value": {}}}),
        ("PUT", "/store/items", {"json": {"namespace": [], "key": "k", "value": {}}}),
        ("PUT", "/store/items", {"json": {"namespace": ["langgraph"], "key": "k", "value": {}}}),
        ("PUT", "/store/items", {"json": {"namespace": ["kept"], "key": "k", "value": [1]}}),
        ("PUT", "/store/items", {"json": {"namespace": ["kept"], "key": "k", "value": "x"}}),
        ("PUT", "/store/items", {"json": {"namespace": ["kept"], "value": {}}}),
        ("PUT", "/store/items", {"json": {"namespace": "kept", "key": "k", "value": {}}}),
        (
            "PUT",
            "/store/items",
            {"json": {"namespace": ["kept"], "key": "k", "value": {}, "ttl": -1}},
        ),
        (
            "PUT",
            "/store/items",
            {"json": {"namespace": ["kept"], "key": "k", "value": {}, "index": "x"}},
        ),
        ("DELETE", "/store/items", {"json": {"namespace": ["a.b"], "key": "k"}}),
        ("GET", "/store/items", {"params": {"namespace": "kept..x", "key": "k"}}),
        ("GET", "/store/items", {"params": {"namespace": "kept"}}),
        ("GET", "/store/items", {"params": {"namespace": "kept", "key": "k\x00"}}),
        ("POST", "/store/items/search", {"json": {"filter": {"v": {"$regex": "."}}}}),
        ("POST", "/store/items/search", {"json": {"limit": 0}}),
        ("POST", "/store/items/search", {"json": {"offset": -1}}),
        ("POST", "/store/items/search", {"json": {"namespace_prefix": ["a.b"]}}),
        ("POST", "/store/namespaces", {"json": {"max_depth": 0}}),
        # past what Postgres's integer and interval hold (found by tests/test_fuzz_api.py: 500)
        ("POST", "/store/namespaces", {"json": {"max_depth": 38315166570269982720}}),
        ("POST", "/store/namespaces", {"json": {"max_depth": 2**31 - 1}}),
        (
            "PUT",
            "/store/items",
            {"json": {"namespace": ["kept"], "key": "k", "value": {}, "ttl": 1e300}},
        ),
        (
            "PUT",
            "/store/items",
            {"json": {"namespace": ["kept"], "key": "k", "value": {}, "ttl": 3.9e-141}},
        ),
        ("POST", "/store/namespaces", {"json": {"prefix": ["a.b"]}}),
    ]
    async with httpx.AsyncClient(base_url=url, headers={"x-api-key": "key-a"}) as raw:
        for method, path, kwargs in refused:
            response = await raw.request(method, path, **kwargs)
            where = f"{method} {path} {kwargs}"
            assert response.status_code in (400, 422), (where, response.text)
            assert response.json()["detail"], where
        unauthenticated = await raw.get(
            "/store/items", params={"namespace": "kept", "key": "k"}, headers={"x-api-key": ""}
        )
        assert unauthenticated.status_code == 401
    assert await store_rows(settings) == before


async def test_the_bounds_of_depth_and_ttl_are_taken(
    keyed: tuple[LangGraphClient, LangGraphClient, str],
) -> None:
    alice, _, _ = keyed
    await alice.store.put_item(["far"], "k", {"v": 1}, ttl=STORE_MAX_TTL_MINUTES)
    assert (await alice.store.get_item(["far"], "k"))["value"] == {"v": 1}
    await alice.store.put_item(["near"], "k", {"v": 2}, ttl=STORE_MIN_TTL_MINUTES)
    listed = await alice.store.list_namespaces(prefix=["far"], max_depth=STORE_MAX_DEPTH)
    assert listed["namespaces"] == [["far"]]


async def test_an_item_past_its_ttl_is_gone(
    keyed: tuple[LangGraphClient, LangGraphClient, str], settings: Settings
) -> None:
    alice, _, _ = keyed
    await alice.store.put_item(["short"], "k", {"v": 1}, ttl=5)
    await alice.store.put_item(["long"], "k", {"v": 2})
    assert (await alice.store.get_item(["short"], "k"))["value"] == {"v": 1}
    async with await schema_connection(settings) as conn:  # five minutes later
        await conn.execute(
            "UPDATE store SET expires_at = now() - interval '1 second' WHERE expires_at IS NOT NULL"
        )
    assert await alice.store.get_item(["short"], "k") is None
    assert [i["key"] for i in (await alice.store.search_items([]))["items"]] == ["k"]
    assert (await alice.store.list_namespaces())["namespaces"] == [["long"]]


async def test_a_graph_uses_the_store_as_its_runs_owner_sees_it(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    graphs = {"remembers": "tests.custom_graphs:remembers"}
    server = await start_server(api_keys=API_KEYS, graphs=graphs)
    await start_worker(api_keys=API_KEYS, graphs=graphs)
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")

    async def ask(client: LangGraphClient, text: str) -> str:
        out = await client.runs.wait(None, "remembers", input=human(text))
        assert isinstance(out, dict)
        return str(messages_of(out)[-1][1])

    assert await ask(alice, "apples") == "I remember: "
    assert await ask(alice, "bananas") == "I remember: apples"  # another thread, same owner
    assert await ask(bob, "cherries") == "I remember: "
    mine = await alice.store.search_items(["memories"])
    assert sorted(i["value"]["text"] for i in mine["items"]) == ["apples", "bananas"]
    theirs = await bob.store.search_items(["memories"])
    assert [i["value"]["text"] for i in theirs["items"]] == ["cherries"]


async def test_closing_a_process_leaves_none_of_its_tasks_pending(settings: Settings) -> None:
    """The store's TTL sweeper and LangGraph's batching task are stopped with the rest, so a
    server or worker that shuts down logs no "Task was destroyed but it is pending"."""
    before = asyncio.all_tasks()
    async with open_services(settings) as services:
        await services.store.aput(("kept",), "k", {"v": 1})  # through the batching task
        assert await services.store.aget(("kept",), "k") is not None
    assert asyncio.all_tasks() - before == set()
