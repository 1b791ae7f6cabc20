"""Retention: idle threads are deleted after RUNSTREAM_THREAD_RETENTION (issue 4)."""

from __future__ import annotations

import asyncio

import httpx
import psycopg

from stream_store.settings import Settings
from tests.conftest import StartWorker
from tests.sse import read_events
from tests.test_runs import run_body


class TestThreadRetention:
    """A thread idle past the retention is gone for good; one waiting on a person is kept."""

    async def test_idle_threads_expire_and_waiting_ones_stay(
        self, client: httpx.AsyncClient, start_worker: StartWorker, settings: Settings
    ) -> None:
        await start_worker(thread_retention_s=1, reaper_interval_s=0.1)
        done = (await client.post("/v1/runs", json=run_body("old news"))).json()
        await read_events(client, f"/v1/runs/{done['run_id']}/events")
        waiting = (await client.post("/v1/runs", json=run_body("hold", graph="approval"))).json()
        for _ in range(500):
            if (await client.get(f"/v1/runs/{waiting['run_id']}")).json()[
                "status"
            ] == "interrupted":
                break
            await asyncio.sleep(0.01)
        for _ in range(100):
            if (await client.get(f"/v1/threads/{done['thread_id']}")).status_code == 404:
                break
            await asyncio.sleep(0.05)
        assert (await client.get(f"/v1/threads/{done['thread_id']}")).status_code == 404
        assert (await client.get(f"/v1/runs/{done['run_id']}")).status_code == 404
        assert (await client.get(f"/v1/threads/{waiting['thread_id']}")).status_code == 200
        schema = settings.database_schema
        async with await psycopg.AsyncConnection.connect(str(settings.database_url)) as conn:
            cur = await conn.execute(
                f'SELECT count(*) FROM "{schema}".checkpoints WHERE thread_id = %s',
                (done["thread_id"],),
            )
            assert await cur.fetchone() == (0,)
