"""What one run may make Redis hold (the hardening issue): a run's stream is bounded in events
and bytes, an interrupted run's stream expires, and a Redis at `maxmemory` makes the API answer
503 with nothing recorded (docs/protocol.md sections 3.5 and 4.3, docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from stream_store.keys import KeySpace
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker, schema_connection, stop_worker
from tests.processes import PrivateRedis
from tests.sse import Received, iter_events, read_events, reassemble
from tests.test_runs import run_body

WORDS = " ".join(f"w{i}" for i in range(400))


@pytest.fixture
async def private_redis() -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    yield server
    server.stop()


async def stored(redis: Redis, settings: Settings, run_id: str) -> list[tuple[str, bytes]]:
    """The run's stream as Redis holds it: (event, data) per entry."""
    entries = await redis.xrange(KeySpace(settings.redis_prefix).run_events(run_id))
    return [(fields[b"e"].decode(), fields[b"d"]) for _, fields in entries]


async def ttls(redis: Redis, settings: Settings, run_id: str) -> tuple[int, int]:
    keys = KeySpace(settings.redis_prefix)
    return await redis.ttl(keys.run_record(run_id)), await redis.ttl(keys.run_events(run_id))


async def until_interrupted(client: httpx.AsyncClient, run_id: str) -> list[Received]:
    """The events up to `run`/`interrupted` (the response itself stays open)."""
    received: list[Received] = []
    async for event in iter_events(client, f"/v1/runs/{run_id}/events"):
        received.append(event)
        if event.event == "run" and event.data["status"] == "interrupted":
            return received
    raise AssertionError(f"the stream ended without an interrupt: {received[-3:]}")


def check_failed_too_large(events: list[Received], setting: str) -> None:
    """The stream ends with the outcome pair of a run failed by a stream bound."""
    assert events[-2].event == "run" and events[-2].data["status"] == "failed"
    assert events[-1].event == "error"
    assert events[-1].data["code"] == "stream_too_large"
    assert setting in events[-1].data["message"]


class TestSettings:
    """The bounds have defaults that leave room for real runs, and are read by name."""

    def test_defaults_and_environment(self) -> None:
        defaults = Settings.from_env({}, env_file="")
        assert defaults.max_run_events == 200_000
        assert defaults.max_run_stream_bytes == 64 * 1024 * 1024
        assert defaults.interrupted_ttl_s == 7 * 24 * 3600
        env = {
            "RUNSTREAM_MAX_RUN_EVENTS": "500",
            "RUNSTREAM_MAX_RUN_STREAM_BYTES": "65536",
            "RUNSTREAM_INTERRUPTED_TTL": "3600",
        }
        given = Settings.from_env(env, env_file="")
        assert (given.max_run_events, given.max_run_stream_bytes) == (500, 65536)
        assert given.interrupted_ttl_s == 3600


class TestRunStreamBounds:
    """A run that streams past a bound fails with `stream_too_large`; what it streamed stays."""

    async def test_past_max_run_events_the_run_fails_and_its_events_replay(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        server = await start_server()
        await start_worker(max_run_events=50)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body(WORDS))).json()
            url = f"/v1/runs/{run['run_id']}/events"
            events = await read_events(client, url)
            check_failed_too_large(events, "RUNSTREAM_MAX_RUN_EVENTS")
            assert len(events) == 50 + 2  # the bound, then the outcome beyond it
            (text,) = reassemble(events).values()
            assert text and WORDS.startswith(text)
            polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
            assert polled["status"] == "failed"
            assert polled["error"]["code"] == "stream_too_large"
            assert polled["last_event_id"] == events[-1].id
            # Replayable from any id, like any finished run's stream.
            again = await read_events(client, url, headers={"Last-Event-ID": events[9].id})
            assert again == events[10:]

    async def test_past_max_run_stream_bytes_the_run_fails_and_its_events_replay(
        self, start_server: StartServer, start_worker: StartWorker, redis: Redis, settings: Settings
    ) -> None:
        bound = 4096
        server = await start_server()
        await start_worker(max_run_stream_bytes=bound)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body(WORDS))).json()
            events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
            check_failed_too_large(events, "RUNSTREAM_MAX_RUN_STREAM_BYTES")
            assert str(bound) in events[-1].data["message"]
            (text,) = reassemble(events).values()
            assert text and WORDS.startswith(text)
        entries = await stored(redis, settings, run["run_id"])
        assert len(entries) == len(events)
        before_outcome = sum(len(e) + len(d) for e, d in entries[:-2])
        # Full: no further token (about 60 bytes) would have fitted.
        assert bound - 100 < before_outcome <= bound

    async def test_a_run_cancelled_at_its_bound_ends_cancelled(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        """The write refused at the bound is reported by the run's next write; a cancel that
        comes first ends the run `cancelled` (what its caller asked), in its one attempt."""
        bound, delay_s = 6, 0.5
        server = await start_server()
        await start_worker(max_run_events=bound, fake_token_delay_ms=delay_s * 1000)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body(WORDS))).json()
            url = f"/v1/runs/{run['run_id']}/events"
            await read_events(client, url, limit=bound)
            # The next token is refused at `delay_s`; the one after would report it.
            await asyncio.sleep(delay_s * 1.4)
            answer = await client.post(f"/v1/runs/{run['run_id']}/cancel")
            assert answer.status_code == 202, answer.text
            async with asyncio.timeout(10):
                events = await read_events(client, url)
            polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert [e.event for e in events[-2:]] == ["run", "done"], events[-3:]
        assert events[-1].data["status"] == "cancelled"
        assert len(events) == bound + 2
        assert not [e for e in events if e.event == "retry"]
        assert polled["status"] == "cancelled" and polled["last_event_id"] == events[-1].id


