"""What one caller may ask of LangGraph's store, and keep in it (issue 20's first finding).

A store search with a filter of 20,000 conditions held a pooled connection for 21.5 s, and ten of
them left every other caller's requests answering 503; a 300 KB key or label was a 500 from
Postgres's index row limit; and nothing bounded what a caller kept. Each test below failed on
the code before these bounds.

The caps on what a caller keeps hold for its graphs' writes through `runtime.store` too (issue
31: with the item cap at 100 a graph wrote 3,150 items while the route answered 413):
`TestGraphWrites`.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from langgraph.store.base import PutOp

from stream_store import limits
from stream_store.errors import QuotaExceeded
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.store import OwnerStore, StoreCaps
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.sse import read_events
from tests.test_caller_limits import ALICE, API_KEYS, BOB
from tests.test_langgraph_store import store_rows

SEARCH = "/store/items/search"


def assert_error(response: httpx.Response, status: int) -> dict[str, str]:
    """A LangGraph route's error: `status`, with `{"detail", "code", "request_id"}` as JSON;
    `message` is the detail."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"detail", "code", "request_id"}, body
    assert body["request_id"] == response.headers["x-request-id"], body
    return {"code": body["code"], "message": body["detail"]}


async def start(start_server: StartServer, **changes: Any) -> str:
    return (await start_server(api_keys=API_KEYS, **changes)).url


async def put(client: httpx.AsyncClient, key: str, value: dict[str, Any], **headers: str) -> Any:
    body = {"namespace": ["notes"], "key": key, "value": value}
    return await client.put("/store/items", json=body, headers=headers or ALICE)


class TestSearchFilterBounds:
    """A search filter is bounded in fields, bytes and nesting before it reaches Postgres."""

    @pytest.mark.parametrize(
        ("conditions", "says"),
        [
            ({f"f{i}": i for i in range(20_000)}, "20000 fields"),
            ({f"f{i}": i for i in range(limits.STORE_FILTER_MAX_FIELDS + 1)}, "fields"),
            ({"f": "x" * (limits.STORE_FILTER_MAX_BYTES + 1)}, "bytes"),
            ({"f": {"$eq": [[[[[[[[[1]]]]]]]]]}}, "nest"),
        ],
        ids=["20000-conditions", "too-many-fields", "too-many-bytes", "too-deep"],
    )
    async def test_a_filter_past_its_bounds_is_refused_before_the_store(
        self, start_server: StartServer, settings: Settings, conditions: Any, says: str
    ) -> None:
        url = await start(start_server)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await put(client, "k", {"f": 1})).status_code == 204
            before = await store_rows(settings)
            refused = await client.post(SEARCH, json={"filter": conditions}, headers=ALICE)
            error = assert_error(refused, 422)
            assert says in error["message"], error
            assert await store_rows(settings) == before

    async def test_a_filter_within_its_bounds_still_searches(
        self, start_server: StartServer
    ) -> None:
        url = await start(start_server)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await put(client, "a", {"f0": 0, "deep": [[[[[[[1]]]]]]]})).status_code == 204
            assert (await put(client, "b", {"f0": 1})).status_code == 204
            widest = {f"f{i}": {"$ne": -1} for i in range(1, limits.STORE_FILTER_MAX_FIELDS)}
            found = await client.post(
                SEARCH,
                json={"filter": {"f0": 0, "deep": [[[[[[[1]]]]]]]}},
                headers=ALICE,
            )
            assert [i["key"] for i in found.json()["items"]] == ["a"], found.text
            # 32 fields are allowed (the absent ones compare as SQL NULL: no match)
            wide = await client.post(SEARCH, json={"filter": {"f0": 0, **widest}}, headers=ALICE)
            assert wide.status_code == 200, wide.text


class TestStatementTimeout:
    """A store query that runs past `RUNSTREAM_QUERY_TIMEOUT_MS` is cancelled by Postgres."""

    async def test_a_search_past_the_timeout_is_cancelled_and_the_connection_serves_on(
        self, start_server: StartServer, settings: Settings
    ) -> None:
        url = await start(start_server, query_timeout_ms=200, max_concurrent_queries=1)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await put(client, "k7", {"n": 7})).status_code == 204
            # A query that cannot finish: the store's table is locked by another session, so
            # the search waits until its statement timeout, however fast the machine is.
            async with await schema_connection(settings) as locker, locker.transaction():
                await locker.execute("LOCK TABLE store IN ACCESS EXCLUSIVE MODE")
                began = time.monotonic()
                cancelled = await client.post(
                    SEARCH, json={"namespace_prefix": ["notes"]}, headers=ALICE
                )
                waited_s = time.monotonic() - began
            error = assert_error(cancelled, 422)
            assert error["code"] == "query_timeout", error
            assert "RUNSTREAM_QUERY_TIMEOUT_MS" in error["message"], error
            assert waited_s < 5, waited_s
            # the pool's connection came back usable, and the caller's turn was given back
            item = await client.get(
                "/store/items", params={"namespace": "notes", "key": "k7"}, headers=ALICE
            )
            assert item.status_code == 200 and item.json()["value"] == {"n": 7}, item.text


