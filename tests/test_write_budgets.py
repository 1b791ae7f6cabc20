"""Every write and every query a caller shapes is metered, and what a caller keeps is capped
(issue 20's second finding).

`POST /threads/{id}/copy`, `POST /threads/{id}/state` and `PUT /store/items` had no per-caller
limit: 200 copies in 1.9 s, 200 state updates in 3.7 s, 60 MB of store puts in 3.1 s, and one
copy of a thread with 40 updates duplicated 21.7 MB of checkpoints. Each test below failed on the
code before these limits.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from stream_store.settings import Settings
from stream_store.store import owner_label
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.processes import ROOT, Cluster
from tests.test_caller_limits import ALICE, BOB
from tests.test_langgraph_api import client_for, human
from tests.test_store_bounds import assert_error, start
from tests.test_thread_delete import checkpoint_rows

NO_SUBMIT_LIMIT = {"max_submits_per_minute": 0}


async def thread_count(settings: Settings) -> int:
    async with await schema_connection(settings) as conn:
        cur = await conn.execute("SELECT count(*) FROM runstream_threads")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def ran_thread(sdk: LangGraphClient) -> str:
    """A thread of `sdk`'s caller that one run of `chat` finished on (so it has a graph)."""
    thread = await sdk.threads.create()
    await sdk.runs.wait(thread["thread_id"], "chat", input=human("hello"))
    return str(thread["thread_id"])


def assert_too_many(response: httpx.Response, code: str) -> None:
    """A LangGraph route's 429: `code`, and a `Retry-After` of whole seconds (>= 1)."""
    assert assert_error(response, 429)["code"] == code
    assert int(response.headers["retry-after"]) >= 1, response.headers


def state_body(text: str) -> dict[str, Any]:
    return {"values": {"messages": [{"type": "human", "content": text}]}}


class TestPerMinuteBudgets:
    """`RUNSTREAM_MAX_WRITES_PER_MINUTE` and `RUNSTREAM_MAX_QUERIES_PER_MINUTE`, per caller."""

    async def test_store_puts_copies_and_patches_share_the_write_budget(
        self, start_server: StartServer
    ) -> None:
        url = await start(start_server, max_writes_per_minute=3, **NO_SUBMIT_LIMIT)
        put = {"namespace": ["n"], "key": "k", "value": {"v": 1}}
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            thread = (await client.post("/threads", json={}, headers=ALICE)).json()
            tid = thread["thread_id"]
            assert (await client.put("/store/items", json=put, headers=ALICE)).status_code == 204
            patched = await client.patch(
                f"/threads/{tid}", json={"metadata": {"a": 1}}, headers=ALICE
            )
            assert patched.status_code == 200, patched.text
            copied = await client.post(f"/threads/{tid}/copy", headers=ALICE)
            assert copied.status_code == 200, copied.text
            for refused in (
                await client.put("/store/items", json=put, headers=ALICE),
                await client.post(f"/threads/{tid}/copy", headers=ALICE),
                await client.post(f"/threads/{tid}/state", json=state_body("x"), headers=ALICE),
            ):
                error = assert_error(refused, 429)
                assert error["code"] == "too_many_writes", error
                assert "RUNSTREAM_MAX_WRITES_PER_MINUTE" in error["message"], error
                assert int(refused.headers["retry-after"]) >= 1
            # another caller has a budget of its own
            assert (await client.put("/store/items", json=put, headers=BOB)).status_code == 204

    async def test_a_refused_write_is_not_counted(
        self, start_server: StartServer, settings: Settings
    ) -> None:
        url = await start(start_server, max_writes_per_minute=1)
        bad = {"namespace": ["a.b"], "key": "k", "value": {}}
        good = {"namespace": ["n"], "key": "k", "value": {"v": 1}}
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for _ in range(3):  # 422s: nothing changed, nothing counted
                assert_error(await client.put("/store/items", json=bad, headers=ALICE), 422)
            assert (await client.put("/store/items", json=good, headers=ALICE)).status_code == 204
            refused = await client.put("/store/items", json=good, headers=ALICE)
            assert_too_many(refused, "too_many_writes")

    async def test_store_reads_and_searches_share_the_query_budget(
        self, start_server: StartServer
    ) -> None:
        url = await start(start_server, max_queries_per_minute=2)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (
                await client.post("/store/items/search", json={}, headers=ALICE)
            ).status_code == 200
            assert (await client.post("/threads/search", json={}, headers=ALICE)).status_code == 200
            item = await client.get(
                "/store/items", params={"key": "k", "namespace": "n"}, headers=ALICE
            )
            assert_too_many(item, "too_many_queries")
            listed = await client.post("/store/namespaces", json={}, headers=ALICE)
            assert_too_many(listed, "too_many_queries")
            assert (
                await client.post("/store/items/search", json={}, headers=BOB)
            ).status_code == 200


