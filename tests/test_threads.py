"""Threads: create, list, read back from the checkpointer, delete for good (issue 2)."""

from __future__ import annotations

import httpx
from redis.asyncio import Redis

from runner.job_loop import JobLoop
from stream_store.keys import KeySpace
from stream_store.settings import Settings
from tests.sse import read_events
from tests.test_runs import run_body


async def finish(client: httpx.AsyncClient, text: str, thread_id: str | None = None) -> dict:
    path = f"/v1/threads/{thread_id}/runs" if thread_id else "/v1/runs"
    run = (await client.post(path, json=run_body(text))).json()
    await read_events(client, f"/v1/runs/{run['run_id']}/events")
    return run


class TestThreads:
    """A thread is listed newest first, titled by its first user message, and reads back."""

    async def test_create_empty_thread(self, client: httpx.AsyncClient) -> None:
        response = await client.post("/v1/threads", json={"metadata": {"topic": "x"}})
        assert response.status_code == 201
        thread = response.json()
        assert thread["status"] == "idle" and thread["title"] is None
        assert thread["metadata"] == {"topic": "x"}
        read = (await client.get(f"/v1/threads/{thread['thread_id']}")).json()
        assert read["messages"] == []
        assert (await client.post("/v1/threads")).status_code == 201

    async def test_list_is_newest_first_titled_and_paginated(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        made = [await finish(client, f"conversation number {i}") for i in range(5)]
        page1 = (await client.get("/v1/threads", params={"limit": 2})).json()
        page2 = (
            await client.get("/v1/threads", params={"limit": 2, "cursor": page1["next_cursor"]})
        ).json()
        page3 = (
            await client.get("/v1/threads", params={"limit": 2, "cursor": page2["next_cursor"]})
        ).json()
        assert page3["next_cursor"] is None
        listed = page1["threads"] + page2["threads"] + page3["threads"]
        assert [t["thread_id"] for t in listed] == [r["thread_id"] for r in reversed(made)]
        assert [t["title"] for t in listed] == [f"conversation number {i}" for i in (4, 3, 2, 1, 0)]

    async def test_messages_and_runs_read_back_in_order(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        first = await finish(client, "hello there")
        second = await finish(client, "and again", first["thread_id"])
        thread = (await client.get(f"/v1/threads/{first['thread_id']}")).json()
        assert [(m["role"], m["content"]) for m in thread["messages"]] == [
            ("user", "hello there"),
            ("assistant", "hello there"),
            ("user", "and again"),
            ("assistant", "and again"),
        ]
        assert thread["title"] == "hello there"
        runs = (await client.get(f"/v1/threads/{first['thread_id']}/runs")).json()["runs"]
        assert [r["run_id"] for r in runs] == [first["run_id"], second["run_id"]]
        assert {r["status"] for r in runs} == {"succeeded"}

    async def test_delete_removes_thread_checkpoints_runs_and_streams(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        run = await finish(client, "forget me")
        keep = await finish(client, "keep me")
        assert (await client.delete(f"/v1/threads/{run['thread_id']}")).status_code == 204
        assert (await client.get(f"/v1/threads/{run['thread_id']}")).status_code == 404
        assert (await client.get(f"/v1/runs/{run['run_id']}")).status_code == 404
        assert (await client.delete(f"/v1/threads/{run['thread_id']}")).status_code == 404
        redis = Redis.from_url(str(settings.redis_url))
        try:
            keys = KeySpace(settings.redis_prefix)
            assert not await redis.exists(keys.run_events(run["run_id"]))
            assert not await redis.exists(keys.run_record(run["run_id"]))
            assert await redis.exists(keys.run_events(keep["run_id"]))
        finally:
            await redis.aclose()
        kept = (await client.get(f"/v1/threads/{keep['thread_id']}")).json()
        assert len(kept["messages"]) == 2

    async def test_delete_while_a_run_is_active_is_409(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        slow = {"configurable": {"fake_token_delay_ms": 20}}
        run = (await client.post("/v1/runs", json=run_body("a b c d e f g h", config=slow))).json()
        response = await client.delete(f"/v1/threads/{run['thread_id']}")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "thread_busy"
        events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        assert events[-1].data["status"] == "succeeded"


class TestExpiredStream:
    """A finished run whose stream has expired answers 410 with a pointer, never a partial."""

    async def test_attach_after_expiry_is_410(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        run = await finish(client, "short lived")
        redis = Redis.from_url(str(settings.redis_url))
        try:
            keys = KeySpace(settings.redis_prefix)
            await redis.delete(keys.run_events(run["run_id"]), keys.run_record(run["run_id"]))
        finally:
            await redis.aclose()
        response = await client.get(f"/v1/runs/{run['run_id']}/events")
        assert response.status_code == 410
        error = response.json()["error"]
        assert error["code"] == "stream_gone"
        assert f"/v1/threads/{run['thread_id']}" in error["message"]
        assert (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "succeeded"

    async def test_finished_streams_get_the_configured_ttl(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        run = await finish(client, "ttl check")
        redis = Redis.from_url(str(settings.redis_url))
        try:
            ttl = await redis.ttl(KeySpace(settings.redis_prefix).run_events(run["run_id"]))
        finally:
            await redis.aclose()
        assert 0 < ttl <= settings.stream_ttl_s


class TestOperations:
    """Probes, metrics and the OpenAPI schema answer."""

    async def test_health_ready_metrics_schema(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["redis"] and ready.json()["postgres"]
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200 and "runstream" in metrics.text
        schema = (await client.get("/schema/openapi.json")).json()
        assert "/v1/runs" in schema["paths"] and "/v1/threads/{thread_id}" in schema["paths"]
