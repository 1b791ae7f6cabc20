"""The thread-level stream (`threads.join_stream`, `GET /threads/{thread_id}/stream`), driven by
LangGraph's own Python SDK: a thread's runs in order, each as its own join stream gives it, with
ids `<run_id>:<id>` that resume exactly, and the thread's next runs as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart

from bench.launcher import Process
from server.streaming.thread_watch import POLL_S, ThreadWatch
from stream_store.settings import Settings
from tests.conftest import ServerHandle
from tests.processes import Cluster, TcpProxy
from tests.sse import Received, events_of
from tests.test_langgraph_api import (
    chunks_text,
    client_for,
    collect,
    eventually,
    human,
    messages_of,
    slow,
    wire,
    words,
)
from tests.test_langgraph_api import sdk as sdk

MODES = ["values", "updates", "messages-tuple"]


def run_done(part: StreamPart | Received) -> bool:
    """LangGraph's run_done event, which follows each run's end in the thread stream."""
    return part.event == "metadata" and part.data.get("status") == "run_done"


async def until_done(stream: AsyncIterator[StreamPart], runs: int) -> list[StreamPart]:
    """The parts of a thread stream until `runs` runs are done; then the client leaves (the
    stream itself never ends)."""
    parts: list[StreamPart] = []
    async with contextlib.aclosing(stream) as opened:  # type: ignore[type-var]
        async for part in opened:
            parts.append(part)
            if sum(map(run_done, parts)) >= runs:
                break
    return parts


async def two_runs(client: LangGraphClient, tid: str, **kwargs: Any) -> list[str]:
    """Two runs queued one after the other on `tid`; their ids once both ended."""
    runs = [
        await client.runs.create(
            tid, "chat", input=human(words(n, tag)), multitask_strategy="enqueue", **kwargs
        )
        for n, tag in ((12, "a"), (8, "b"))
    ]
    for run in runs:
        await client.runs.join(tid, run["run_id"])
    return [run["run_id"] for run in runs]


def own_ids(run_id: str, parts: list[StreamPart]) -> list[tuple[str, Any, str | None]]:
    """A run's join stream as the thread stream gives it: each id after `<run_id>:`, the
    opening `metadata` (`0-0` in the run's stream too) as `<run_id>:0-0`, and after the `end`
    LangGraph's run_done, which takes the end's id (the end then has its frame id `<id>.0`)."""
    *body, end = [(p.event, p.data, f"{run_id}:{p.id}") for p in parts]
    run_done = {"status": "run_done", "run_id": run_id}
    return [*body, (end[0], end[1], f"{end[2]}.0"), ("metadata", run_done, end[2])]


async def test_from_the_start_gives_each_run_as_its_own_join_stream_in_order(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    first, second = await two_runs(sdk, tid, stream_mode=MODES)
    thread = await until_done(await sdk.threads.join_stream(tid, last_event_id="-"), 2)
    expected = []
    for run_id in (first, second):
        own = await collect(sdk.runs.join_stream(tid, run_id, last_event_id="-1"))
        assert own[0].event == "metadata" and own[-1].event == "end"
        assert any(p.event == "messages" for p in own)
        expected += own_ids(run_id, own)
    assert wire(thread) == expected


async def test_cut_anywhere_and_rejoined_by_last_id_gives_exactly_the_rest(
    sdk: LangGraphClient,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await two_runs(sdk, tid, stream_mode=MODES)
    everything = await until_done(await sdk.threads.join_stream(tid, last_event_id="-"), 2)
    done = [i for i, p in enumerate(everything) if run_done(p)]
    # inside the first run, between its end and its run_done, after its run_done, right after
    # the second's opening, inside the second
    for cut in (3, done[0], done[0] + 1, done[0] + 2, done[0] + 5):
        last_id = everything[cut - 1].id  # every frame has an id here (no retried attempt)
        rest = await until_done(await sdk.threads.join_stream(tid, last_event_id=last_id), 1)
        after = everything[cut:]
        assert wire(rest) == wire(after[: next(i for i, p in enumerate(after) if run_done(p)) + 1])


async def test_the_sdk_reconnects_a_cut_thread_stream_by_itself_and_misses_nothing(
    sdk: LangGraphClient, server: ServerHandle
) -> None:
    """A proxy drops every connection after 3000 bytes: `threads.join_stream` follows the
    answer's `Location` with its last id, by itself."""
    tid = (await sdk.threads.create())["thread_id"]
    await two_runs(sdk, tid, stream_mode=MODES)
    proxy = TcpProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1]), cut_every_bytes=3000)
    await proxy.start()
    try:
        through_proxy = client_for(f"http://127.0.0.1:{proxy.port}")
        parts = await until_done(await through_proxy.threads.join_stream(tid, last_event_id="-"), 2)
    finally:
        await proxy.stop()
    assert proxy.cuts >= 2
    everything = await until_done(await sdk.threads.join_stream(tid, last_event_id="-"), 2)
    assert wire(parts) == wire(everything)