class TestCheckpointCaps:
    """State writes and copies add no checkpoints past the caller's caps; runs are not stopped."""

    async def test_state_writes_stop_at_the_threads_checkpoint_cap(
        self, start_server: StartServer, start_worker: StartWorker, settings: Settings
    ) -> None:
        await start_worker()
        probe = await start(start_server)
        tid = await ran_thread(client_for(probe, "key-a"))
        kept = await checkpoint_rows(settings, tid)
        url = await start(start_server, max_thread_checkpoints=kept + 1)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            first = await client.post(
                f"/threads/{tid}/state", json=state_body("one"), headers=ALICE
            )
            assert first.status_code == 200, first.text
            refused = await client.post(
                f"/threads/{tid}/state", json=state_body("two"), headers=ALICE
            )
            error = assert_error(refused, 413)
            assert error["code"] == "too_many_checkpoints", error
            assert "RUNSTREAM_MAX_THREAD_CHECKPOINTS" in error["message"], error
        assert await checkpoint_rows(settings, tid) == kept + 1
        # a run on the thread is not refused: the cap is on writes outside runs
        run = await client_for(url, "key-a").runs.wait(tid, "chat", input=human("again"))
        assert run["messages"][-1]["content"] == "again"

    async def test_copies_and_state_writes_stop_at_the_callers_checkpoint_bytes(
        self, start_server: StartServer, start_worker: StartWorker, settings: Settings
    ) -> None:
        await start_worker()
        probe = await start(start_server)
        tid = await ran_thread(client_for(probe, "key-a"))
        bob_tid = await ran_thread(client_for(probe, "key-b"))
        url = await start(start_server, max_checkpoint_bytes=1)
        threads = await thread_count(settings)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            for refused in (
                await client.post(f"/threads/{tid}/copy", headers=ALICE),
                await client.post(f"/threads/{tid}/state", json=state_body("x"), headers=ALICE),
            ):
                error = assert_error(refused, 413)
                assert error["code"] == "checkpoints_full", error
                assert "RUNSTREAM_MAX_CHECKPOINT_BYTES" in error["message"], error
            assert await thread_count(settings) == threads  # no copy was made
            # the cap is each caller's: bob's thread is his, and so is his own refusal
            assert_error(await client.post(f"/threads/{bob_tid}/copy", headers=BOB), 413)
        url = await start(start_server, max_checkpoint_bytes=10 * 1024 * 1024)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.post(f"/threads/{tid}/copy", headers=ALICE)).status_code == 200


class TestAssistantVersions:
    """`RUNSTREAM_MAX_ASSISTANT_VERSIONS`: each PATCH keeps a version; past the cap, 409."""

    async def test_patches_stop_at_the_version_cap(self, start_server: StartServer) -> None:
        url = await start(start_server, max_assistant_versions=3)
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            made = await client.post("/assistants", json={"graph_id": "chat"}, headers=ALICE)
            aid = made.json()["assistant_id"]
            for n in (2, 3):
                patched = await client.patch(
                    f"/assistants/{aid}", json={"name": f"v{n}"}, headers=ALICE
                )
                assert patched.json()["version"] == n, patched.text
            refused = await client.patch(f"/assistants/{aid}", json={"name": "v4"}, headers=ALICE)
            error = assert_error(refused, 409)
            assert error["code"] == "too_many_versions", error
            versions = await client.post(f"/assistants/{aid}/versions", json={}, headers=ALICE)
            assert sorted(v["version"] for v in versions.json()) == [1, 2, 3]
            assert (await client.get(f"/assistants/{aid}", headers=ALICE)).json()["name"] == "v3"