class TestInterruptedTtl:
    """An interrupted run's stream expires after RUNSTREAM_INTERRUPTED_TTL unless resumed;
    a resume takes the TTL off, and still works once the stream is gone."""

    async def test_interrupted_stream_gets_the_ttl_and_a_resumed_one_loses_it(
        self, start_server: StartServer, start_worker: StartWorker, redis: Redis, settings: Settings
    ) -> None:
        server = await start_server()
        await start_worker(interrupted_ttl_s=3600)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
            await until_interrupted(client, run["run_id"])
            record_ttl, events_ttl = await ttls(redis, settings, run["run_id"])
            assert 3590 <= record_ttl <= 3600 and 3590 <= events_ttl <= 3600

            resume = {"resume": {"approve": True}}
            answer = await client.post(f"/v1/runs/{run['run_id']}/resume", json=resume)
            assert answer.status_code == 202
            assert await ttls(redis, settings, run["run_id"]) == (-1, -1)
            events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
            assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
            record_ttl, events_ttl = await ttls(redis, settings, run["run_id"])
            assert 0 < record_ttl <= settings.stream_ttl_s and 0 < events_ttl <= record_ttl

    async def test_after_the_ttl_attach_is_410_and_resume_starts_a_new_stream(
        self, start_server: StartServer, start_worker: StartWorker, redis: Redis, settings: Settings
    ) -> None:
        server = await start_server()
        worker = await start_worker(interrupted_ttl_s=1)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
            await until_interrupted(client, run["run_id"])
            await stop_worker(worker)  # no reaper rebuilds the stream meanwhile
            await asyncio.sleep(2.2)
            assert await ttls(redis, settings, run["run_id"]) == (-2, -2)  # gone
            assert (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"] == (
                "interrupted"
            )
            gone = await client.get(f"/v1/runs/{run['run_id']}/events")
            assert gone.status_code == 410 and gone.json()["error"]["code"] == "stream_gone"

            resume = {"resume": {"approve": True}}
            answer = await client.post(f"/v1/runs/{run['run_id']}/resume", json=resume)
            assert answer.status_code == 202, answer.text
            await start_worker()
            events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        assert events[0].event == "retry" and events[0].data["discard"] == []
        statuses = [e.data["status"] for e in events if e.event == "run"]
        assert statuses == ["queued", "running", "succeeded"]
        assert events[-1].data["output"]["content"] == "milk"

    async def test_after_the_ttl_cancel_still_cancels(
        self, start_server: StartServer, start_worker: StartWorker, redis: Redis, settings: Settings
    ) -> None:
        server = await start_server()
        worker = await start_worker(interrupted_ttl_s=1)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
            await until_interrupted(client, run["run_id"])
            await stop_worker(worker)
            await asyncio.sleep(2.2)
            assert await ttls(redis, settings, run["run_id"]) == (-2, -2)
            answer = await client.post(f"/v1/runs/{run['run_id']}/cancel")
            assert answer.status_code == 202, answer.text
            polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert polled["status"] == "cancelled" and polled["last_event_id"] == "0-0"

    async def test_an_expired_interrupt_is_rebuilt_small_by_the_reaper(
        self, start_server: StartServer, start_worker: StartWorker, redis: Redis, settings: Settings
    ) -> None:
        """The reaper gives an interrupted run whose stream is gone a new one of three events
        (`retry`, `pending`, `interrupted`), with the TTL again: what it held before is freed."""
        server = await start_server()
        await start_worker(interrupted_ttl_s=1, reaper_interval_s=0.02)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
            before = await until_interrupted(client, run["run_id"])
            rebuilt: list[tuple[str, bytes]] = []
            # the reaper opens the new stream with `retry`, then says the run is interrupted
            # again (`pending`, `run`): two writes, so wait for the last
            async with asyncio.timeout(20):
                while not rebuilt or rebuilt[0][0] != "retry" or rebuilt[-1][0] != "run":
                    await asyncio.sleep(0.05)
                    rebuilt = await stored(redis, settings, run["run_id"])
        assert len(before) > 3
        assert [event for event, _ in rebuilt] == ["retry", "pending", "run"]
        assert 0 < (await ttls(redis, settings, run["run_id"]))[1] <= 1


