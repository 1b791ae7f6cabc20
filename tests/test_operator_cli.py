"""The operator's command line (issue 13 part 4): `runstream status`, `runs`, `threads`.

Each test runs the installed `runstream` command in a subprocess, as an operator would,
against a server and worker started by the fixtures on real Redis and Postgres.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from bench.launcher import free_port
from clients import AsyncClient
from stream_store.keys import KeySpace
from stream_store.settings import Settings
from tests.conftest import ServerHandle, StartServer, StartWorker, schema_connection

pytestmark = pytest.mark.slow  # starts the whole product: ./scripts/test runs it


RUNSTREAM = Path(sys.executable).parent / "runstream"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def runstream(settings: Settings, *args: str, url: str | None = None, **env: str) -> Result:
    """`runstream *args` with the test's services (and server), from an empty directory."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    environ |= {
        "RUNSTREAM_REDIS_URL": str(settings.redis_url),
        "RUNSTREAM_DATABASE_URL": str(settings.database_url),
        "RUNSTREAM_DATABASE_SCHEMA": settings.database_schema,
        "RUNSTREAM_REDIS_PREFIX": settings.redis_prefix,
        "RUNSTREAM_LEASE_MS": str(int(settings.lease_s * 1000)),
    }
    if url:
        environ["RUNSTREAM_URL"] = url
    environ |= env
    proc = await asyncio.create_subprocess_exec(
        str(RUNSTREAM),
        *args,
        env=environ,
        cwd="/",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def without_token(obj: Any) -> Any:
    """An API object with its `stream_url` dropped: every answer issues a fresh token."""
    if isinstance(obj, dict):
        return {k: without_token(v) for k, v in obj.items() if k != "stream_url"}
    if isinstance(obj, list):
        return [without_token(v) for v in obj]
    return obj


async def wait_for_status(client: AsyncClient, run_id: str, status: str) -> None:
    for _ in range(400):
        if (await client.get(run_id)).status == status:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {run_id} never became {status}")


SLOW = {"configurable": {"fake_token_delay_ms": 200}}  # an answer of many words takes long
LONG_MESSAGE = " ".join(f"w{i}" for i in range(200))


class TestStatus:
    """`runstream status` shows the deployment from Redis and Postgres, for people and scripts."""

    async def test_status_shows_the_live_worker_and_the_run_it_executes(
        self, settings: Settings, server: ServerHandle, start_worker: StartWorker
    ) -> None:
        await start_worker()
        async with AsyncClient(server.url) as client:
            run = await client.submit(LONG_MESSAGE, config=SLOW)
            await wait_for_status(client, run.run_id, "running")
            for _ in range(50):  # the next heartbeat names the run (every 2 s)
                report = await runstream(settings, "status", "--json")
                workers = report.json()["workers"]
                if workers and run.run_id in workers[0]["run_ids"]:
                    break
                await asyncio.sleep(0.2)
            assert report.code == 0, report.err
            status = report.json()
            assert status["healthy"] is True
            assert status["redis"]["ok"] and status["postgres"]["ok"]
            assert status["redis"]["rtt_ms"] >= 0 and status["postgres"]["rtt_ms"] >= 0
            [worker] = status["workers"]
            assert worker["run_ids"] == [run.run_id]
            assert worker["pid"] == os.getpid()  # the fixture runs it in this process
            assert status["queue"]["running"] == 1
            assert status["stuck"] == []  # its worker renews the lease

            text = await runstream(settings, "status")
            assert text.code == 0
            assert "workers: 1 alive" in text.out
            assert worker["worker_id"] in text.out and run.run_id in text.out
            assert "redis     ok" in text.out and "postgres  ok" in text.out
            await client.cancel(run.run_id)

    async def test_a_stopped_worker_leaves_the_list_at_once(
        self, settings: Settings, server: ServerHandle, start_worker: StartWorker
    ) -> None:
        from tests.conftest import stop_worker

        worker = await start_worker()
        for _ in range(50):
            if (await runstream(settings, "status", "--json")).json()["workers"]:
                break
            await asyncio.sleep(0.1)
        await stop_worker(worker)
        assert (await runstream(settings, "status", "--json")).json()["workers"] == []

    async def test_without_a_worker_runs_wait_and_the_oldest_is_named(
        self, settings: Settings, server: ServerHandle
    ) -> None:
        async with AsyncClient(server.url) as client:
            first = await client.submit("first")
            await client.submit("second")
        report = await runstream(settings, "status", "--json")
        assert report.code == 0, report.err
        status = report.json()
        assert status["workers"] == []
        queue = status["queue"]
        assert (queue["queued"], queue["running"], queue["jobs"]) == (2, 0, 2)
        assert queue["oldest_queued"]["run_id"] == first.run_id
        assert queue["oldest_queued"]["owner"] == "local"

        text = (await runstream(settings, "status")).out
        assert "workers: 0 alive" in text
        assert f"oldest queued: run {first.run_id}" in text
        assert "no worker is alive: queued runs wait" in text

    async def test_a_run_past_its_lease_is_reported_stuck(
        self, settings: Settings, server: ServerHandle
    ) -> None:
        """As a killed worker leaves it: running in Postgres, its lease in Redis run out."""
        async with AsyncClient(server.url) as client:
            run = await client.submit("left behind")
        async with await schema_connection(settings) as conn:
            await conn.execute(
                "UPDATE runstream_runs SET status = 'running',"
                " claimed_at = now() - interval '1 minute' WHERE run_id = %s",
                (run.run_id,),
            )
        redis = Redis.from_url(str(settings.redis_url))
        try:
            record = KeySpace(settings.redis_prefix).run_record(run.run_id)
            await redis.hset(record, "lease_until", 1000)  # long ago
        finally:
            await redis.aclose()
        status = (await runstream(settings, "status", "--json")).json()
        [stuck] = status["stuck"]
        assert (stuck["run_id"], stuck["reason"], stuck["attempt"]) == (
            run.run_id,
            "lease expired",
            1,
        )
        text = (await runstream(settings, "status")).out
        assert "stuck past their lease (1):" in text and run.run_id in text
        assert "none is alive" in text

    async def test_a_service_down_exits_1_and_hides_credentials(
        self, settings: Settings, server: ServerHandle
    ) -> None:
        closed = free_port()
        report = await runstream(
            settings,
            "status",
            "--json",
            RUNSTREAM_DATABASE_URL=f"postgresql://ops:hunter2@127.0.0.1:{closed}/db",
        )
        assert report.code == 1
        status = report.json()
        assert status["healthy"] is False
        assert status["redis"]["ok"] is True and status["postgres"]["ok"] is False
        assert status["postgres"]["error"] and status["queue"] is None
        text = await runstream(
            settings,
            "status",
            RUNSTREAM_REDIS_URL=f"redis://:hunter2@127.0.0.1:{closed}/0",
        )
        assert text.code == 1
        assert "redis     DOWN" in text.out and "postgres  ok" in text.out
        assert "! Redis is down" in text.out
        assert "hunter2" not in report.out + report.err + text.out + text.err


class TestRunsAndThreads:
    """`runstream runs` and `threads` act through the API and print what it answers."""

    async def test_runs_list_show_and_cancel(
        self, settings: Settings, server: ServerHandle
    ) -> None:
        async with AsyncClient(server.url) as client, httpx.AsyncClient(base_url=server.url) as api:
            run = await client.submit("queued with no worker")
            listed = await runstream(
                settings, "runs", "list", "--thread", run.thread_id, "--json", url=server.url
            )
            assert listed.code == 0, listed.err
            expected = (await api.get(f"/v1/threads/{run.thread_id}/runs")).json()
            assert without_token(listed.json()) == without_token(expected)

            across = await runstream(settings, "runs", "list", url=server.url)
            assert run.run_id in across.out and run.thread_id in across.out
            assert "queued" in across.out

            shown = await runstream(settings, "runs", "show", run.run_id, "--json", url=server.url)
            expected = (await api.get(f"/v1/runs/{run.run_id}")).json()
            assert without_token(shown.json()) == without_token(expected)
            table = await runstream(settings, "runs", "show", run.run_id, url=server.url)
            assert "status:" in table.out and "queued" in table.out

            cancelled = await runstream(settings, "runs", "cancel", run.run_id, url=server.url)
            assert cancelled.code == 0, cancelled.err
            assert cancelled.out == f"run {run.run_id} cancelled\n"
            assert (await client.get(run.run_id)).status == "cancelled"

            again = await runstream(settings, "runs", "cancel", run.run_id, url=server.url)
            assert again.code == 1 and "409 run_finished" in again.err
            only = await runstream(
                settings, "runs", "list", "--status", "cancelled", "--json", url=server.url
            )
            assert [r["run_id"] for r in only.json()["runs"]] == [run.run_id]

    async def test_threads_list_show_and_delete(
        self, settings: Settings, server: ServerHandle, start_worker: StartWorker
    ) -> None:
        await start_worker()
        async with AsyncClient(server.url) as client, httpx.AsyncClient(base_url=server.url) as api:
            run = await client.wait((await client.submit("plan the trip")).run_id)
            listed = await runstream(settings, "threads", "list", "--json", url=server.url)
            assert listed.json() == (await api.get("/v1/threads")).json()
            table = await runstream(settings, "threads", "list", url=server.url)
            assert run.thread_id in table.out and "plan the trip" in table.out

            shown = await runstream(
                settings, "threads", "show", run.thread_id, "--json", url=server.url
            )
            assert shown.json() == (await api.get(f"/v1/threads/{run.thread_id}")).json()
            detail = await runstream(settings, "threads", "show", run.thread_id, url=server.url)
            assert "user: plan the trip" in detail.out and run.run_id in detail.out

            deleted = await runstream(
                settings, "threads", "delete", run.thread_id, "--json", url=server.url
            )
            assert deleted.json() == {"thread_id": run.thread_id, "deleted": True}
            assert (await api.get(f"/v1/threads/{run.thread_id}")).status_code == 404
            gone = await runstream(settings, "threads", "show", run.thread_id, url=server.url)
            assert gone.code == 1 and "404 not_found" in gone.err

    async def test_another_key_cannot_see_or_cancel_the_runs(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        server = await start_server(api_keys={"key-alice": "alice", "key-bob": "bob"})
        async with AsyncClient(server.url, "key-alice") as alice:
            run = await alice.submit("mine")
        as_bob = {"url": server.url, "RUNSTREAM_API_KEY": "key-bob"}
        shown = await runstream(settings, "runs", "show", run.run_id, **as_bob)
        cancel = await runstream(settings, "runs", "cancel", run.run_id, **as_bob)
        threads = await runstream(settings, "threads", "list", "--json", **as_bob)
        for refused in (shown, cancel):
            assert refused.code == 1 and refused.out == ""
            assert "404 not_found" in refused.err and "not this API key's" in refused.err
        assert threads.json()["threads"] == []
        outputs = "".join(r.out + r.err for r in (shown, cancel, threads))
        assert "key-bob" not in outputs
        async with AsyncClient(server.url, "key-alice") as alice:
            assert (await alice.get(run.run_id)).status == "queued"  # untouched

        mine = await runstream(
            settings, "runs", "show", run.run_id, "--api-key", "key-alice", url=server.url
        )
        assert mine.code == 0 and run.run_id in mine.out and "key-alice" not in mine.out
        nobody = await runstream(settings, "threads", "list", url=server.url)
        assert nobody.code == 1 and "401" in nobody.err
