"""Per-caller limits (issue 9, findings 2 and 5): submits per minute, queued and running runs,
open SSE connections per caller and per stream token.

Each refusal is a 429 with `Retry-After` and the `{"error": {"code", "message", "request_id"}}`
shape, and records nothing. The limits are held in Redis and Postgres, so they hold across
server processes; they are per caller, so another API key is never refused for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from server.callers.quotas import SLOT_TTL_PINGS, CallerQuotas
from stream_store.keys import KeySpace
from stream_store.log import EventLog
from stream_store.settings import Settings, SettingsError
from tests.conftest import ServerHandle, StartServer, StartWorker, schema_connection
from tests.processes import ROOT, Cluster
from tests.sse import iter_events
from tests.test_bad_input import assert_error, state_of

API_KEYS = {"key-a": "alice", "key-b": "bob"}
ALICE, BOB = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
# Only the limit under test; the others off, so that a refusal changes nothing at all.
NO_LIMITS: dict[str, Any] = {
    "max_submits_per_minute": 0,
    "max_active_runs": 0,
    "max_sse_connections": 0,
    "max_sse_connections_per_token": 0,
}


def run_body(text: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}, **extra}


def assert_too_many(response: httpx.Response, code: str) -> dict[str, str]:
    """A 429 with the error shape, `code`, and a `Retry-After` of whole seconds (>= 1)."""
    error = assert_error(response, 429)
    assert error["code"] == code, error
    assert int(response.headers["retry-after"]) >= 1, response.headers
    return error


async def start(start_server: StartServer, **limits: Any) -> ServerHandle:
    return await start_server(**{**NO_LIMITS, **limits})


async def counts(settings: Settings) -> tuple[int, int]:
    """(runs, threads) recorded in Postgres."""
    async with await schema_connection(settings) as conn:
        runs = await (await conn.execute("SELECT count(*) FROM runstream_runs")).fetchone()
        threads = await (await conn.execute("SELECT count(*) FROM runstream_threads")).fetchone()
    assert runs is not None and threads is not None
    return runs[0], threads[0]


async def attach(
    client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """GET an event stream: left open when it is one (the caller closes it), else read."""
    response = await client.send(client.build_request("GET", url, headers=headers), stream=True)
    if response.status_code != 200:
        await response.aread()
        await response.aclose()
    return response


async def attach_when_free(
    client: httpx.AsyncClient, url: str, within_s: float, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, float]:
    """Attach again and again until it is not refused; the open stream and how long it took."""
    began = time.monotonic()
    async with asyncio.timeout(within_s):
        while True:
            response = await attach(client, url, headers)
            if response.status_code != 429:
                return response, time.monotonic() - began
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def open_streams() -> AsyncIterator[list[httpx.Response]]:
    """A list to put open event streams in; each is closed at exit."""
    streams: list[httpx.Response] = []
    try:
        yield streams
    finally:
        for stream in streams:
            await stream.aclose()


class TestSettings:
    """The four limits are settings with generous defaults; 0 turns one off."""

    def test_defaults_and_environment(self) -> None:
        defaults = Settings.from_env({"RUNSTREAM_API_KEYS": "k:alice"}, env_file="")
        assert (
            defaults.max_submits_per_minute,
            defaults.max_active_runs,
            defaults.max_sse_connections,
            defaults.max_sse_connections_per_token,
        ) == (120, 50, 100, 10)
        names = [
            "RUNSTREAM_MAX_SUBMITS_PER_MINUTE",
            "RUNSTREAM_MAX_ACTIVE_RUNS",
            "RUNSTREAM_MAX_SSE_CONNECTIONS",
            "RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN",
        ]
        read = Settings.from_env(dict(zip(names, ["7", "0", "3", "1"], strict=True)), env_file="")
        assert (
            read.max_submits_per_minute,
            read.max_active_runs,
            read.max_sse_connections,
            read.max_sse_connections_per_token,
        ) == (7, 0, 3, 1)
        for name in names:
            with pytest.raises(SettingsError, match=name):
                Settings.from_env({name: "-1"}, env_file="")


class TestSubmitsPerMinute:
    """`RUNSTREAM_MAX_SUBMITS_PER_MINUTE` counts runs and threads a caller creates, any 60 s."""

    async def test_a_submit_past_the_limit_is_refused_and_records_nothing(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_submits_per_minute=3)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            first = await client.post("/v1/runs", json=run_body())
            assert first.status_code == 202, first.text
            thread_id = first.json()["thread_id"]
            on_thread = await client.post(
                f"/v1/threads/{thread_id}/runs", json=run_body(multitask="enqueue")
            )
            assert on_thread.status_code == 202, on_thread.text
            assert (await client.post("/v1/threads", json={})).status_code == 201
            before = await state_of(settings)
            for refused in (
                await client.post("/v1/runs", json=run_body()),
                await client.post(
                    f"/v1/threads/{thread_id}/runs", json=run_body(multitask="enqueue")
                ),
                await client.post("/v1/threads", json={}),
            ):
                error = assert_too_many(refused, "too_many_submits")
                assert "RUNSTREAM_MAX_SUBMITS_PER_MINUTE" in error["message"]
                assert int(refused.headers["retry-after"]) <= 60
            assert await state_of(settings) == before  # refused submits are not even counted

    async def test_the_limit_holds_across_server_processes(self, start_server: StartServer) -> None:
        a = await start(start_server, max_submits_per_minute=4)
        b = await start(start_server, max_submits_per_minute=4)
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
        ):
            answers = [
                await client.post("/v1/runs", json=run_body()) for client in (on_a, on_b) * 2
            ]
            assert [r.status_code for r in answers] == [202] * 4
            assert_too_many(await on_a.post("/v1/runs", json=run_body()), "too_many_submits")
            assert_too_many(await on_b.post("/v1/runs", json=run_body()), "too_many_submits")

    async def test_concurrent_submits_never_pass_the_limit(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_submits_per_minute=5)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            answers = await asyncio.gather(
                *(client.post("/v1/runs", json=run_body(f"run {i}")) for i in range(30))
            )
        assert sorted(r.status_code for r in answers) == [202] * 5 + [429] * 25
        assert await counts(settings) == (5, 5)

    async def test_another_caller_has_its_own_budget(self, start_server: StartServer) -> None:
        server = await start(
            start_server,
            max_submits_per_minute=2,
            api_keys=API_KEYS,
            signing_key="test-signing-key",
        )
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for _ in range(2):
                assert (await client.post("/v1/runs", json=run_body(), headers=ALICE)).is_success
            refused = await client.post("/v1/runs", json=run_body(), headers=ALICE)
            assert_too_many(refused, "too_many_submits")
            for _ in range(2):
                answer = await client.post("/v1/runs", json=run_body(), headers=BOB)
                assert answer.status_code == 202, answer.text


class TestActiveRuns:
    """`RUNSTREAM_MAX_ACTIVE_RUNS` bounds a caller's queued and running runs, counted exactly
    in Postgres inside the submit's transaction."""

    async def test_a_run_past_the_limit_is_refused_and_records_nothing(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_active_runs=2)  # no worker: runs stay queued
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            first = await client.post("/v1/runs", json=run_body())
            assert first.status_code == 202, first.text
            assert (await client.post("/v1/runs", json=run_body())).status_code == 202
            thread_id = first.json()["thread_id"]
            before = await state_of(settings)
            for refused in (
                await client.post("/v1/runs", json=run_body()),  # would create a thread
                await client.post(
                    f"/v1/threads/{thread_id}/runs", json=run_body(multitask="enqueue")
                ),
            ):
                error = assert_too_many(refused, "too_many_active_runs")
                assert "2 queued or running runs" in error["message"], error
                assert "RUNSTREAM_MAX_ACTIVE_RUNS" in error["message"], error
            assert await state_of(settings) == before
            # Creating an empty thread runs nothing: it is not an active run.
            assert (await client.post("/v1/threads", json={})).status_code == 201

    async def test_concurrent_submits_of_one_caller_never_pass_the_limit(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_active_runs=5)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            answers = await asyncio.gather(
                *(client.post("/v1/runs", json=run_body(f"run {i}")) for i in range(30))
            )
        assert sorted(r.status_code for r in answers) == [202] * 5 + [429] * 25
        assert await counts(settings) == (5, 5)

    async def test_a_replay_by_idempotency_key_at_the_limit_answers_the_run(
        self, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_active_runs=1)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            key = {"Idempotency-Key": "once"}
            first = await client.post("/v1/runs", json=run_body(), headers=key)
            assert first.status_code == 202, first.text
            again = await client.post("/v1/runs", json=run_body(), headers=key)
            assert again.status_code == 200, again.text
            assert again.json()["run_id"] == first.json()["run_id"]
            other = await client.post("/v1/runs", json=run_body(), headers={"Idempotency-Key": "b"})
            assert_too_many(other, "too_many_active_runs")

    async def test_the_limit_frees_when_runs_are_cancelled_or_finish(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        server = await start(start_server, max_active_runs=2)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            runs = [(await client.post("/v1/runs", json=run_body())).json() for _ in range(2)]
            assert_too_many(await client.post("/v1/runs", json=run_body()), "too_many_active_runs")
            cancelled = await client.post(f"/v1/runs/{runs[0]['run_id']}/cancel")
            assert cancelled.json()["status"] == "cancelled", cancelled.text
            third = await client.post("/v1/runs", json=run_body())
            assert third.status_code == 202, third.text
            assert_too_many(await client.post("/v1/runs", json=run_body()), "too_many_active_runs")
            await start_worker()
            for run in (runs[1], third.json()):
                events = [event.event async for event in iter_events(client, run["stream_url"])]
                assert events[-1] == "done", events
            answers = [await client.post("/v1/runs", json=run_body()) for _ in range(2)]
            assert [a.status_code for a in answers] == [202, 202], answers[-1].text

    async def test_an_interrupted_run_does_not_count(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        server = await start(start_server, max_active_runs=1)
        await start_worker()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            waiting = (await client.post("/v1/runs", json=run_body(graph="approval"))).json()
            async for event in iter_events(client, waiting["stream_url"]):
                if event.event == "run" and event.data["status"] == "interrupted":
                    break
            answer = await client.post("/v1/runs", json=run_body())
            assert answer.status_code == 202, answer.text

    async def test_another_caller_is_not_refused(self, start_server: StartServer) -> None:
        server = await start(
            start_server, max_active_runs=1, api_keys=API_KEYS, signing_key="test-signing-key"
        )
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert (await client.post("/v1/runs", json=run_body(), headers=ALICE)).is_success
            refused = await client.post("/v1/runs", json=run_body(), headers=ALICE)
            assert_too_many(refused, "too_many_active_runs")
            answer = await client.post("/v1/runs", json=run_body(), headers=BOB)
            assert answer.status_code == 202, answer.text


class TestSseConnections:
    """`RUNSTREAM_MAX_SSE_CONNECTIONS` (per caller) and `..._PER_TOKEN` bound open event
    streams; a slot frees when its client leaves, and lapses when its server vanished."""

    @pytest.mark.slow
    async def test_500_attaches_with_one_key_no_longer_all_succeed(
        self, start_server: StartServer
    ) -> None:
        """The finding: 500 concurrent attaches with one API key all used to stay open."""
        server = await start_server()  # the default limits
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client,
            open_streams() as streams,
        ):
            run = (await client.post("/v1/runs", json=run_body())).json()
            path = f"/v1/runs/{run['run_id']}/events"
            answers = await asyncio.gather(*(attach(client, path) for _ in range(500)))
            streams.extend(a for a in answers if a.status_code == 200)
            assert len(streams) == Settings().max_sse_connections == 100
            for refused in (a for a in answers if a.status_code != 200):
                assert_too_many(refused, "too_many_connections")

    async def test_a_caller_past_its_limit_is_refused(self, start_server: StartServer) -> None:
        server = await start(start_server, max_sse_connections=3)
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
            open_streams() as streams,
        ):
            runs = [(await client.post("/v1/runs", json=run_body())).json() for _ in range(2)]
            paths = [f"/v1/runs/{run['run_id']}/events" for run in runs]
            for path in (paths[0], paths[1], runs[0]["stream_url"]):  # any run, key or token
                streams.append(await attach(client, path))
                assert streams[-1].status_code == 200
            for path in (paths[0], paths[1], runs[1]["stream_url"]):
                error = assert_too_many(await attach(client, path), "too_many_connections")
                assert "RUNSTREAM_MAX_SSE_CONNECTIONS" in error["message"], error

    async def test_a_stream_token_past_its_limit_is_refused(
        self, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_sse_connections=10, max_sse_connections_per_token=2)
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
            open_streams() as streams,
        ):
            run = (await client.post("/v1/runs", json=run_body())).json()
            for _ in range(2):
                streams.append(await attach(client, run["stream_url"]))
                assert streams[-1].status_code == 200
            error = assert_too_many(await attach(client, run["stream_url"]), "too_many_connections")
            assert "RUNSTREAM_MAX_SSE_CONNECTIONS_PER_TOKEN" in error["message"], error
            await asyncio.sleep(1.1)  # a token names its expiry in seconds: the next is another
            fresh = (await client.get(f"/v1/runs/{run['run_id']}")).json()["stream_url"]
            assert fresh != run["stream_url"]
            streams.append(await attach(client, fresh))  # another token has its own slots
            streams.append(await attach(client, f"/v1/runs/{run['run_id']}/events"))  # no token
            assert [s.status_code for s in streams[2:]] == [200, 200]

    async def test_another_caller_is_not_refused(self, start_server: StartServer) -> None:
        server = await start(
            start_server, max_sse_connections=1, api_keys=API_KEYS, signing_key="test-signing-key"
        )
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
            open_streams() as streams,
        ):
            alices = (await client.post("/v1/runs", json=run_body(), headers=ALICE)).json()
            bobs = (await client.post("/v1/runs", json=run_body(), headers=BOB)).json()
            streams.append(await attach(client, alices["stream_url"]))
            assert streams[-1].status_code == 200
            assert_too_many(await attach(client, alices["stream_url"]), "too_many_connections")
            streams.append(await attach(client, bobs["stream_url"]))
            assert streams[-1].status_code == 200

    async def test_a_slot_frees_when_the_client_disconnects(
        self, start_server: StartServer
    ) -> None:
        server = await start(start_server, max_sse_connections=1)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body())).json()
            path = f"/v1/runs/{run['run_id']}/events"
            for _ in range(3):
                stream = await attach(client, path)
                assert stream.status_code == 200
                assert_too_many(await attach(client, path), "too_many_connections")
                await stream.aclose()
                stream, waited_s = await attach_when_free(client, path, within_s=2)
                await stream.aclose()
                assert waited_s < 1, waited_s  # given back at once, not left to lapse

    async def test_a_langgraph_rejoin_refused_for_its_slot_reads_nothing_of_the_stream(
        self,
        start_server: StartServer,
        start_worker: StartWorker,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The finding: a LangGraph rejoin's catch-up (in plain `messages` mode, a read of the
        stream from its start up to the Last-Event-ID) ran before the slot check, so a refused
        rejoin into a long run still cost its read. The slot comes first now, on the run's
        stream and on the thread's; one taken by a request refused afterwards (400) is given
        back at once."""
        server = await start(start_server, max_sse_connections=1)
        await start_worker()
        reads: list[str] = []
        for name in ("read_range", "read_back"):  # every read of a run's stream
            original = getattr(EventLog, name)

            async def counted(
                log: EventLog, run_id: str, *args: Any, _original: Any = original, **kw: Any
            ) -> Any:
                reads.append(run_id)
                return await _original(log, run_id, *args, **kw)

            monkeypatch.setattr(EventLog, name, counted)
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            tid = (await client.post("/threads", json={})).json()["thread_id"]
            body = {
                "assistant_id": "chat",
                "input": {"messages": [{"type": "human", "content": "w " * 3000}]},
                "stream_mode": ["messages"],
                "config": {"configurable": {"fake_token_delay_ms": 0}},
            }
            rid = (await client.post(f"/threads/{tid}/runs", json=body)).json()["run_id"]
            path = f"/threads/{tid}/runs/{rid}/stream"
            await client.get(f"/threads/{tid}/runs/{rid}/join")
            replayed = (await client.get(path)).text
            deep = replayed.split("event: messages/complete")[1].split("id: ")[1].split()[0]
            rejoin = {"Last-Event-ID": deep}  # after the message: all 3000 tokens before it
            async with open_streams() as streams:
                held, _ = await attach_when_free(client, f"/threads/{tid}/stream", within_s=2)
                streams.append(held)  # the caller's one slot
                reads.clear()
                thread_rejoin = {"Last-Event-ID": f"{rid}:{deep}"}
                for refused in (
                    await attach(client, path, rejoin),
                    await attach(client, f"/threads/{tid}/stream", thread_rejoin),
                ):
                    assert refused.status_code == 429, refused.text  # LangGraph's error shape
                    assert refused.json()["code"] == "too_many_connections", refused.text
                assert [run_id for run_id in reads if run_id == rid] == []
            stream, _ = await attach_when_free(client, path, within_s=2, headers=rejoin)
            await stream.aclose()
            assert rid in reads  # the counting sees the reads a rejoin makes
            past = {"Last-Event-ID": "99999999999999-0"}
            assert (await attach(client, path, past)).status_code == 400
            stream, waited_s = await attach_when_free(client, path, within_s=2, headers=rejoin)
            await stream.aclose()
            assert waited_s < 1, waited_s  # the refused request gave its slot back at once

    async def test_an_open_stream_keeps_its_slot_past_the_slot_ttl(
        self, start_server: StartServer
    ) -> None:
        ping_s = 0.2
        server = await start(start_server, max_sse_connections=1, ping_interval_s=ping_s)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body())).json()
            path = f"/v1/runs/{run['run_id']}/events"
            stream = await attach(client, path)
            try:
                assert stream.status_code == 200
                for _ in range(4):  # 4 x 2 ping intervals: well past a slot's lapse
                    await asyncio.sleep(2 * ping_s)
                    assert_too_many(await attach(client, path), "too_many_connections")
            finally:
                await stream.aclose()

    async def test_a_slot_held_by_a_vanished_server_lapses(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        """Slots taken by a server that then stopped renewing them (killed: no code ran)."""
        ping_s = 0.2
        assert settings.redis_url
        server = await start(start_server, max_sse_connections=2, ping_interval_s=ping_s)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            run = (await client.post("/v1/runs", json=run_body())).json()
            path = f"/v1/runs/{run['run_id']}/events"
            redis = Redis.from_url(settings.redis_url)
            try:
                vanished = CallerQuotas(
                    redis,
                    KeySpace(settings.redis_prefix),
                    replace(settings, max_sse_connections=2, ping_interval_s=ping_s),
                )
                for _ in range(2):  # taken, then neither renewed nor given back
                    assert await vanished.take_stream_slot("local", None) is not None
            finally:
                await redis.aclose()
            assert_too_many(await attach(client, path), "too_many_connections")
            stream, waited_s = await attach_when_free(client, path, within_s=5)
            await stream.aclose()
            assert waited_s < SLOT_TTL_PINGS * ping_s + 0.5, waited_s

    @pytest.mark.fault
    async def test_slots_of_a_server_killed_with_sigkill_lapse(self, cluster: Cluster) -> None:
        """A real server process, SIGKILLed with its streams open: another server refuses,
        then, about `SLOT_TTL_PINGS` ping intervals later, accepts."""
        limits = {"RUNSTREAM_MAX_SSE_CONNECTIONS": "2", "RUNSTREAM_PING_INTERVAL_MS": "300"}
        doomed, doomed_url = await cluster.server(0, 1, **limits)
        _, url = await cluster.server(0, 1, **limits)
        async with (
            httpx.AsyncClient(base_url=doomed_url, timeout=30) as on_doomed,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
            open_streams() as streams,
        ):
            run = (await client.post("/v1/runs", json=run_body())).json()
            path = f"/v1/runs/{run['run_id']}/events"
            for _ in range(2):
                streams.append(await attach(on_doomed, path))
                assert streams[-1].status_code == 200
            doomed.kill()
            assert_too_many(await attach(client, path), "too_many_connections")
            stream, waited_s = await attach_when_free(client, path, within_s=10)
            await stream.aclose()
            assert waited_s < SLOT_TTL_PINGS * 0.3 + 1, waited_s


@pytest.mark.slow
@pytest.mark.serial  # times another caller's requests: alone, as the fault tests
class TestFlood:
    """One caller flooding submits and attaches does not hold up another caller's run.

    Real server and worker processes, and the flood from a process of its own
    (`tests/flood.py`), so that the figures are the server's. `-s` prints the second caller's
    first-token times, without and with the flood.
    """

    ROUNDS = 5

    async def first_token_s(self, client: httpx.AsyncClient, text: str) -> float:
        began = time.perf_counter()
        async with asyncio.timeout(30):
            answer = await client.post("/v1/runs", json=run_body(text), headers=BOB)
            assert answer.status_code == 202, answer.text
            async for event in iter_events(client, answer.json()["stream_url"]):
                if event.event == "token":
                    return time.perf_counter() - began
        raise AssertionError("the run streamed no token")

    async def test_a_flood_from_one_caller_leaves_another_callers_run_streaming(
        self, cluster: Cluster
    ) -> None:
        _, url = await cluster.server(RUNSTREAM_API_KEYS="key-a:alice,key-b:bob")  # defaults
        await cluster.ready_worker(RUNSTREAM_FAKE_TOKEN_DELAY_MS="5")
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await self.first_token_s(client, "warm up")
            quiet = [await self.first_token_s(client, f"quiet {i}") for i in range(self.ROUNDS)]
            # The flood attaches to an interrupted run: its stream stays open.
            body = run_body(graph="approval")
            target = (await client.post("/v1/runs", json=body, headers=ALICE)).json()
            path = f"/v1/runs/{target['run_id']}/events"
            flood = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.flood",
                url,
                "key-a",
                path,
                "20",  # submitting in a loop
                "150",  # attaching in a loop, keeping what is accepted open
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                cwd=ROOT,
            )
            assert flood.stdin is not None
            try:
                await asyncio.sleep(2.0)  # the flood is under way
                loud = [await self.first_token_s(client, f"loud {i}") for i in range(self.ROUNDS)]
            finally:
                flood.stdin.close()
                output, _ = await asyncio.wait_for(flood.communicate(), 60)
        counted = json.loads(output)
        submits, attaches = counted["submits"], counted["attaches"]
        quiet_ms, loud_ms = (statistics.median(s) * 1000 for s in (quiet, loud))
        print(
            f"\nsecond caller's first token, median of {self.ROUNDS}: {quiet_ms:.1f} ms"
            f" without the flood, {loud_ms:.1f} ms with it; the flood's answers:"
            f" submits {submits}, attaches {attaches}"
        )
        assert 0 < submits.get("202", 0) <= Settings().max_active_runs, submits
        assert attaches.get("429", 0) > 0, attaches


@pytest.mark.slow
@pytest.mark.serial  # times another caller's requests: alone, as the fault tests
class TestReplayFlood:
    """Replays of a long run in plain `messages` mode, two at a time without a pause, never hold
    another caller's request for the length of a replay (issue 20, "replay cost": two replays of
    a 50,000-token run raised another caller's median latency from 6 ms to 320 ms, each replay
    2.5 GB). Real server and worker processes, the replays from a process of their own
    (`tests/flood.py`); `-s` prints the figures.

    The bound is a quarter of one replay's own time, measured in the same run, so that a loaded
    machine slows both sides alike: a replay that held the event loop would put a whole replay
    into the other caller's reads (CI, on two busy cores: 5 ms quiet, 73 ms during the replays,
    one replay 925 ms)."""

    TOKENS = 50_000  # the finding's run; "w " each, at the default RUNSTREAM_MAX_MESSAGE_CHARS
    ROUNDS = 50

    async def median_ms(self, client: httpx.AsyncClient, path: str) -> float:
        """Median of `ROUNDS` times of a small read of the second caller's."""
        times = []
        for _ in range(self.ROUNDS):
            began = time.perf_counter()
            answer = await client.get(path, headers=BOB)
            assert answer.status_code == 200, answer.text
            times.append(time.perf_counter() - began)
        return statistics.median(times) * 1000

    async def test_replays_of_a_long_run_leave_another_callers_requests_fast(
        self, cluster: Cluster
    ) -> None:
        _, url = await cluster.server(RUNSTREAM_API_KEYS="key-a:alice,key-b:bob")
        await cluster.ready_worker(RUNSTREAM_FAKE_TOKEN_DELAY_MS="0")
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            tid = (await client.post("/threads", json={}, headers=ALICE)).json()["thread_id"]
            body = {
                "assistant_id": "chat",
                "input": {"messages": [{"type": "human", "content": "w " * self.TOKENS}]},
                "stream_mode": ["messages"],
            }
            run = (await client.post(f"/threads/{tid}/runs", json=body, headers=ALICE)).json()
            path = f"/threads/{tid}/runs/{run['run_id']}/stream"
            await client.get(f"/threads/{tid}/runs/{run['run_id']}/join", headers=ALICE)
            began = time.perf_counter()
            one = len((await client.get(path, headers=ALICE)).content)
            one_s = time.perf_counter() - began
            bobs = (await client.post("/threads", json={}, headers=BOB)).json()["thread_id"]
            await self.median_ms(client, f"/threads/{bobs}")  # warm up
            quiet_ms = await self.median_ms(client, f"/threads/{bobs}")
            flood = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.flood",
                url,
                "key-a",
                path,
                "0",  # no submits
                "0",  # no attaches held open
                "2",  # replaying in a loop
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                cwd=ROOT,
            )
            assert flood.stdin is not None
            try:
                await asyncio.sleep(1.0)  # the replays are under way
                loud_ms = await self.median_ms(client, f"/threads/{bobs}")
            finally:
                flood.stdin.close()
                output, _ = await asyncio.wait_for(flood.communicate(), 60)
        counted = json.loads(output)
        replays = counted["replays"].get("200", 0)
        print(
            f"\none replay of a {self.TOKENS}-token run: {one} bytes in {one_s * 1000:.0f} ms;"
            f" the second caller's median of {self.ROUNDS} reads: {quiet_ms:.1f} ms without the"
            f" replays, {loud_ms:.1f} ms with two at a time ({replays} replays,"
            f" {counted['replayed_bytes']} bytes)"
        )
        assert one < 3 * 2 * self.TOKENS + 10_000, one  # linear: the message once
        assert replays >= 2, counted
        assert loud_ms < quiet_ms + one_s * 1000 / 4, (quiet_ms, loud_ms, one_s)
