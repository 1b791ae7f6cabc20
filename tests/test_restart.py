"""Threads and runs survive restarting every process; deleting a thread leaves nothing behind.

These tests run the real commands (`python -m server.processes.cli serve|worker`) as subprocesses
(`tests.processes.Cluster`), configured only through the environment, stop them with SIGTERM
and start new ones.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from redis.asyncio import Redis

from stream_store.settings import Settings
from tests.processes import Cluster
from tests.sse import Received, read_events, reassemble

pytestmark = pytest.mark.slow  # starts the whole product: ./scripts/test runs it


async def start_both(cluster: Cluster) -> str:
    """A server and a worker (not waited for: the runs wait for it); the server's URL."""
    cluster.worker()
    return (await cluster.server()).url


def body(text: str) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}}


async def finish(client: httpx.AsyncClient, run: dict[str, Any]) -> list[Received]:
    """All events of a run, which must end `done`/succeeded."""
    events = await asyncio.wait_for(read_events(client, f"/v1/runs/{run['run_id']}/events"), 60)
    assert events[-1].event == "done", [(e.event, e.data) for e in events]
    assert events[-1].data["status"] == "succeeded"
    return events


async def new_thread_run(client: httpx.AsyncClient, text: str) -> dict[str, Any]:
    response = await client.post("/v1/runs", json=body(text))
    assert response.status_code == 202, response.text
    return response.json()


async def thread_run(client: httpx.AsyncClient, thread_id: str, text: str) -> dict[str, Any]:
    response = await client.post(f"/v1/threads/{thread_id}/runs", json=body(text))
    assert response.status_code == 202, response.text
    run = response.json()
    assert run["thread_id"] == thread_id
    return run


async def snapshot(client: httpx.AsyncClient, thread_ids: list[str]) -> dict[str, Any]:
    """Everything the API says about the threads: list, details, runs."""
    listing = await client.get("/v1/threads")
    assert listing.status_code == 200, listing.text
    state: dict[str, Any] = {"list": listing.json(), "threads": {}, "runs": {}}
    for tid in thread_ids:
        detail = await client.get(f"/v1/threads/{tid}")
        assert detail.status_code == 200, detail.text
        runs = await client.get(f"/v1/threads/{tid}/runs")
        assert runs.status_code == 200, runs.text
        state["threads"][tid] = detail.json()
        state["runs"][tid] = runs.json()["runs"]
    return state


RUN_FIELDS = (
    "run_id",
    "thread_id",
    "graph",
    "status",
    "attempt",
    "created_at",
    "started_at",
    "finished_at",
    "last_event_id",
    "error",
    "interrupt",
)


def run_view(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run[k] for k in RUN_FIELDS}


def event_view(events: list[Received]) -> list[tuple[str, str, Any]]:
    return [(e.id, e.event, e.data) for e in events]


async def db_counts(settings: Settings, thread_id: str) -> dict[str, int]:
    """Rows that mention the thread in runstream's and the checkpointer's tables."""
    counts: dict[str, int] = {}
    assert settings.database_url
    async with await psycopg.AsyncConnection.connect(settings.database_url) as conn:
        for table in (
            "runstream_threads",
            "runstream_runs",
            "checkpoints",
            "checkpoint_writes",
            "checkpoint_blobs",
        ):
            query = sql.SQL("SELECT count(*) FROM {}.{} WHERE thread_id::text = %s").format(
                sql.Identifier(settings.database_schema), sql.Identifier(table)
            )
            cur = await conn.execute(query, (thread_id,))
            row = await cur.fetchone()
            assert row is not None
            counts[table] = int(row[0])
    return counts


async def redis_keys_mentioning(settings: Settings, needles: list[str]) -> list[str]:
    """Every key in the whole Redis database whose name contains one of `needles`."""
    assert settings.redis_url
    redis = Redis.from_url(settings.redis_url)
    try:
        found: list[str] = []
        for needle in needles:
            async for key in redis.scan_iter(match=f"*{needle}*", count=1000):
                found.append(key.decode())
        return sorted(found)
    finally:
        await redis.aclose()


TEXTS = {
    "a": ["first thread, first question", "first thread, second question"],
    "b": ["second thread opens here", "second thread, follow-up"],
}
THIRD_TEXT = "first thread, third question after the restart"