class TestKeysAndLabels:
    """A key or a namespace too long for the store's index is a 422, not Postgres's 500."""

    @pytest.mark.parametrize("where", ["key", "label"])
    async def test_a_300_kb_key_or_label_is_refused(
        self, start_server: StartServer, settings: Settings, where: str
    ) -> None:
        url = await start(start_server)
        long = "k" * 300_000
        body: dict[str, Any] = {"namespace": ["notes"], "key": "k", "value": {}}
        body["key" if where == "key" else "namespace"] = long if where == "key" else [long]
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            error = assert_error(await client.put("/store/items", json=body, headers=ALICE), 422)
            assert str(limits.STORE_KEY_MAX_BYTES) in error["message"], error
        assert await store_rows(settings) == []

    async def test_the_longest_key_and_namespace_allowed_are_stored(
        self, start_server: StartServer
    ) -> None:
        url = await start(start_server)
        # multi-byte characters: the bound is on bytes, as the index's is
        key = "é" * (limits.STORE_KEY_MAX_BYTES // 2)
        namespace = ["ü" * 200, "ö" * 200, "x" * (limits.STORE_NAMESPACE_MAX_BYTES - 802)]
        body = {"namespace": namespace, "key": key, "value": {"v": 1}}
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            # the owner's label goes in front: a long owner name must still fit
            stored = await client.put("/store/items", json=body, headers=ALICE)
            assert stored.status_code == 204, stored.text
            read = await client.get(
                "/store/items", params={"namespace": ".".join(namespace), "key": key}, headers=ALICE
            )
            assert read.json()["value"] == {"v": 1}


class TestWhatACallerKeeps:
    """`RUNSTREAM_MAX_STORE_ITEMS` and `RUNSTREAM_MAX_STORE_BYTES` bound one caller's store."""

    async def test_items_past_the_cap_are_refused_until_one_is_deleted(
        self, start_server: StartServer, settings: Settings
    ) -> None:
        url = await start(start_server, max_store_items=3)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for key in ("a", "b", "c"):
                assert (await put(client, key, {"v": key})).status_code == 204
            before = await store_rows(settings)
            error = assert_error(await put(client, "d", {"v": "d"}), 413)
            assert error["code"] == "store_full" and "RUNSTREAM_MAX_STORE_ITEMS" in error["message"]
            assert await store_rows(settings) == before
            # replacing an item keeps the count; another caller has a store of its own
            assert (await put(client, "a", {"v": "again"})).status_code == 204
            assert (await put(client, "d", {"v": "d"}, **BOB)).status_code == 204
            gone = await client.request(
                "DELETE", "/store/items", json={"namespace": ["notes"], "key": "b"}, headers=ALICE
            )
            assert gone.status_code == 204
            assert (await put(client, "d", {"v": "d"})).status_code == 204

    async def test_bytes_past_the_cap_are_refused(
        self, start_server: StartServer, settings: Settings
    ) -> None:
        url = await start(start_server, max_store_bytes=1500)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await put(client, "a", {"text": "a" * 600})).status_code == 204
            assert (await put(client, "a", {"text": "b" * 900})).status_code == 204  # replaced
            before = await store_rows(settings)
            error = assert_error(await put(client, "b", {"text": "c" * 900}), 413)
            assert "RUNSTREAM_MAX_STORE_BYTES" in error["message"], error
            assert await store_rows(settings) == before
            assert (await put(client, "b", {"text": "d" * 100})).status_code == 204


FILLS = {
    "fills_store": "tests.custom_graphs:fills_store",
    "fills_store_sync": "tests.custom_graphs:fills_store_sync",
}


async def start_with_graphs(
    start_server: StartServer, start_worker: StartWorker, **changes: Any
) -> str:
    """A server and a worker with the store-filling graphs, both with `changes`."""
    url = await start(start_server, graphs=FILLS, **changes)
    await start_worker(api_keys=API_KEYS, graphs=FILLS, **changes)
    return url


async def graph_run(
    client: httpx.AsyncClient, text: str, graph: str = "fills_store", headers: Any = ALICE
) -> dict[str, Any]:
    """The record of a run of `graph` with `text` ("put 3 x", "delete 1 x"), once it ended."""
    body = {"graph": graph, "input": {"messages": [{"role": "user", "content": text}]}}
    submitted = await client.post("/v1/runs", json=body, headers=headers)
    assert submitted.status_code == 202, submitted.text
    run_id = submitted.json()["run_id"]
    events = await read_events(client, f"/v1/runs/{run_id}/events", headers=headers)
    assert events[-1].event in ("done", "error"), events[-1]
    record: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}", headers=headers)).json()
    return record