@pytest.mark.slow
@pytest.mark.serial  # times another caller's requests: alone, as the fault tests
class TestFloods:
    """One caller flooding store searches, copies or state writes leaves another caller's
    requests answering, quickly. Real server and worker processes, the flood from a process of
    its own (`tests/flood_routes.py`); `-s` prints the figures."""

    ROUNDS = 15

    async def probe_ms(self, client: httpx.AsyncClient, tid: str) -> list[float]:
        """Bob's reads of his thread and searches of his store: each one's time (ms)."""
        times = []
        for _ in range(self.ROUNDS):
            for method, path, body in (
                ("GET", f"/threads/{tid}", None),
                ("POST", "/store/items/search", {"namespace_prefix": ["mine"]}),
            ):
                began = time.perf_counter()
                answer = await client.request(method, path, json=body, headers=BOB)
                times.append((time.perf_counter() - began) * 1000)
                assert answer.status_code == 200, (path, answer.status_code, answer.text)
        return times

    async def test_floods_of_searches_copies_and_state_writes_leave_another_caller_served(
        self, cluster: Cluster, settings: Settings
    ) -> None:
        _, url = await cluster.server(RUNSTREAM_API_KEYS="key-a:alice,key-b:bob")  # defaults
        await cluster.ready_worker()
        alice = client_for(url, "key-a")
        copied_tid, state_tid = await ran_thread(alice), await ran_thread(alice)
        for i in range(20):  # a thread worth copying: 20 state writes on it
            await alice.threads.update_state(copied_tid, state_body(f"w{i} " * 200)["values"])
        bob_tid = await ran_thread(client_for(url, "key-b"))
        async with await schema_connection(settings) as conn:  # alice's 50,000 items
            await conn.execute(
                "INSERT INTO store (prefix, key, value) SELECT %s, 'k' || i,"
                " jsonb_build_object('n', i) FROM generate_series(1, 50000) AS i",
                (f"{owner_label('alice')}.big",),
            )
        heavy = {f"f{i}": {"$ne": i} for i in range(31)} | {"n": {"$gte": 0}}
        spec = [
            {
                "method": "POST",
                "path": "/store/items/search",
                "json": {"namespace_prefix": ["big"], "filter": heavy, "limit": 1000},
                "concurrency": 10,
            },
            {"method": "POST", "path": f"/threads/{copied_tid}/copy", "concurrency": 5},
            {
                "method": "POST",
                "path": f"/threads/{state_tid}/state",
                "json": state_body("flood"),
                "concurrency": 5,
            },
        ]
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await self.probe_ms(client, bob_tid)  # warm up
            quiet = await self.probe_ms(client, bob_tid)
            flood = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.flood_routes",
                url,
                "key-a",
                json.dumps(spec),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                cwd=ROOT,
            )
            assert flood.stdin is not None
            try:
                await asyncio.sleep(3.0)  # the flood is under way
                loud = await self.probe_ms(client, bob_tid)
            finally:
                flood.stdin.close()
                output, _ = await asyncio.wait_for(flood.communicate(), 120)
        answers = json.loads(output)
        quiet_ms, loud_ms = statistics.median(quiet), statistics.median(loud)
        print(
            f"\nanother caller's reads and searches, median of {len(quiet)}: {quiet_ms:.1f} ms"
            f" without the flood, {loud_ms:.1f} ms with it (slowest {max(loud):.0f} ms);"
            f" the flood's answers: {answers}"
        )
        searches = answers["/store/items/search"]
        assert searches.get("200", 0) + searches.get("422", 0) > 0, answers  # it did flood
        assert not [s for a in answers.values() for s in a if s.startswith("5")], answers
        assert loud_ms < 1000, (quiet_ms, loud_ms)  # was: 503 after 10 s, for minutes
