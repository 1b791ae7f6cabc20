"""Fault injection with real processes: accepted means done (issue 4; guarantees 2,
4, 5, 6 and 8 of docs/protocol.md section 6, Guarantees). Run alone with `pytest -m fault`.

Each test gets a private redis-server (so FLUSHALL and kills touch nothing else), its own
Postgres schema, short leases (1 s) and a fast reaper (0.2 s).
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from redis.asyncio import Redis

from stream_store.connections import open_redis_clients
from stream_store.keys import KeySpace
from stream_store.settings import Settings
from tests.processes import Cluster, PrivateRedis, TcpProxy
from tests.sse import Received, iter_events, read_events, reassemble

pytestmark = pytest.mark.fault

RECOVERY_TIMES: dict[str, list[float]] = {}


@pytest.fixture
async def private_redis() -> AsyncIterator[PrivateRedis]:
    redis = PrivateRedis()
    redis.start()
    yield redis
    redis.stop()


@pytest.fixture
def fault_redis_url(private_redis: PrivateRedis) -> str:
    """The Redis of a fault test (tests/test_cluster.py runs some on a Redis Cluster)."""
    return private_redis.url


@pytest.fixture
def fault_settings(settings: Settings, fault_redis_url: str) -> Settings:
    return replace(
        settings,
        redis_url=fault_redis_url,
        lease_s=1.0,
        reaper_interval_s=0.2,
        fake_token_delay_ms=20,
        shutdown_grace_s=2.0,
    )


@pytest.fixture
def cluster_settings(fault_settings: Settings) -> Settings:
    return fault_settings


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}, **extra}


async def follow(url: str, run_id: str, into: list[Received], stamps: list[float]) -> None:
    """A viewer that reconnects with its last id whenever the connection breaks."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        while not into or into[-1].event not in ("done", "error"):
            headers = {"Last-Event-ID": into[-1].id} if into else {}
            try:
                async for event in iter_events(http, f"/v1/runs/{run_id}/events", headers=headers):
                    into.append(event)
                    stamps.append(time.monotonic())
            except (httpx.TransportError, AssertionError):
                await asyncio.sleep(0.1)


@dataclass
class WatchedRun:
    """A run just submitted, followed by a viewer (`follow`) in the background."""

    run: dict[str, Any]
    events: list[Received]
    stamps: list[float]  # when each event arrived (monotonic)
    viewer: asyncio.Task[None]

    @classmethod
    async def submit(cls, http: httpx.AsyncClient, url: str, request: dict[str, Any]) -> WatchedRun:
        run = (await http.post("/v1/runs", json=request)).json()
        events: list[Received] = []
        stamps: list[float] = []
        viewer = asyncio.create_task(follow(url, run["run_id"], events, stamps))
        return cls(run, events, stamps, viewer)

    async def tokens(self, count: int) -> None:
        """Until the viewer has `count` tokens."""
        await wait_for(
            lambda: sum(e.event == "token" for e in self.events) >= count, what=f"{count} tokens"
        )

    async def end(self) -> list[Received]:
        """Until the viewer saw the terminal event; its events."""
        await asyncio.wait_for(self.viewer, 60)
        return self.events

    def first_token_after_retry(self) -> int:
        names = [e.event for e in self.events]
        retry = names.index("retry")
        return next(i for i in range(retry, len(names)) if names[i] == "token")