def assert_store_full(run: dict[str, Any], setting: str = "RUNSTREAM_MAX_STORE_ITEMS") -> None:
    """The run failed at its store write: the graph's node raised `QuotaExceeded`."""
    assert run["status"] == "failed", run
    message = run["error"]["message"]
    assert message.startswith("QuotaExceeded: ") and setting in message, run["error"]


async def keys_of(settings: Settings) -> list[str]:
    return sorted(row[1] for row in await store_rows(settings))


class TestGraphWrites:
    """A graph's writes through `runtime.store` meet the owner's caps in the same place as the
    store routes' (`OwnerStore`), counted with them (issue 31)."""

    async def test_a_graphs_store_writes_count_against_the_owners_caps(
        self, start_server: StartServer, start_worker: StartWorker, settings: Settings
    ) -> None:
        url = await start_with_graphs(start_server, start_worker, max_store_items=5)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for key in ("a", "b"):
                assert (await put(client, key, {"v": key})).status_code == 204
            # the graph's batch of three fits beside the route's two
            assert (await graph_run(client, "put 3 x"))["status"] == "succeeded"
            assert await keys_of(settings) == ["a", "b", "x0", "x1", "x2"]
            # the route counts the graph's items ...
            error = assert_error(await put(client, "c", {"v": "c"}), 413)
            assert error["code"] == "store_full", error
            # ... and the graph the route's: two more would be 7 (alone, the graph has 3)
            before = await store_rows(settings)
            assert_store_full(await graph_run(client, "put 2 y"))
            assert await store_rows(settings) == before  # the batch is refused whole
            # items it replaces do not count; another owner's store is its own
            assert (await graph_run(client, "put 3 x"))["status"] == "succeeded"
            assert (await graph_run(client, "put 5 y", headers=BOB))["status"] == "succeeded"

    async def test_a_sync_nodes_store_writes_meet_the_same_caps(
        self, start_server: StartServer, start_worker: StartWorker, settings: Settings
    ) -> None:
        url = await start_with_graphs(start_server, start_worker, max_store_items=3)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            done = await graph_run(client, "put 3 x", graph="fills_store_sync")
            assert done["status"] == "succeeded", done
            before = await store_rows(settings)
            assert_store_full(await graph_run(client, "put 1 y", graph="fills_store_sync"))
            assert await store_rows(settings) == before

    async def test_deletes_still_work_when_the_store_is_full(
        self, start_server: StartServer, start_worker: StartWorker, settings: Settings
    ) -> None:
        url = await start_with_graphs(start_server, start_worker, max_store_items=3)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await graph_run(client, "put 3 x"))["status"] == "succeeded"
            assert_error(await put(client, "a", {"v": "a"}), 413)
            assert_store_full(await graph_run(client, "put 1 y"))
            # full: the graph deletes one of its items, the route another
            assert (await graph_run(client, "delete 1 x"))["status"] == "succeeded"
            gone = await client.request(
                "DELETE", "/store/items", json={"namespace": ["filled"], "key": "x1"}, headers=ALICE
            )
            assert gone.status_code == 204, gone.text
            assert await keys_of(settings) == ["x2"]
            # and there is room again, for either
            assert (await graph_run(client, "put 1 y"))["status"] == "succeeded"
            assert (await put(client, "a", {"v": "a"})).status_code == 204
            assert await keys_of(settings) == ["a", "x2", "y0"]

    async def test_a_batch_counts_each_item_it_leaves_and_their_bytes(
        self, settings: Settings
    ) -> None:
        """One `abatch` is counted whole: the last put of a key is the one kept, a key it
        deletes frees its place, and its values' bytes add up."""
        async with open_services(settings) as services:
            alice = OwnerStore(services.store, "alice", StoreCaps(max_items=3, max_bytes=300))
            four = [PutOp(("n",), f"k{i}", {"i": i}) for i in range(4)]
            with pytest.raises(QuotaExceeded, match="this write 4") as refused:
                await alice.abatch(four)
            assert refused.value.code == "store_full"
            assert await keys_of(settings) == []
            # the same key four times is one item, the value put last
            await alice.abatch([PutOp(("n",), "k", {"i": i}) for i in range(4)])
            assert (await alice.aget(("n",), "k")).value == {"i": 3}  # type: ignore[union-attr]
            # three more would be four; deleting one in the same batch leaves three
            three = [PutOp(("n",), f"k{i}", {"i": i}) for i in range(3)]
            with pytest.raises(QuotaExceeded):
                await alice.abatch(three)
            await alice.abatch([PutOp(("n",), "k", None), *three])
            assert await keys_of(settings) == ["k0", "k1", "k2"]
            # bytes: two values of 200 bytes are past 300 together, whatever each is alone
            big = [PutOp(("n",), f"k{i}", {"t": "x" * 192}) for i in range(2)]
            with pytest.raises(QuotaExceeded, match="RUNSTREAM_MAX_STORE_BYTES"):
                await alice.abatch(big)
            # reads and deletes never count
            assert len(await alice.asearch(("n",))) == 3
            await alice.adelete(("n",), "k0")
            assert await keys_of(settings) == ["k1", "k2"]