async def test_without_last_event_id_it_follows_the_threads_next_runs_as_they_come(
    sdk: LangGraphClient, server: ServerHandle
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("before"))  # over: not in the stream
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as raw,
        raw.stream("GET", f"/threads/{tid}/stream") as response,
    ):
        # the headers are out: where the stream starts is fixed, and no run is left to follow
        run_ids = await two_runs(sdk, tid, stream_mode=["messages-tuple"], config=slow(5))
        parts: list[Received] = []
        async for event in events_of(response):
            parts.append(event)
            if sum(map(run_done, parts)) == 2:
                break
    assert [p.data["run_id"] for p in parts if p.event == "metadata" and not run_done(p)] == run_ids
    assert [p.data for p in parts if p.event == "end"] == [
        {"run_id": run_id, "status": "success"} for run_id in run_ids
    ]
    text = "".join(p.data[0]["content"] for p in parts if p.event == "messages")
    assert text == words(12, "a") + words(8, "b")
    assert all(p.id.split(":")[0] in run_ids for p in parts)


async def test_lifecycle_gives_only_each_runs_start_and_run_done(sdk: LangGraphClient) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    first, second = await two_runs(sdk, tid, stream_mode=MODES)
    parts = await until_done(
        await sdk.threads.join_stream(tid, last_event_id="-", stream_mode="lifecycle"), 2
    )
    assert [p.data for p in parts] == [
        {"run_id": first, "attempt": 1},
        {"status": "run_done", "run_id": first},
        {"run_id": second, "attempt": 1},
        {"status": "run_done", "run_id": second},
    ]
    assert {p.event for p in parts} == {"metadata"}
    assert [p.id and p.id.split(":")[0] for p in parts] == [first, first, second, second]
    # resumed after the first run's run_done: the second run's part only
    rest = await until_done(
        await sdk.threads.join_stream(tid, last_event_id=parts[1].id, stream_mode="lifecycle"), 1
    )
    assert wire(rest) == wire(parts[2:])


@pytest.mark.parametrize(
    ("params", "headers", "status"),
    [
        ({"stream_mode": "state_update"}, {}, 422),
        ({"stream_mode": "values"}, {}, 422),
        ({}, {"Last-Event-ID": "1-0"}, 400),
        ({}, {"Last-Event-ID": "not-a-run:1-0"}, 400),
    ],
)
async def test_what_it_does_not_serve_is_refused_before_it_starts(
    sdk: LangGraphClient,
    params: dict[str, str],
    headers: dict[str, str],
    status: int,
) -> None:
    tid = (await sdk.threads.create())["thread_id"]
    async with httpx.AsyncClient(base_url=str(sdk.http.client.base_url)) as raw:
        response = await raw.get(f"/threads/{tid}/stream", params=params, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["detail"]


def thread_watch(server: ServerHandle) -> ThreadWatch:
    """The server process's one watcher of the threads its idle thread streams wait on."""
    watch: ThreadWatch = server.app.state.resources.thread_watch
    return watch


async def until_run_done(response: httpx.Response, into: list[Received]) -> None:
    """The events of a raw thread stream into `into`, until the first run_done or its end."""
    async for event in events_of(response):
        into.append(event)
        if run_done(event):
            return


async def test_idle_viewers_of_many_threads_each_get_their_own_threads_next_run_and_nothing_else(
    sdk: LangGraphClient, server: ServerHandle
) -> None:
    """One watcher serves every idle thread stream of the process: each viewer is woken for
    its own thread's new run (or its thread's deletion), whatever happens on the others, and
    a viewer that leaves is no longer watched."""
    threads = [(await sdk.threads.create())["thread_id"] for _ in range(12)]
    for tid in threads[::2]:  # half have a run over already: they wait for a newer one
        await sdk.runs.wait(tid, "chat", input=human("before"))
    given, idle, deleted = threads[:8], threads[8:11], threads[11]
    watch = thread_watch(server)
    received: dict[str, list[Received]] = {tid: [] for tid in threads}
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as raw,
        contextlib.AsyncExitStack() as opened,
    ):
        responses = [
            await opened.enter_async_context(raw.stream("GET", f"/threads/{tid}/stream"))
            for tid in threads
        ]

        async def all_waiting() -> bool:
            return watch.waiting == len(threads)

        await eventually(all_waiting, "every thread stream to wait on the watcher")
        readers = {
            tid: asyncio.create_task(until_run_done(response, received[tid]))
            for tid, response in zip(threads, responses, strict=True)
        }
        try:
            # runs on eight threads at once (in the other order), the last thread deleted
            created = await asyncio.gather(
                *(
                    sdk.runs.create(
                        tid, "chat", input=human(words(6, f"t{i}x")), stream_mode=["messages-tuple"]
                    )
                    for i, tid in reversed(list(enumerate(given)))
                )
            )
            run_ids = dict(zip(reversed(given), (run["run_id"] for run in created), strict=True))
            await sdk.threads.delete(deleted)
            ended = [readers[tid] for tid in [*given, deleted]]
            await asyncio.wait_for(asyncio.gather(*ended), 30)
            await asyncio.sleep(3 * POLL_S)  # the watcher's next looks wake no one else
            assert not any(readers[tid].done() for tid in idle)
        finally:
            for reader in readers.values():
                reader.cancel()
            await asyncio.gather(*readers.values(), return_exceptions=True)
    for i, tid in enumerate(given):
        events = received[tid]
        run_id = run_ids[tid]
        assert events[0].event == "metadata" and events[0].data["run_id"] == run_id
        assert events[-2:] == [
            Received(events[-1].id + ".0", "end", {"run_id": run_id, "status": "success"}),
            Received(events[-1].id, "metadata", {"status": "run_done", "run_id": run_id}),
        ]
        assert all(event.id.split(":")[0] == run_id for event in events)
        text = "".join(e.data[0]["content"] for e in events if e.event == "messages")
        assert text == words(6, f"t{i}x")
    assert received[deleted] == []  # its stream ended, with nothing in it
    assert all(received[tid] == [] for tid in idle)

    async def none_waiting() -> bool:
        return watch.waiting == 0

    await eventually(none_waiting, "the viewers that left to be unregistered")


