"""LangGraph's bulk calls with the official SDK: `runs.create_batch` and `threads.prune`."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError, UnprocessableEntityError

from stream_store.limits import BATCH_MAX_RUNS, BULK_CANCEL_MAX_RUNS
from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.sse import Received, iter_events
from tests.test_langgraph_api import client_for, human, v1_interrupted_run


@pytest.fixture
async def sdk(server: ServerHandle, worker: Any) -> LangGraphClient:
    return client_for(server.url)


async def test_a_batch_makes_each_run_on_its_own_thread(sdk: LangGraphClient) -> None:
    runs = await sdk.runs.create_batch(
        [{"assistant_id": "chat", "input": human(f"question {i}")} for i in range(3)]
    )
    assert len({r["run_id"] for r in runs}) == 3
    assert len({r["thread_id"] for r in runs}) == 3
    for i, run in enumerate(runs):
        await sdk.runs.join(run["thread_id"], run["run_id"])
        state = await sdk.threads.get_state(run["thread_id"])
        assert [m["content"] for m in state["values"]["messages"]] == [f"question {i}"] * 2


async def test_a_batch_with_one_bad_run_records_none(sdk: LangGraphClient) -> None:
    good = {"assistant_id": "chat", "input": human("fine")}
    for bad, error in (
        ({"assistant_id": "no-such-graph", "input": human("x")}, NotFoundError),
        ({"assistant_id": "chat", "input": {"messages": [{"type": "human"}]}}, Exception),
    ):
        with pytest.raises(error):
            await sdk.runs.create_batch([good, bad])
    with pytest.raises(UnprocessableEntityError):
        await sdk.runs.create_batch([good] * (BATCH_MAX_RUNS + 1))
    assert await sdk.threads.count() == 0


async def test_prune_deletes_the_threads_it_names(sdk: LangGraphClient) -> None:
    threads = [await sdk.threads.create() for _ in range(3)]
    for thread in threads[:2]:
        await sdk.runs.wait(thread["thread_id"], "chat", input=human("hello"))
    unknown = "00000000-0000-4000-8000-000000000000"
    ids = [t["thread_id"] for t in threads[:2]]
    assert await sdk.threads.prune([*ids, unknown]) == {"pruned_count": 2}
    for thread_id in ids:
        with pytest.raises(NotFoundError):
            await sdk.threads.get(thread_id)
    assert (await sdk.threads.get(threads[2]["thread_id"]))["thread_id"] == threads[2]["thread_id"]


async def test_prune_keep_latest_keeps_the_state_and_drops_the_history(
    sdk: LangGraphClient,
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    for question in ("one", "two"):
        await sdk.runs.wait(thread_id, "chat", input=human(question))
    before = await sdk.threads.get_state(thread_id)
    assert len(await sdk.threads.get_history(thread_id)) > 1
    assert await sdk.threads.prune([thread_id], strategy="keep_latest") == {"pruned_count": 1}
    after = await sdk.threads.get_state(thread_id)
    assert after["values"] == before["values"]
    assert after["checkpoint"]["checkpoint_id"] == before["checkpoint"]["checkpoint_id"]
    assert len(await sdk.threads.get_history(thread_id)) == 1
    # the thread goes on from its kept state
    await sdk.runs.wait(thread_id, "chat", input=human("three"))
    contents = [
        m["content"] for m in (await sdk.threads.get_state(thread_id))["values"]["messages"]
    ]
    assert contents == ["one", "one", "two", "two", "three", "three"]


async def test_prune_refuses_a_busy_thread_and_changes_nothing(
    server: ServerHandle, start_worker: StartWorker
) -> None:
    lg = client_for(server.url)
    idle = (await lg.threads.create())["thread_id"]
    busy = (await lg.threads.create())["thread_id"]
    await lg.runs.create(busy, "chat", input=human("queued, no worker yet"))
    with pytest.raises(ConflictError):
        await lg.threads.prune([idle, busy])
    assert (await lg.threads.get(idle))["thread_id"] == idle
    await start_worker()
    runs = await lg.runs.list(busy)
    await lg.runs.join(busy, runs[0]["run_id"])
    assert await lg.threads.prune([idle, busy]) == {"pruned_count": 2}


async def test_prune_skips_another_callers_threads(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    server = await start_server(api_keys={"key-a": "alice", "key-b": "bob"})
    await start_worker()
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")
    thread_id = (await alice.threads.create())["thread_id"]
    await alice.runs.wait(thread_id, "chat", input=human("mine"))
    history = await alice.threads.get_history(thread_id)
    for strategy in ("delete", "keep_latest"):
        assert await bob.threads.prune([thread_id], strategy=strategy) == {"pruned_count": 0}
    assert await alice.threads.get_history(thread_id) == history


@pytest.mark.parametrize("how", ["prune", "delete"])
async def test_prune_or_delete_ends_the_stream_of_a_run_waiting_at_an_interrupt(
    sdk: LangGraphClient, client: httpx.AsyncClient, how: str
) -> None:
    """Its viewers are told it was cancelled (nothing will resume it) before its stream goes."""
    run = await v1_interrupted_run(client)
    received: list[Received] = []
    attached = asyncio.Event()

    async def watch() -> None:
        async for event in iter_events(client, f"/v1/runs/{run['run_id']}/events"):
            received.append(event)
            attached.set()  # replayed: the viewer follows the run live from here

    watching = asyncio.create_task(watch())
    await asyncio.wait_for(attached.wait(), 10)
    if how == "prune":
        assert await sdk.threads.prune([run["thread_id"]]) == {"pruned_count": 1}
    else:
        await sdk.threads.delete(run["thread_id"])
    await asyncio.wait_for(watching, 10)
    assert [(e.event, e.data) for e in received[-2:]] == [
        ("run", {"status": "cancelled", "attempt": 1}),
        ("done", {"status": "cancelled", "output": None}),
    ]
    with pytest.raises(NotFoundError):
        await sdk.threads.get(run["thread_id"])


async def test_cancel_many_bounds_its_ids_and_cancels_only_the_callers_runs(
    start_server: StartServer,
) -> None:
    """Past `BULK_CANCEL_MAX_RUNS` ids, 422 naming the limit and nothing cancelled (20,000 ids
    took 12 s of lookups one by one); at the limit, one lookup, and of the ids only the
    caller's runs are cancelled: another caller's are skipped as unknown ones are."""
    server = await start_server(api_keys={"key-a": "alice", "key-b": "bob"})
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")
    mine = []
    for text in ("one", "two"):  # no worker: they stay pending
        thread_id = (await alice.threads.create())["thread_id"]
        mine.append(await alice.runs.create(thread_id, "chat", input=human(text)))
    bobs_thread = (await bob.threads.create())["thread_id"]
    bobs = await bob.runs.create(bobs_thread, "chat", input=human("not yours"))
    named = [run["run_id"] for run in mine] + [bobs["run_id"]]
    unknown = [str(uuid.uuid4()) for _ in range(BULK_CANCEL_MAX_RUNS - len(named))]

    with pytest.raises(UnprocessableEntityError) as refused:
        await alice.runs.cancel_many(run_ids=[*named, *unknown, str(uuid.uuid4())])
    assert str(BULK_CANCEL_MAX_RUNS) in refused.value.response.json()["detail"]
    for run in [*mine, bobs]:
        owner = bob if run is bobs else alice
        assert (await owner.runs.get(run["thread_id"], run["run_id"]))["status"] == "pending"

    await alice.runs.cancel_many(run_ids=[*named, *unknown])
    for run in mine:
        assert (await alice.runs.get(run["thread_id"], run["run_id"]))["status"] == "interrupted"
    assert (await bob.runs.get(bobs_thread, bobs["run_id"]))["status"] == "pending"
    with pytest.raises(NotFoundError):  # none of them alice's
        await alice.runs.cancel_many(run_ids=[bobs["run_id"], *unknown[:10]])
    assert (await bob.runs.get(bobs_thread, bobs["run_id"]))["status"] == "pending"