class TestRedisOutOfMemory:
    """A Redis at `maxmemory` (noeviction) refuses writes: a submit answers 503 and records
    nothing, and a running attempt stops and is retried rather than failed."""

    async def full(self, url: str, full: bool = True) -> None:
        client = Redis.from_url(url)
        try:
            await client.config_set("maxmemory-policy", "noeviction")
            await client.config_set("maxmemory", "1" if full else "0")  # 1 byte: every write
        finally:
            await client.aclose()

    async def rows(self, settings: Settings) -> tuple[int, int]:
        async with await schema_connection(settings) as conn:
            runs = await (await conn.execute("SELECT count(*) FROM runstream_runs")).fetchone()
            threads = await (
                await conn.execute("SELECT count(*) FROM runstream_threads")
            ).fetchone()
        assert runs is not None and threads is not None
        return runs[0], threads[0]

    @pytest.mark.parametrize("submit_limit", [120, 0], ids=["quota-script", "open-script"])
    async def test_submit_answers_503_and_records_nothing(
        self,
        private_redis: PrivateRedis,
        start_server: StartServer,
        settings: Settings,
        submit_limit: int,
    ) -> None:
        """With the submit quota on, its script is the first write refused; with it off, the
        stream's `open` inside the submit transaction, which then rolls back."""
        server = await start_server(
            redis_url=private_redis.url, max_submits_per_minute=submit_limit
        )
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await self.full(private_redis.url)
            body: dict[str, Any] = run_body("hello")
            answer = await client.post("/v1/runs", json=body)
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "unavailable"
            assert await self.rows(settings) == (0, 0)
            await self.full(private_redis.url, full=False)
            assert (await client.post("/v1/runs", json=body)).status_code == 202

    async def test_a_running_attempt_is_retried_not_failed(
        self,
        private_redis: PrivateRedis,  # first: torn down after the server and worker
        start_server: StartServer,
        start_worker: StartWorker,
    ) -> None:
        fast = {"redis_url": private_redis.url, "lease_s": 1.0, "reaper_interval_s": 0.2}
        server = await start_server(**fast)
        await start_worker(**fast, fake_token_delay_ms=20)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body(WORDS))).json()
            first = await read_events(client, f"/v1/runs/{run['run_id']}/events", limit=20)
            await self.full(private_redis.url)
            await asyncio.sleep(2.5)  # past the lease: appends, renewals, the reaper all refused
            assert (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "running"
            await self.full(private_redis.url, full=False)
            events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
        assert events[: len(first)] == first
        assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"
        assert [e.data["attempt"] for e in events if e.event == "retry"] == [2]
        assert reassemble(events) == {events[-1].data["output"]["id"]: WORDS}

    async def snapshot(
        self, settings: Settings, url: str, run_id: str
    ) -> tuple[dict[str, Any], list[tuple[bytes, dict[bytes, bytes]]], dict[bytes, bytes]]:
        """The run's row, stream and record: what a refused cancel or resume must not change."""
        async with await schema_connection(settings) as conn:
            cur = await conn.execute(
                "SELECT status, dispatch, resume, settled_at, finished_at, last_event_id, kwargs"
                " FROM runstream_runs WHERE run_id = %s",
                (run_id,),
            )
            row = await cur.fetchone()
        assert row is not None and cur.description is not None
        keys = KeySpace(settings.redis_prefix)
        client = Redis.from_url(url)
        try:
            stream = await client.xrange(keys.run_events(run_id))
            record = await client.hgetall(keys.run_record(run_id))
            queued = await client.zrange(keys.queue(), 0, -1)
        finally:
            await client.aclose()
        row_dict = dict(zip([c.name for c in cur.description], row, strict=True))
        return {**row_dict, "jobs": queued}, stream, record

    async def refused_while_full(
        self,
        settings: Settings,
        url: str,
        client: httpx.AsyncClient,
        run_id: str,
        action: str,
        json: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """POST the run's `action` while Redis is full: 503 and the run's row, stream and record
        unchanged. Then again with room: that answer."""
        before = await self.snapshot(settings, url, run_id)
        await self.full(url)
        answer = await client.post(f"/v1/runs/{run_id}/{action}", json=json)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "unavailable"
        assert await self.snapshot(settings, url, run_id) == before
        await self.full(url, full=False)
        return await client.post(f"/v1/runs/{run_id}/{action}", json=json)

    async def interrupted_run(
        self,
        private_redis: PrivateRedis,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
    ) -> tuple[httpx.AsyncClient, str]:
        """A run at its interrupt, settled: its last event id is in Postgres too."""
        server = await start_server(redis_url=private_redis.url)
        await start_worker(redis_url=private_redis.url)
        client = httpx.AsyncClient(base_url=server.url, timeout=30)
        run = (await client.post("/v1/runs", json=run_body("milk", graph="approval"))).json()
        await until_interrupted(client, run["run_id"])
        async with asyncio.timeout(10):
            while True:
                row, _, _ = await self.snapshot(settings, private_redis.url, run["run_id"])
                if row["last_event_id"] is not None:
                    break
                await asyncio.sleep(0.01)
        return client, run["run_id"]

    async def test_resume_answers_503_and_leaves_the_run_interrupted(
        self,
        private_redis: PrivateRedis,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
    ) -> None:
        client, run_id = await self.interrupted_run(
            private_redis, start_server, start_worker, settings
        )
        async with contextlib.aclosing(client):
            resume = {"resume": {"approve": True}}
            answer = await self.refused_while_full(
                settings, private_redis.url, client, run_id, "resume", resume
            )
            assert answer.status_code == 202, answer.text
            events = await read_events(client, f"/v1/runs/{run_id}/events")
        statuses = [e.data["status"] for e in events if e.event == "run"]
        assert statuses == ["queued", "running", "interrupted", "queued", "running", "succeeded"]

    async def test_cancel_of_an_interrupted_run_answers_503_and_changes_nothing(
        self,
        private_redis: PrivateRedis,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
    ) -> None:
        client, run_id = await self.interrupted_run(
            private_redis, start_server, start_worker, settings
        )
        async with contextlib.aclosing(client):
            answer = await self.refused_while_full(
                settings, private_redis.url, client, run_id, "cancel"
            )
            assert answer.status_code == 202, answer.text
            events = await read_events(client, f"/v1/runs/{run_id}/events")
        assert [e.data["status"] for e in events if e.event == "run"][-2:] == [
            "interrupted",
            "cancelled",
        ]
        assert events[-1].event == "done" and events[-1].data["status"] == "cancelled"

    async def test_cancel_of_a_queued_or_running_run_answers_503_and_changes_nothing(
        self,
        private_redis: PrivateRedis,
        start_server: StartServer,
        start_worker: StartWorker,
        settings: Settings,
    ) -> None:
        """Queued (no worker yet): the cancel's own event is refused. Running: the cancel flag
        is. Either way the run goes on as if nobody had asked."""
        server = await start_server(redis_url=private_redis.url)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            queued = (await client.post("/v1/runs", json=run_body("hello"))).json()["run_id"]
            before = await self.snapshot(settings, private_redis.url, queued)
            await self.full(private_redis.url)
            answer = await client.post(f"/v1/runs/{queued}/cancel")
            assert answer.status_code == 503, answer.text
            assert await self.snapshot(settings, private_redis.url, queued) == before
            await self.full(private_redis.url, full=False)

            await start_worker(redis_url=private_redis.url, fake_token_delay_ms=20)
            text = " ".join(WORDS.split()[:60])  # a second or so at 20 ms a word
            running = (await client.post("/v1/runs", json=run_body(text))).json()["run_id"]
            await read_events(client, f"/v1/runs/{running}/events", limit=10)
            await self.full(private_redis.url)
            answer = await client.post(f"/v1/runs/{running}/cancel")
            assert answer.status_code == 503, answer.text
            await self.full(private_redis.url, full=False)
            for run_id in (queued, running):
                events = await read_events(client, f"/v1/runs/{run_id}/events")
                assert events[-1].event == "done", events[-3:]
                assert events[-1].data["status"] == "succeeded", events[-1]