async def wait_for(predicate: Any, timeout_s: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def check_stream(events: list[Received]) -> None:
    """Ids strictly increasing, no id twice, one terminal event and it is last."""
    ids = [tuple(map(int, e.id.split("-"))) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [e.event for e in events].count("done") + [e.event for e in events].count("error") == 1
    assert events[-1].event in ("done", "error")


async def final_message(http: httpx.AsyncClient, thread_id: str) -> dict[str, Any]:
    thread = (await http.get(f"/v1/threads/{thread_id}")).json()
    return thread["messages"][-1]


async def stream_entries(settings: Settings, run_id: str) -> list[tuple[str, dict[bytes, bytes]]]:
    redis = await open_redis_clients(settings)
    try:
        entries = await redis.store.xrange(redis.keys.run_events(run_id))
    finally:
        await redis.aclose()
    return [(entry_id.decode(), fields) for entry_id, fields in entries]


class TestWorkerKilled:
    """1. SIGKILL a worker mid-stream: another worker finishes; the viewer's text is exact."""

    @pytest.mark.parametrize("repeat", range(3))
    async def test_sigkill_mid_stream_is_finished_by_another_worker(
        self, cluster: Cluster, repeat: int
    ) -> None:
        _, url = await cluster.server()
        first = await cluster.ready_worker()
        second = await cluster.standby_worker()
        text = words(250)
        async with httpx.AsyncClient(base_url=url) as http:
            watched = await WatchedRun.submit(http, url, body(text))
            run, events, stamps = watched.run, watched.events, watched.stamps
            await watched.tokens(10)
            second.resume()
            await watched.tokens(15)
            killed_at = time.monotonic()
            first.kill()
            await watched.end()
            check_stream(events)
            names = [e.event for e in events]
            retry = names.index("retry")
            assert events[retry].data["attempt"] == 2
            assert events[retry].data["discard"]  # the half-streamed reply is dropped
            first_token = watched.first_token_after_retry()
            RECOVERY_TIMES.setdefault("sigkill", []).append(stamps[first_token] - killed_at)
            final = await final_message(http, run["thread_id"])
            assert final["content"] == text
            assert reassemble(events) == {final["id"]: text}
            assert events[-1].data["output"]["id"] == final["id"]
            thread = (await http.get(f"/v1/threads/{run['thread_id']}")).json()
            assert [m["role"] for m in thread["messages"]] == ["user", "assistant"]
            polled = (await http.get(f"/v1/runs/{run['run_id']}")).json()
            assert polled["status"] == "succeeded" and polled["attempt"] == 2
            assert second.alive()

    async def test_sigkill_is_seen_at_once_not_after_the_lease(self, cluster: Cluster) -> None:
        # A 30 s lease and the default reaper interval: only the dead worker's vanished Redis
        # connection can explain a take-over within seconds.
        env = {"RUNSTREAM_LEASE_MS": "30000", "RUNSTREAM_REAPER_INTERVAL_MS": "1000"}
        _, url = await cluster.server(**env)
        first = await cluster.ready_worker(**env)
        second = await cluster.standby_worker(**env)
        text = words(250)
        async with httpx.AsyncClient(base_url=url) as http:
            watched = await WatchedRun.submit(http, url, body(text))
            run, events, stamps = watched.run, watched.events, watched.stamps
            await watched.tokens(10)
            second.resume()
            await watched.tokens(15)
            killed_at = time.monotonic()
            first.kill()
            await watched.end()
            check_stream(events)
            first_token = watched.first_token_after_retry()
            recovered_s = stamps[first_token] - killed_at
            RECOVERY_TIMES.setdefault("sigkill, 30 s lease", []).append(recovered_s)
            assert recovered_s < 5  # a worker alive but silent would keep the run for 30 s
            final = await final_message(http, run["thread_id"])
            assert reassemble(events) == {final["id"]: text}


class TestLiveWorkerKeepsItsRun:
    """A worker alive keeps its run: paused within its lease, or its Redis connections cut."""

    async def test_sigstop_within_the_lease_is_not_a_take_over(self, cluster: Cluster) -> None:
        # A paused process keeps its sockets, so its presence connection stays in Redis's list.
        env = {"RUNSTREAM_LEASE_MS": "6000"}
        _, url = await cluster.server(**env)
        paused = await cluster.ready_worker(**env)
        other = await cluster.standby_worker(**env)
        text = words(200)
        async with httpx.AsyncClient(base_url=url) as http:
            watched = await WatchedRun.submit(http, url, body(text))
            run, events = watched.run, watched.events
            await watched.tokens(10)
            other.resume()
            paused.pause()
            await asyncio.sleep(2.5)  # under the 4 s the lease has left at least
            paused.resume()
            await watched.end()
            assert "retry" not in [e.event for e in events]
            polled = (await http.get(f"/v1/runs/{run['run_id']}")).json()
            assert polled["status"] == "succeeded" and polled["attempt"] == 1
            final = await final_message(http, run["thread_id"])
            assert reassemble(events) == {final["id"]: text}

    async def test_a_dropped_presence_connection_is_not_a_dead_worker(
        self, cluster: Cluster, fault_settings: Settings
    ) -> None:
        # Its presence connection cut again and again (as by a Redis restart or a proxy): the
        # worker names a new one within a ping, before any reaper's grace runs out.
        env = {"RUNSTREAM_LEASE_MS": "30000"}
        _, url = await cluster.server(**env)
        await cluster.workers(2, **env)
        text = words(200)
        redis = Redis.from_url(str(fault_settings.redis_url))
        async with httpx.AsyncClient(base_url=url) as http:
            watched = await WatchedRun.submit(http, url, body(text))
            run, events = watched.run, watched.events
            await watched.tokens(10)
            record = KeySpace(fault_settings.redis_prefix).run_record(run["run_id"])
            name = f"runstream-worker:{(await redis.hget(record, 'worker')).decode()}"
            cuts = 0
            while not watched.viewer.done():
                for client in await redis.client_list(_type="normal"):
                    if client["name"] == name:
                        await redis.client_kill_filter(_id=client["id"])
                        cuts += 1
                await asyncio.sleep(0.3)
            await watched.viewer
            present = [c["name"] for c in await redis.client_list(_type="normal")]
            await redis.aclose()
            assert cuts >= 5 and name in present
            assert "retry" not in [e.event for e in events]
            polled = (await http.get(f"/v1/runs/{run['run_id']}")).json()
            assert polled["status"] == "succeeded" and polled["attempt"] == 1


class TestPausedWorker:
    """2. A worker paused past its lease writes nothing after it wakes up."""

    async def test_sigstop_past_lease_then_sigcont_writes_nothing(
        self, cluster: Cluster, fault_settings: Settings
    ) -> None:
        _, url = await cluster.server()
        paused = await cluster.ready_worker()
        text = words(80)
        async with httpx.AsyncClient(base_url=url) as http:
            watched = await WatchedRun.submit(http, url, body(text))
            run = watched.run
            await watched.tokens(10)
            paused.signal(signal.SIGSTOP)
            await cluster.ready_worker()
            await watched.end()
            finished = (await http.get(f"/v1/runs/{run['run_id']}")).json()
            assert finished["status"] == "succeeded" and finished["attempt"] == 2
            before = await stream_entries(fault_settings, run["run_id"])
            paused.signal(signal.SIGCONT)
            await asyncio.sleep(3 * fault_settings.lease_s)
            after = await stream_entries(fault_settings, run["run_id"])
            assert after == before
            attempts = [fields[b"a"] for _, fields in after]
            first_new = attempts.index(b"2")
            assert b"1" not in attempts[first_new:]  # nothing of attempt 1 after attempt 2 began
            assert (await http.get(f"/v1/runs/{run['run_id']}")).json() == {
                **finished,
                "stream_url": (await http.get(f"/v1/runs/{run['run_id']}")).json()["stream_url"],
            }
            assert (await final_message(http, run["thread_id"]))["content"] == text
            assert paused.alive()
            assert "lease" in paused.output() or "fenced" in paused.output()


class TestServerRestart:
    """3. A server dies mid-stream: the client reconnects to another with its last id."""

    async def test_reconnect_to_the_other_server_after_a_kill(self, cluster: Cluster) -> None:
        server_a, url_a = await cluster.server()
        _, url_b = await cluster.server()
        await cluster.ready_worker()
        text = words(60)
        async with httpx.AsyncClient(base_url=url_a, timeout=30) as on_a:
            run = (await on_a.post("/v1/runs", json=body(text))).json()
            seen: list[Received] = []
            with pytest.raises(httpx.TransportError):
                async for event in iter_events(on_a, f"/v1/runs/{run['run_id']}/events"):
                    seen.append(event)
                    if len(seen) == 12:
                        server_a.kill()
        async with httpx.AsyncClient(base_url=url_b, timeout=30) as on_b:
            rest = await read_events(
                on_b, f"/v1/runs/{run['run_id']}/events", headers={"Last-Event-ID": seen[-1].id}
            )
            everything = await read_events(on_b, f"/v1/runs/{run['run_id']}/events")
        assert seen + rest == everything
        check_stream(everything)
        assert list(reassemble(everything).values()) == [text]


class TestRedisLoss:
    """4. Redis loses everything while runs are queued and running: all of them finish."""

    async def test_flushall_with_runs_queued_and_running(
        self, cluster: Cluster, fault_settings: Settings, private_redis: PrivateRedis
    ) -> None:
        _, url = await cluster.server()
        await cluster.ready_worker(RUNSTREAM_WORKER_CONCURRENCY="2")
        texts = [words(40, f"r{i}-") for i in range(6)]
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            runs = [(await http.post("/v1/runs", json=body(t))).json() for t in texts]
            seen: list[Received] = []
            async for event in iter_events(http, f"/v1/runs/{runs[0]['run_id']}/events"):
                seen.append(event)
                if sum(e.event == "token" for e in seen) >= 5:
                    break
            statuses = [(await http.get(f"/v1/runs/{r['run_id']}")).json()["status"] for r in runs]
            assert "running" in statuses and "queued" in statuses
            redis = Redis.from_url(private_redis.url)
            await redis.flushall()
            await redis.aclose()

            async def terminal() -> list[dict[str, Any]]:
                return [(await http.get(f"/v1/runs/{r['run_id']}")).json() for r in runs]

            deadline = time.monotonic() + 60
            while any(r["status"] not in ("succeeded", "failed") for r in await terminal()):
                assert time.monotonic() < deadline, await terminal()
                await asyncio.sleep(0.2)
            for run, text in zip(runs, texts, strict=True):
                assert (await http.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "succeeded"
                events = await read_events(http, f"/v1/runs/{run['run_id']}/events")
                assert events[0].event == "retry"  # the stream started again
                check_stream(events)
                assert (await final_message(http, run["thread_id"]))["content"] == text
            stale = await http.get(
                f"/v1/runs/{runs[0]['run_id']}/events", headers={"Last-Event-ID": seen[-1].id}
            )
            assert stale.status_code == 410
            assert stale.json()["error"]["code"] == "stream_gone"


class TestWriteToolOnce:
    """5. Kill the worker after a write tool ran, before the checkpoint: the effect stays 1."""

    async def test_side_effect_happens_once_across_a_crash(
        self, cluster: Cluster, fault_settings: Settings
    ) -> None:
        cluster.settings = replace(
            fault_settings, graphs={"slow_writer": "tests.custom_graphs:slow_writer"}
        )
        _, url = await cluster.server()
        first = await cluster.ready_worker()
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            watched = await WatchedRun.submit(http, url, body("note", graph="slow_writer"))
            run, events = watched.run, watched.events
            await wait_for(lambda: any(e.event == "custom" for e in events), what="the write")
            first.kill()
            await cluster.ready_worker(RUNSTREAM_TEST_LINGER_S="0")
            await watched.end()
        writes = [e.data for e in events if e.event == "custom"]
        assert writes == [{"wrote": True, "replayed": False}, {"wrote": True, "replayed": True}]
        assert events[-1].event == "done"
        schema = fault_settings.database_schema
        async with await psycopg.AsyncConnection.connect(str(fault_settings.database_url)) as conn:
            notes = await (
                await conn.execute(
                    f'SELECT count(*) FROM "{schema}".runstream_notes WHERE run_id = %s',
                    (run["run_id"],),
                )
            ).fetchone()
            ledger = await (
                await conn.execute(
                    f'SELECT count(*) FROM "{schema}".runstream_tool_executions WHERE run_id = %s',
                    (run["run_id"],),
                )
            ).fetchone()
        assert notes == (1,) and ledger == (1,)


class TestStuckViewer:
    """6. A viewer that stops reading is cut off; the run and other viewers do not wait."""

    async def test_stuck_viewer_is_cut_off_and_replays_on_reconnect(
        self, cluster: Cluster, fault_settings: Settings
    ) -> None:
        _, url = await cluster.server(
            RUNSTREAM_VIEWER_QUEUE_SIZE="2048",
            RUNSTREAM_VIEWER_CUT_OFF_MS="1000",
            RUNSTREAM_MAX_BODY_BYTES=str(32 << 20),
            RUNSTREAM_MAX_MESSAGE_CHARS=str(32 << 20),
        )
        await cluster.ready_worker(RUNSTREAM_FAKE_TOKEN_DELAY_MS="0")
        # 10,000 tokens of 800 characters: far more than the socket buffers of a stuck client.
        text = " ".join(f"t{i}-" + "x" * 800 for i in range(10_000))
        host, port = url.removeprefix("http://").split(":")
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            baseline = (await http.post("/v1/runs", json=body(text))).json()
            await read_events(http, f"/v1/runs/{baseline['run_id']}/events")
            run = (await http.post("/v1/runs", json=body(text))).json()
            path = f"/v1/runs/{run['run_id']}/events"
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())  # not chunked
            await writer.drain()  # ... and never read
            # Two well-behaved viewers; under load they may fall behind too, and then they
            # reconnect with their last id like any client: they must still get everything.
            results: list[list[Received]] = [[], []]
            watchers = [follow(url, run["run_id"], into, []) for into in results]
            await asyncio.wait_for(asyncio.gather(*watchers), 120)
            polled = {
                r["run_id"]: (await http.get(f"/v1/runs/{r['run_id']}")).json()
                for r in (baseline, run)
            }
            # The client stays stuck past the cut-off (a write waiting on it that long is cut),
            # however fast the run and the other viewers were; then it reads what it got.
            await asyncio.sleep(3)
            raw = b""
            while chunk := await asyncio.wait_for(reader.read(1 << 20), 30):
                raw += chunk  # the server closed the stuck connection: read() ends
            writer.close()
            assert b"event: done" not in raw  # it was cut off before the end
            last_id = raw.rsplit(b"\nid: ", 1)[-1].split(b"\n", 1)[0].strip().decode()
            rest = await read_events(http, path, headers={"Last-Event-ID": last_id})
        full = results[0]
        assert results[1] == full and full[-1].event == "done"
        assert [e.id for e in full].index(last_id) + 1 + len(rest) == len(full)
        assert rest == full[[e.id for e in full].index(last_id) + 1 :]
        assert list(reassemble(full).values()) == [text]

        def took(r: dict[str, Any]) -> float:
            from datetime import datetime

            start = datetime.fromisoformat(r["started_at"])
            return (datetime.fromisoformat(r["finished_at"]) - start).total_seconds()

        RECOVERY_TIMES.setdefault("run with stuck viewer / baseline", []).append(
            took(polled[run["run_id"]]) / took(polled[baseline["run_id"]])
        )


class TestPostgresDown:
    """7. Postgres unavailable: submit answers 503 and creates nothing; then it works again."""

    async def test_submit_answers_503_and_creates_nothing(
        self, cluster: Cluster, fault_settings: Settings, private_redis: PrivateRedis
    ) -> None:
        real = urlsplit(str(fault_settings.database_url))
        proxy = TcpProxy(real.hostname or "127.0.0.1", real.port or 5432)
        await proxy.start()
        try:
            database_url = real._replace(
                netloc=real.netloc.replace(
                    f"{real.hostname}:{real.port}", f"127.0.0.1:{proxy.port}"
                )
            ).geturl()
            _, url = await cluster.server(RUNSTREAM_DATABASE_URL=database_url)
            await cluster.ready_worker()
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                ok = await http.post("/v1/runs", json=body("before"))
                assert ok.status_code == 202
                await read_events(http, f"/v1/runs/{ok.json()['run_id']}/events")
                redis = Redis.from_url(private_redis.url)
                run_keys = f"{fault_settings.redis_prefix}:run:*"  # arq's own keys come and go
                keys_before = sorted(await redis.keys(run_keys))
                rows_before = await count_rows(fault_settings)
                proxy.cut()
                down = await http.post("/v1/runs", json=body("during"))  # waits the pool's 10 s
                assert down.status_code == 503, down.text
                assert down.json()["error"]["code"] == "unavailable"
                assert (await http.get("/readyz")).status_code == 503
                assert sorted(await redis.keys(run_keys)) == keys_before
                await redis.aclose()
                proxy.restore()
                assert await count_rows(fault_settings) == rows_before
                deadline = time.monotonic() + 30
                while (after := await http.post("/v1/runs", json=body("after"))).status_code != 202:
                    assert time.monotonic() < deadline, after.text
                    await asyncio.sleep(0.2)
                events = await read_events(http, f"/v1/runs/{after.json()['run_id']}/events")
                assert events[-1].data["status"] == "succeeded"
        finally:
            await proxy.stop()


async def count_rows(settings: Settings) -> tuple[int, int]:
    schema = settings.database_schema
    async with await psycopg.AsyncConnection.connect(str(settings.database_url)) as conn:
        runs = await (
            await conn.execute(f'SELECT count(*) FROM "{schema}".runstream_runs')
        ).fetchone()
        threads = await (
            await conn.execute(f'SELECT count(*) FROM "{schema}".runstream_threads')
        ).fetchone()
    assert runs is not None and threads is not None
    return int(runs[0]), int(threads[0])


class TestShutdown:
    """SIGTERM: a worker hands its runs back at once; a server ends its SSE responses."""

    async def test_worker_sigterm_hands_the_run_back_before_its_lease_ends(
        self, cluster: Cluster
    ) -> None:
        env = {"RUNSTREAM_LEASE_MS": "30000", "RUNSTREAM_SHUTDOWN_GRACE_MS": "300"}
        _, url = await cluster.server(**env)
        stopping = await cluster.ready_worker(**env)
        other = await cluster.standby_worker(**env)
        text = words(200)
        async with httpx.AsyncClient(base_url=url) as http:
            watched = await WatchedRun.submit(http, url, body(text))
            run, events, stamps = watched.run, watched.events, watched.stamps
            await watched.tokens(10)
            other.resume()
            stopping.signal(signal.SIGTERM)
            sent_at = time.monotonic()
            await watched.end()
            retry = [e.event for e in events].index("retry")
            assert stamps[retry] - sent_at < 10  # far sooner than the 30 s lease
            RECOVERY_TIMES.setdefault("sigterm hand-back", []).append(stamps[retry] - sent_at)
            check_stream(events)
            final = await final_message(http, run["thread_id"])
            assert reassemble(events) == {final["id"]: text}
        stopping.proc.wait(20)
        assert "handing the run back" in stopping.output()

    async def test_server_sigterm_ends_sse_responses_promptly(self, cluster: Cluster) -> None:
        server_a, url_a = await cluster.server()
        _, url_b = await cluster.server()
        await cluster.ready_worker()
        text = words(200)
        async with httpx.AsyncClient(base_url=url_a, timeout=30) as on_a:
            run = (await on_a.post("/v1/runs", json=body(text))).json()
            seen: list[Received] = []
            ended_at = 0.0
            async for event in iter_events(on_a, f"/v1/runs/{run['run_id']}/events"):
                seen.append(event)
                if len(seen) == 10:
                    server_a.signal(signal.SIGTERM)
                    sent_at = time.monotonic()
            ended_at = time.monotonic()
        assert seen[-1].event != "done"  # the response ended before the run did
        assert ended_at - sent_at < 3  # not after uvicorn's 5 s graceful timeout
        async with httpx.AsyncClient(base_url=url_b, timeout=30) as on_b:
            path = f"/v1/runs/{run['run_id']}/events"
            rest = await read_events(on_b, path, headers={"Last-Event-ID": seen[-1].id})
            assert seen + rest == await read_events(on_b, path)


class TestChaos:
    """8. 200 runs across 3 workers with random SIGKILLs: all terminal, all complete."""

    async def test_two_hundred_runs_survive_random_worker_kills(
        self, cluster: Cluster, fault_settings: Settings
    ) -> None:
        # The default lease and reaper interval: killed workers are found by their vanished
        # Redis connections, and the busy survivors (70 runs each on 2 cores) keep theirs.
        env = {
            "RUNSTREAM_MAX_ATTEMPTS": "20",
            "RUNSTREAM_FAKE_TOKEN_DELAY_MS": "10",
            "RUNSTREAM_LEASE_MS": "5000",
            "RUNSTREAM_REAPER_INTERVAL_MS": "1000",
        }
        # 200 runs at once from one caller: past the per-caller limits' defaults.
        _, url = await cluster.server(
            RUNSTREAM_MAX_SUBMITS_PER_MINUTE="0", RUNSTREAM_MAX_ACTIVE_RUNS="0", **env
        )
        workers = [await cluster.ready_worker(**env) for _ in range(3)]
        # 100 tokens 10 ms apart: every run is still streaming when the first kill lands
        # (0.3-0.8 s in). With 30, a worker that starts its runs quickly had them all finished
        # by then, and no kill hit a run.
        texts = [words(100, f"c{i}-") for i in range(200)]
        rng = random.Random(7)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            responses = await asyncio.gather(*(http.post("/v1/runs", json=body(t)) for t in texts))
            assert all(r.status_code == 202 for r in responses)
            runs = [r.json() for r in responses]
            kills = 0
            for _ in range(6):
                await asyncio.sleep(rng.uniform(0.3, 0.8))
                victim = rng.choice([w for w in workers if w.alive()])
                victim.kill()
                kills += 1
                workers.append(cluster.worker(**env))
            deadline = time.monotonic() + 120
            while True:
                polled = await asyncio.gather(*(http.get(f"/v1/runs/{r['run_id']}") for r in runs))
                statuses = [p.json()["status"] for p in polled]
                if all(s in ("succeeded", "failed", "cancelled") for s in statuses):
                    break
                assert time.monotonic() < deadline, statuses
                await asyncio.sleep(0.5)
            assert statuses == ["succeeded"] * 200
            retried = 0
            for run, text in zip(runs, texts, strict=True):
                path = f"/v1/runs/{run['run_id']}/events"
                try:
                    events = await asyncio.wait_for(read_events(http, path), 30)
                except TimeoutError:
                    raw = await stream_entries(fault_settings, run["run_id"])
                    polled_run = (await http.get(f"/v1/runs/{run['run_id']}")).json()
                    shown = [(i, f[b"e"], f[b"a"]) for i, f in raw if f[b"e"] != b"token"]
                    raise AssertionError((polled_run, shown)) from None
                check_stream(events)
                thread = (await http.get(f"/v1/threads/{run['thread_id']}")).json()
                assert thread["messages"], [(e.event, e.data) for e in events if e.event != "token"]
                final = thread["messages"][-1]
                summary = [
                    (e.event, e.data if e.event != "token" else e.data["message_id"])
                    for e in events
                    if e.event != "token" or e.data["text"].strip() in ("c0", text.split()[0])
                ]
                if final["content"] != text or reassemble(events) != {final["id"]: text}:
                    print("FAILED RUN", run["run_id"], summary, thread["messages"])
                assert final["content"] == text, (summary, thread["messages"])
                assert reassemble(events) == {final["id"]: text}, (summary, thread["messages"])
                retried += any(e.event == "retry" for e in events)
        assert kills == 6 and retried > 0
        RECOVERY_TIMES.setdefault("chaos runs retried", []).append(retried)
        # Only a live worker can log that its attempt was taken from it: a false take-over.
        false_take_overs = sum(
            w.output().count(note)
            for w in cluster.processes
            for note in ("lease lost; stopping this attempt", "attempt fenced out")
        )
        RECOVERY_TIMES.setdefault("chaos false take-overs", []).append(false_take_overs)
        lines = [(w.name, line) for w in cluster.processes for line in w.output().splitlines()]
        fenced = [
            (name, line)
            for name, line in lines
            if "lease lost; stopping" in line or "attempt fenced out" in line
        ]
        why = [  # what the reapers said of those runs
            f"{name}: {line[:400]}"
            for name, line in lines
            for _, fenced_line in fenced
            if ("re-queued" in line or "gone" in line)
            and fenced_line.rpartition("run_id=")[2][:36] in line
        ]
        assert false_take_overs == 0, ([f"{n}: {line[:400]}" for n, line in fenced], why)


@pytest.fixture(scope="session", autouse=True)
def report_recovery_times() -> Any:
    yield
    for name, values in RECOVERY_TIMES.items():
        print(f"\nrecovery {name}: median {statistics.median(values):.3f}s over {len(values)}")