@dataclass
class World:
    """Two threads of two finished runs each, as seen before every process was restarted."""

    url: str
    thread_ids: dict[str, str]
    run_ids: dict[str, list[str]]
    events: dict[str, list[Received]]
    stream_urls: dict[str, str]
    before: dict[str, Any]


async def two_threads_then_restart(cluster: Cluster) -> World:
    """Run two turns on each of two threads, check them, then restart server and worker."""
    url = await start_both(cluster)
    run_ids: dict[str, list[str]] = {}
    events: dict[str, list[Received]] = {}
    stream_urls: dict[str, str] = {}
    thread_ids: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for name in ("a", "b"):
            first = await new_thread_run(client, TEXTS[name][0])
            events[first["run_id"]] = await finish(client, first)
            tid = first["thread_id"]
            second = await thread_run(client, tid, TEXTS[name][1])
            events[second["run_id"]] = await finish(client, second)
            thread_ids[name] = tid
            run_ids[name] = [first["run_id"], second["run_id"]]
            stream_urls[first["run_id"]] = first["stream_url"]
            await asyncio.sleep(0.01)  # distinct created_at between the threads
        before = await snapshot(client, list(thread_ids.values()))

    # The state before the restart is what the runs produced.
    for name, tid in thread_ids.items():
        messages = before["threads"][tid]["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
        q1, q2 = TEXTS[name]
        assert [m["content"] for m in messages] == [q1, q1, q2, q2]
        assert len({m["id"] for m in messages}) == 4
        for index, run_id in enumerate(run_ids[name]):
            streamed = [e.data["message"] for e in events[run_id] if e.event == "message"]
            assert streamed == messages[2 * index : 2 * index + 2]
            assert reassemble(events[run_id]) == {
                messages[2 * index + 1]["id"]: messages[2 * index + 1]["content"]
            }

    # Stop every process (SIGTERM, wait), start new ones on a new port.
    for process in list(cluster.processes):
        await process.terminate()
    assert not any(p.alive() for p in cluster.processes)
    url = await start_both(cluster)
    return World(url, thread_ids, run_ids, events, stream_urls, before)


async def third_run_on_thread_a(client: httpx.AsyncClient, world: World) -> str:
    """A new run on an old thread continues the checkpointed conversation; its run id."""
    tid_a = world.thread_ids["a"]
    third = await thread_run(client, tid_a, THIRD_TEXT)
    third_events = await finish(client, third)
    messages = (await client.get(f"/v1/threads/{tid_a}")).json()["messages"]
    assert len(messages) == 6, messages
    assert messages[:4] == world.before["threads"][tid_a]["messages"]
    assert [m["role"] for m in messages[4:]] == ["user", "assistant"]
    assert [m["content"] for m in messages[4:]] == [THIRD_TEXT, THIRD_TEXT]
    streamed = [e.data["message"] for e in third_events if e.event == "message"]
    assert streamed == messages[4:]
    assert third_events[-1].data["output"] == messages[5]
    runs_a = (await client.get(f"/v1/threads/{tid_a}/runs")).json()["runs"]
    assert [r["run_id"] for r in runs_a] == [*world.run_ids["a"], third["run_id"]]
    assert all(r["status"] == "succeeded" for r in runs_a)
    return str(third["run_id"])


class TestRestart:
    async def test_threads_and_runs_survive_restarting_every_process(
        self, cluster: Cluster
    ) -> None:
        world = await two_threads_then_restart(cluster)
        before, thread_ids, run_ids = world.before, world.thread_ids, world.run_ids
        tid_a, tid_b = thread_ids["a"], thread_ids["b"]
        async with httpx.AsyncClient(base_url=world.url, timeout=30) as client:
            after = await snapshot(client, [tid_a, tid_b])

            # Threads: both, newest first, titled by their first user message, unchanged.
            listed = after["list"]["threads"]
            assert [t["thread_id"] for t in listed] == [tid_b, tid_a]
            assert [t["title"] for t in listed] == [TEXTS["b"][0], TEXTS["a"][0]]
            assert all(t["status"] == "idle" for t in listed)
            assert after["list"] == before["list"]

            # Messages: all four, in order, with the ids they had before.
            for tid in thread_ids.values():
                messages = after["threads"][tid]["messages"]
                assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
                assert [m["id"] for m in messages] == [
                    m["id"] for m in before["threads"][tid]["messages"]
                ]
                assert after["threads"][tid] == before["threads"][tid]

            # Runs: both, oldest first, succeeded, as recorded before.
            for name, tid in thread_ids.items():
                runs = after["runs"][tid]
                assert [r["run_id"] for r in runs] == run_ids[name]
                assert [r["status"] for r in runs] == ["succeeded", "succeeded"]
                assert [run_view(r) for r in runs] == [run_view(r) for r in before["runs"][tid]]
                for run in runs:
                    polled = (await client.get(f"/v1/runs/{run['run_id']}")).json()
                    assert run_view(polled) == run_view(run)

            # Attaching to a finished run replays its whole stream, ending in `done`; and
            # resuming after an id gives exactly the rest.
            for run_id, full in world.events.items():
                replay = await asyncio.wait_for(
                    read_events(client, f"/v1/runs/{run_id}/events"), 30
                )
                assert event_view(replay) == event_view(full)
                assert replay[0].event == "run" and replay[0].data["status"] == "queued"
                assert replay[-1].event == "done"
                rest = await asyncio.wait_for(
                    read_events(
                        client, f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": full[2].id}
                    ),
                    30,
                )
                assert event_view(rest) == event_view(full[3:])

            # A stream_url issued before the restart still works (same signing key).
            first_a = run_ids["a"][0]
            async with httpx.AsyncClient(base_url=world.url, timeout=30) as bare:
                by_token = await asyncio.wait_for(read_events(bare, world.stream_urls[first_a]), 30)
            assert event_view(by_token) == event_view(world.events[first_a])

            # A new run on an old thread works and sees the earlier conversation.
            await third_run_on_thread_a(client, world)
            listed = (await client.get("/v1/threads")).json()["threads"]
            assert [t["thread_id"] for t in listed] == [tid_b, tid_a]

    async def test_deleting_a_thread_after_the_restart_leaves_nothing(
        self, settings: Settings, cluster: Cluster
    ) -> None:
        world = await two_threads_then_restart(cluster)
        tid_a, tid_b = world.thread_ids["a"], world.thread_ids["b"]
        async with httpx.AsyncClient(base_url=world.url, timeout=30) as client:
            all_a = [*world.run_ids["a"], await third_run_on_thread_a(client, world)]

            # Before deleting: the thread has rows and keys, so their absence later means
            # something.
            counts_a = await db_counts(settings, tid_a)
            assert counts_a["runstream_threads"] == 1 and counts_a["runstream_runs"] == 3
            assert counts_a["checkpoints"] > 0
            assert await redis_keys_mentioning(settings, all_a)

            deleted = await client.delete(f"/v1/threads/{tid_a}")
            assert deleted.status_code == 204, deleted.text

            # Gone from the API.
            missing = await client.get(f"/v1/threads/{tid_a}")
            assert missing.status_code == 404, missing.text
            assert missing.json()["error"]["code"]
            assert (await client.get(f"/v1/threads/{tid_a}/runs")).status_code == 404
            for run_id in all_a:
                assert (await client.get(f"/v1/runs/{run_id}")).status_code == 404
                gone = await client.get(f"/v1/runs/{run_id}/events")
                assert gone.status_code == 404, (gone.status_code, gone.text)
            again = await client.post(f"/v1/threads/{tid_a}/runs", json=body("hello?"))
            assert again.status_code == 404, again.text
            listed = (await client.get("/v1/threads")).json()["threads"]
            assert [t["thread_id"] for t in listed] == [tid_b]

            # The other thread is untouched.
            counts_b = await db_counts(settings, tid_b)
            assert counts_b["runstream_runs"] == 2 and counts_b["checkpoints"] > 0
            assert await redis_keys_mentioning(settings, world.run_ids["b"])
            kept = (await client.get(f"/v1/threads/{tid_b}")).json()
            assert kept == world.before["threads"][tid_b]
            for run_id in world.run_ids["b"]:
                replay = await asyncio.wait_for(
                    read_events(client, f"/v1/runs/{run_id}/events"), 30
                )
                assert event_view(replay) == event_view(world.events[run_id])

            # Nothing of the deleted thread is left in Postgres or anywhere in Redis.
            counts_a = await db_counts(settings, tid_a)
            assert counts_a == dict.fromkeys(counts_a, 0), counts_a
            leftover = await redis_keys_mentioning(settings, all_a)
            assert leftover == [], leftover
