"""Guarantee 3: concurrent submissions with one Idempotency-Key create one run."""

from __future__ import annotations

import asyncio

import httpx
import psycopg

from runner.job_loop import JobLoop
from stream_store.settings import Settings
from tests.test_runs import run_body


async def count_runs(settings: Settings) -> int:
    async with await psycopg.AsyncConnection.connect(str(settings.database_url)) as conn:
        cur = await conn.execute(
            f'SELECT count(*) FROM "{settings.database_schema}".runstream_runs'
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


class TestIdempotencyKey:
    """One key, one run, however the requests race; a different body with the key is 422."""

    async def test_twenty_concurrent_submits_create_one_run(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        headers = {"Idempotency-Key": "order-42"}
        responses = await asyncio.gather(
            *(client.post("/v1/runs", json=run_body("hi"), headers=headers) for _ in range(20))
        )
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] * 19 + [202]
        assert len({r.json()["run_id"] for r in responses}) == 1
        assert len({r.json()["thread_id"] for r in responses}) == 1
        assert await count_runs(settings) == 1
        threads = (await client.get("/v1/threads")).json()["threads"]
        assert len(threads) == 1

    async def test_same_key_different_body_is_422_and_creates_nothing(
        self, client: httpx.AsyncClient, worker: JobLoop, settings: Settings
    ) -> None:
        headers = {"Idempotency-Key": "k1"}
        first = await client.post("/v1/runs", json=run_body("hello"), headers=headers)
        assert first.status_code == 202
        second = await client.post("/v1/runs", json=run_body("goodbye"), headers=headers)
        assert second.status_code == 422
        assert second.json()["error"]["code"] == "idempotency_key_reused"
        assert await count_runs(settings) == 1

    async def test_replay_returns_the_same_run_later_too(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        headers = {"Idempotency-Key": "k2"}
        first = (await client.post("/v1/runs", json=run_body("x"), headers=headers)).json()
        await asyncio.sleep(0.2)
        again = await client.post("/v1/runs", json=run_body("x"), headers=headers)
        assert again.status_code == 200
        assert again.json()["run_id"] == first["run_id"]

    async def test_same_key_on_a_thread_route_is_scoped_by_body(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        thread = (await client.post("/v1/threads")).json()
        path = f"/v1/threads/{thread['thread_id']}/runs"
        first = await client.post(path, json=run_body("a"), headers={"Idempotency-Key": "t"})
        assert first.status_code == 202
        other = await client.post("/v1/runs", json=run_body("a"), headers={"Idempotency-Key": "t"})
        assert other.status_code == 422
