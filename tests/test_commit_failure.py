"""The double fault (issue 20): Redis takes a transition's event, then its Postgres COMMIT fails.

The caller gets 503 and the run is as it was, so its viewers must never see the status that
did not happen, nor a stream be left behind for a run that was never recorded. The commit
failure is Postgres's own: a deferred constraint trigger that raises at COMMIT, with the SQLSTATE
of a server shutting down (an `OperationalError`, as a Postgres that goes away mid-commit).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from stream_store.errors import Fenced, StreamGone
from stream_store.keys import KeySpace
from stream_store.log import EventLog
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.sse import read_events
from tests.test_redis_bounds import stored, until_interrupted
from tests.test_runs import run_body


async def fail_commits(settings: Settings, on: str) -> None:
    """From now on, a transaction that does `on` to a run (`INSERT`, or `UPDATE` of its status)
    fails at its COMMIT, after everything inside it (the Redis write too) went through."""
    when = "" if on == "INSERT" else "WHEN (OLD.status IS DISTINCT FROM NEW.status)"
    async with await schema_connection(settings) as conn:
        await conn.execute(
            "CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " RAISE EXCEPTION 'injected: the commit fails' USING ERRCODE = 'admin_shutdown';"
            " END $$"
        )
        await conn.execute(
            f"CREATE CONSTRAINT TRIGGER fail_at_commit AFTER {on} ON runstream_runs"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
            f" {when} EXECUTE FUNCTION fail_at_commit()"
        )


async def commit_again(settings: Settings) -> None:
    async with await schema_connection(settings) as conn:
        await conn.execute("DROP TRIGGER fail_at_commit ON runstream_runs")
        await conn.execute("DROP FUNCTION fail_at_commit()")


async def row_status(settings: Settings, run_id: str) -> str:
    async with await schema_connection(settings) as conn:
        cur = await conn.execute("SELECT status FROM runstream_runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    assert row is not None
    return str(row[0])


async def live_status(redis: Redis, settings: Settings, run_id: str) -> bytes | None:
    return await redis.hget(KeySpace(settings.redis_prefix).run_record(run_id), "status")  # type: ignore[misc]


def statuses(events: list[tuple[str, bytes]]) -> list[str]:
    return [json.loads(data)["status"] for event, data in events if event == "run"]


class TestCommitFailsAfterRedisTookTheEvent:
    async def test_a_cancel_of_a_queued_run_leaves_no_cancelled_event(
        self,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
        redis: Redis,
    ) -> None:
        server = await start_server()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run_id = (await client.post("/v1/runs", json=run_body("hello"))).json()["run_id"]
            await fail_commits(settings, "UPDATE")
            answer = await client.post(f"/v1/runs/{run_id}/cancel")
            assert answer.status_code == 503, answer.text
            assert await row_status(settings, run_id) == "queued"
            assert statuses(await stored(redis, settings, run_id)) == ["queued"]
            assert await live_status(redis, settings, run_id) == b"queued"
            await commit_again(settings)
            await start_worker()
            events = await read_events(client, f"/v1/runs/{run_id}/events")
        assert [e.data["status"] for e in events if e.event == "run"] == [
            "queued",
            "running",
            "succeeded",
        ]

    async def test_a_cancel_of_an_interrupted_run_leaves_no_cancelled_event(
        self,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
        redis: Redis,
    ) -> None:
        server = await start_server()
        await start_worker()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
            run_id = run["run_id"]
            await until_interrupted(client, run_id)
            before = await stored(redis, settings, run_id)
            await fail_commits(settings, "UPDATE")
            answer = await client.post(f"/v1/runs/{run_id}/cancel")
            assert answer.status_code == 503, answer.text
            assert await row_status(settings, run_id) == "interrupted"
            assert await stored(redis, settings, run_id) == before
            assert await live_status(redis, settings, run_id) == b"interrupted"
            await commit_again(settings)
            assert (await client.post(f"/v1/runs/{run_id}/cancel")).status_code == 202
            events = await read_events(client, f"/v1/runs/{run_id}/events")
        assert [e.data["status"] for e in events if e.event == "run"] == [
            "queued",
            "running",
            "interrupted",
            "cancelled",
        ]

    async def test_a_resume_leaves_no_queued_event_and_the_stream_its_ttl(
        self,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
        redis: Redis,
    ) -> None:
        server = await start_server()
        await start_worker()
        keys = KeySpace(settings.redis_prefix)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
            run_id = run["run_id"]
            await until_interrupted(client, run_id)
            before = await stored(redis, settings, run_id)
            await fail_commits(settings, "UPDATE")
            resume: dict[str, Any] = {"resume": {"approve": True}}
            answer = await client.post(f"/v1/runs/{run_id}/resume", json=resume)
            assert answer.status_code == 503, answer.text
            assert await row_status(settings, run_id) == "interrupted"
            assert await stored(redis, settings, run_id) == before
            assert await live_status(redis, settings, run_id) == b"interrupted"
            assert await redis.ttl(keys.run_events(run_id)) > 0  # still expires if abandoned
            await commit_again(settings)
            assert (await client.post(f"/v1/runs/{run_id}/resume", json=resume)).is_success
            events = await read_events(client, f"/v1/runs/{run_id}/events")
        assert [e.data["status"] for e in events if e.event == "run"] == [
            "queued",
            "running",
            "interrupted",
            "queued",
            "running",
            "succeeded",
        ]

    async def test_a_submit_leaves_no_stream_behind(
        self, start_server: StartServer, settings: Settings, redis: Redis
    ) -> None:
        server = await start_server()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await fail_commits(settings, "INSERT")
            answer = await client.post("/v1/runs", json=run_body("hello"))
            assert answer.status_code == 503, answer.text
            left = [key async for key in redis.scan_iter(f"{settings.redis_prefix}:run:*")]
            assert left == []
            await commit_again(settings)
            assert (await client.post("/v1/runs", json=run_body("hello"))).status_code == 202


class TestTheEventAfterTheCommit:
    async def test_reserve_checks_as_the_append_would_and_writes_nothing(
        self, events: EventLog, redis: Redis, settings: Settings
    ) -> None:
        keys = KeySpace(settings.redis_prefix)
        gone = str(uuid.uuid4())
        with pytest.raises(StreamGone):
            await events.reserve(gone, 1)
        assert not await redis.exists(keys.run_record(gone))  # the probe left no record
        run_id = str(uuid.uuid4())
        await events.open(run_id, owner="o", thread_id="t", attempt=1, event="run", data=b"{}")
        before = await redis.hgetall(keys.run_record(run_id))  # type: ignore[misc]
        await events.reserve(run_id, 1)
        with pytest.raises(Fenced):
            await events.reserve(run_id, 2)
        assert await redis.hgetall(keys.run_record(run_id)) == before  # type: ignore[misc]
        assert await redis.xlen(keys.run_events(run_id)) == 1

    async def test_a_resumes_queued_never_follows_an_attempts_running(
        self, events: EventLog, redis: Redis, settings: Settings
    ) -> None:
        """The reaper may enqueue a resumed run as soon as it is committed: an attempt that
        said `running` before the resume's own append keeps its status and its lease."""
        run_id = str(uuid.uuid4())
        await events.open(
            run_id,
            owner="o",
            thread_id="t",
            attempt=1,
            event="run",
            data=b'{"status":"interrupted","attempt":1}',
            status="interrupted",
        )
        await events.claim(run_id, 1, 5.0, b'{"status":"running","attempt":1}')
        with pytest.raises(Fenced):
            await events.append(
                run_id,
                1,
                "run",
                b'{"status":"queued","attempt":1}',
                status="queued",
                expect_status="interrupted",
            )
        record = await events.live_record(run_id)
        assert record is not None and record.status == "running"
        assert record.lease_until is not None
        assert statuses(await stored(redis, settings, run_id)) == ["interrupted", "running"]
