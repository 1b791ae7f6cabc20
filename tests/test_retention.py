"""Retention: idle threads are deleted after RUNSTREAM_THREAD_RETENTION (issue 4)."""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest

from stream_store.errors import NotFound
from stream_store.run_submit import NewRun
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.thread_deletion import delete_thread
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

    async def test_a_thread_used_after_it_was_found_idle_is_not_deleted(
        self, settings: Settings
    ) -> None:
        """Retention deletes only a thread still idle when it deletes it: a run submitted (or a
        cron set) between finding it and deleting it keeps it."""
        async with open_services(settings) as services:
            records, lifecycle = services.thread_records, services.lifecycle
            new = NewRun(owner="o", graph="chat", input={"messages": []})
            thread_id = (await lifecycle.submit(new)).run.thread_id
            run = (await services.run_records.thread_runs(thread_id, "o"))[0]
            await services.run_records.cancel_idle_run(run.run_id, "o")
            await asyncio.sleep(1.1)
            assert (thread_id, "o") in await records.idle_threads(1)
            again = NewRun(owner="o", graph="chat", input={"messages": []}, thread_id=thread_id)
            second = (await lifecycle.submit(again)).run  # used meanwhile
            with pytest.raises(NotFound):
                await delete_thread(records, services.events, thread_id, "o", idle_s=1)
            assert await records.get_thread(thread_id, "o") is not None
            await services.run_records.cancel_idle_run(second.run_id, "o")
            await asyncio.sleep(1.1)
            await delete_thread(records, services.events, thread_id, "o", idle_s=1)  # idle again
            assert await records.get_thread(thread_id, "o") is None
