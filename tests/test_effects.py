"""`runner.run_scope.once` in a user graph: its effect runs once across a worker SIGKILL
(tests/projects/runtime `sends_once`), as the built-in `save_note` does (TestWriteToolOnce)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import ToolCall

from runner.graphs import run_save_note
from runner.run_scope import EffectNotRecorded, NotInARun, once
from stream_store.errors import Fenced
from stream_store.run_records import RunRecord
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from stream_store.store import OwnerStore, StoreCaps
from tests.processes import Cluster
from tests.test_evaluations import claimed_run, recorded
from tests.test_faults import WatchedRun, body, wait_for
from tests.test_graph_runtime import PROJECT


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """A short lease, so the killed worker's run is handed over at once."""
    return replace(settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0)


async def test_once_outside_a_run_is_refused() -> None:
    async def effect() -> None:
        raise AssertionError("must not run")

    with pytest.raises(NotInARun):
        await once("k", effect)


@pytest.mark.slow
async def test_a_user_effect_runs_once_across_a_worker_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.txt"
    env = {**PROJECT, "RUNTIME_EFFECTS_FILE": str(sent)}
    _, url = await cluster.server(**PROJECT)
    first = await cluster.ready_worker(**env)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        watched = await WatchedRun.submit(http, url, body("send", graph="sends_once"))
        events = watched.events
        await wait_for(lambda: any(e.event == "custom" for e in events), what="the send")
        first.kill()
        await cluster.ready_worker(**env, RUNSTREAM_TEST_LINGER_S="0")
        await watched.end()
    results = [e.data for e in events if e.event == "custom"]
    assert results == [{"result": {"sent": 1}}, {"result": {"sent": 1}}]  # the second replayed
    assert events[-1].event == "done", events[-1]
    assert sent.read_text() == "sent\n"


# -- the two phases (issue 34): no connection held while the effect runs ----------------------


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with open_services(settings) as opened:
        yield opened


@pytest.fixture
async def one_connection(settings: Settings) -> AsyncIterator[Services]:
    """Services on a pool of one connection: an effect that waited for a connection `once`
    held would wait for ever."""
    async with open_services(settings, pool_size=1) as opened:
        yield opened


async def test_a_slow_effect_that_uses_the_pool_holds_no_connection(
    one_connection: Services,
) -> None:
    run = await claimed_run(one_connection)

    async def effect(i: int) -> int:
        await asyncio.sleep(0.2)
        async with one_connection.pool.connection() as conn:  # the one connection of the pool
            await conn.execute("SELECT 1")
        return i

    with recorded(one_connection, run):
        async with asyncio.timeout(30):  # a deadlock fails here instead of hanging
            done = await asyncio.gather(*(once(f"k{i}", lambda i=i: effect(i)) for i in range(3)))
    assert done == [0, 1, 2]


async def test_an_effect_may_use_the_store(one_connection: Services) -> None:
    run = await claimed_run(one_connection)
    store = OwnerStore(one_connection.store, run.owner, StoreCaps.of(one_connection.settings))

    async def remember() -> str:
        await store.aput(("notes",), "n", {"text": "kept"})
        return "put"

    with recorded(one_connection, run):
        async with asyncio.timeout(30):
            assert await once("note", remember) == "put"
    item = await store.aget(("notes",), "n")
    assert item is not None and item.value == {"text": "kept"}


async def test_a_replay_answers_what_the_first_call_answered(services: Services) -> None:
    ran: list[int] = []

    async def effect() -> tuple[int, int]:
        ran.append(1)
        return (1, 2)

    first = await claimed_run(services)
    with recorded(services, first):
        answered = await once("pair", effect)
    second = await next_attempt(services, first)
    with recorded(services, second):
        replayed = await once("pair", effect)
    assert answered == replayed == [1, 2]  # a tuple is recorded as JSON: a list, both times
    assert ran == [1]


async def test_a_result_that_is_not_json_is_refused_and_the_effect_never_runs_again(
    services: Services,
) -> None:
    ran: list[int] = []

    async def effect() -> object:
        ran.append(1)
        return object()

    first = await claimed_run(services)
    with recorded(services, first), pytest.raises(EffectNotRecorded, match="not JSON"):
        await once("opaque", effect)
    second = await next_attempt(services, first)
    with recorded(services, second), pytest.raises(EffectNotRecorded, match="not JSON"):
        await once("opaque", effect)
    assert ran == [1]


async def test_an_effect_that_failed_may_be_tried_again_and_a_dead_attempts_claim_is_taken_over(
    services: Services,
) -> None:
    tries: list[str] = []

    async def flaky() -> str:
        tries.append("try")
        if len(tries) == 1:
            raise ConnectionError("the API was down")
        return "sent"

    first = await claimed_run(services)
    with recorded(services, first):
        with pytest.raises(ConnectionError):
            await once("send", flaky)
        assert await once("send", flaky) == "sent"  # a node's retry in the same attempt
    # a claim its attempt never recorded (the worker died mid-effect) goes to the next attempt
    async with services.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO runstream_tool_executions (run_id, tool_call_id, tool, attempt)"
            " VALUES (%s, 'orphan', 'effect', %s)",
            (first.run_id, first.attempt),
        )
    second = await next_attempt(services, first)
    with recorded(services, second):
        assert await once("orphan", flaky) == "sent"
        assert await once("send", flaky) == "sent"  # recorded: replayed
    assert tries == ["try", "try", "try"]


async def next_attempt(services: Services, run: RunRecord) -> RunRecord:
    """The run handed to a new attempt, as the reaper hands a dead worker's run on."""
    queued = await services.run_records.requeue_attempt(run.run_id, run.attempt)
    assert queued is not None
    claimed = await services.lifecycle.claim(run.run_id)
    assert claimed is not None and claimed.attempt == run.attempt + 1
    return claimed


async def test_save_note_is_written_once_by_a_later_attempt_and_never_by_a_fenced_one(
    services: Services,
) -> None:
    """The built-in `save_note` through `once`: an attempt that died between its note's insert
    and the ledger's record left both; the next attempt runs the effect again and inserts
    nothing more. An attempt that lost the run inserts nothing at all."""
    first = await claimed_run(services)
    async with services.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO runstream_tool_executions (run_id, tool_call_id, tool, attempt)"
            " VALUES (%s, 'call-1', 'save_note', %s)",
            (first.run_id, first.attempt),
        )
        await conn.execute(
            "INSERT INTO runstream_notes (thread_id, run_id, tool_call_id, content)"
            " VALUES (%s, %s, 'call-1', 'hi')",
            (first.thread_id, first.run_id),
        )
    second = await next_attempt(services, first)
    with recorded(services, second):
        execution = await run_save_note(note_call("call-1"))
        again = await run_save_note(note_call("call-1"))
    assert (execution.result, execution.replayed) == ("saved note (2 characters)", False)
    assert (again.result, again.replayed) == ("saved note (2 characters)", True)
    with recorded(services, first), pytest.raises(Fenced):
        await run_save_note(note_call("call-2"))
    async with services.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT tool_call_id FROM runstream_notes WHERE run_id = %s", (first.run_id,)
        )
        assert [row["tool_call_id"] for row in await cur.fetchall()] == ["call-1"]
        cur = await conn.execute(
            "SELECT tool_call_id FROM runstream_tool_executions WHERE run_id = %s",
            (first.run_id,),
        )
        assert [row["tool_call_id"] for row in await cur.fetchall()] == ["call-1"]


def note_call(call_id: str) -> ToolCall:
    return ToolCall(name="save_note", args={"content": "hi"}, id=call_id)