# -- faults -------------------------------------------------------------------------------------


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """Short leases and a fast reaper, so a killed worker's run moves on within seconds."""
    return replace(settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0)


def started(worker: Process, run_id: str) -> bool:
    """The worker's log says it started (an attempt of) the run."""
    return any("run started" in line and run_id in line for line in worker.output().splitlines())


@pytest.mark.fault
async def test_worker_killed_mid_run_the_thread_stream_ends_the_run_with_the_whole_answer_once(
    cluster: Cluster,
) -> None:
    """A worker SIGKILLed mid-run: the thread stream's part of the run takes the retried
    attempt's `metadata`, then a `values` snapshot that drops the first attempt's half answer
    before the new attempt's chunks, ends with the whole answer once and the run_done, and is
    exactly the run's own stream replayed afterwards: nothing twice, nothing missing."""
    _, url = await cluster.server()
    # Both workers up before the run (one started mid-run may be ready only after it ended).
    workers = [await cluster.ready_worker() for _ in range(2)]
    sdk = client_for(url)
    tid = (await sdk.threads.create())["thread_id"]
    parts: list[StreamPart] = []

    async def follow() -> None:
        # Opened before or after the run is created, the stream takes it from its start.
        stream = await sdk.threads.join_stream(tid)
        async with contextlib.aclosing(stream) as opened:  # type: ignore[type-var]
            async for part in opened:
                parts.append(part)
                if run_done(part):
                    return

    viewer = asyncio.create_task(follow())
    text = words(250)
    run = await sdk.runs.create(
        tid, "chat", input=human(text), stream_mode=["values", "messages-tuple"], config=slow()
    )
    run_id = run["run_id"]

    async def chunks_at_least(n: int) -> bool:
        return sum(p.event == "messages" for p in parts) >= n

    await eventually(lambda: chunks_at_least(15), "chunks", 30)
    running, other = sorted(workers, key=lambda w: not started(w, run_id))
    assert started(running, run_id) and not started(other, run_id)
    running.kill()
    await asyncio.wait_for(viewer, 60)
    assert [(p.event, p.data) for p in parts[-2:]] == [
        ("end", {"run_id": run_id, "status": "success"}),
        ("metadata", {"status": "run_done", "run_id": run_id}),
    ]
    assert [p.data for p in parts if p.event == "metadata"] == [
        {"run_id": run_id, "attempt": 1},
        {"run_id": run_id, "attempt": 2},
        {"status": "run_done", "run_id": run_id},
    ]
    final = [p.data for p in parts if p.event == "values"][-1]
    assert messages_of(final) == [("human", text), ("ai", text)]
    retried = [p.event for p in parts].index("metadata", 1)
    assert parts[retried + 1].event == "values"
    assert messages_of(parts[retried + 1].data) == [("human", text)]
    assert chunks_text(parts[retried:]) == text
    # The SDK gives a frame without an `id:` (those that re-send an attempt's messages) the
    # id before it: an id may repeat back to back, never after another.
    ids = [key for key, _ in itertools.groupby(p.id for p in parts)]
    assert len(set(ids)) == len(ids) and all(i and i.split(":")[0] == run_id for i in ids)
    replayed = await collect(sdk.runs.join_stream(tid, run_id, last_event_id="-1"))
    assert wire(parts) == own_ids(run_id, replayed)
    assert (await sdk.runs.get(tid, run_id))["status"] == "success"
    assert started(other, run_id) and other.alive()
