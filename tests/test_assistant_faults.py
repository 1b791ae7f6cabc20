"""A worker SIGKILLed during the assistant's memory steps: the next attempt runs the step again
and writes nothing twice (`runner.run_scope.once` and the store's stamp), and the thread shows
each answer once. Extraction (killed between two facts' writes, and after both), confirmation
and grading, each on the assistant itself (tests/projects/assistant_fault lingers before or
after each step's writes)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import psycopg
import pytest

from stream_store.settings import Settings
from tests.processes import ROOT, Cluster
from tests.sse import Received
from tests.test_faults import WatchedRun, body, wait_for

PROJECT = {
    "RUNSTREAM_CONFIG": str(ROOT / "tests" / "projects" / "assistant_fault" / "langgraph.json")
}

pytestmark = pytest.mark.fault


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """A short lease, so the killed worker's run is handed over at once."""
    return replace(settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0)


def memory_events(events: list[Received], kind: str) -> list[dict[str, str]]:
    """The `memory` custom events of `kind` among `events`."""
    return [
        e.data["memory"]
        for e in events
        if e.event == "custom" and e.data.get("memory", {}).get("event") == kind
    ]


async def ledger_and_store(
    settings: Settings, run_id: str
) -> tuple[list[tuple[str, int, str]], list[tuple[str, str, str, datetime]]]:
    """The run's ledger rows (key, attempt, recorded stamp) and the store's rows (key, value,
    stamp, when written), each by key."""
    schema = settings.database_schema
    async with await psycopg.AsyncConnection.connect(str(settings.database_url)) as conn:
        ledger = await (
            await conn.execute(
                f"SELECT tool_call_id, attempt, result->>'written_at'"
                f' FROM "{schema}".runstream_tool_executions WHERE run_id = %s ORDER BY 1',
                (run_id,),
            )
        ).fetchall()
        rows = await (
            await conn.execute(f'SELECT key, value, updated_at FROM "{schema}".store ORDER BY key')
        ).fetchall()
    return (
        [(key, attempt, stamp) for key, attempt, stamp in ledger],
        [(key, value["value"], value["written_at"], at) for key, value, at in rows],
    )


async def test_a_worker_killed_mid_extraction_writes_each_fact_once(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    """Killed after both facts were written, before the turn's checkpoint: the next attempt
    reaches both keys again, gets each one's recorded stamp back from the ledger and writes
    neither again."""
    _, url = await cluster.server(**PROJECT)
    first = await cluster.ready_worker(**PROJECT)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        request = body("My name is Ann and I live in Paris.", graph="assistant")
        watched = await WatchedRun.submit(http, url, request)
        events = watched.events
        await wait_for(
            lambda: len(memory_events(events, "remembered")) == 2, what="the facts written"
        )
        killed_at = datetime.now(UTC)
        first.kill()
        await cluster.ready_worker(**PROJECT, RUNSTREAM_TEST_LINGER_S="0")
        await watched.end()
        thread = (await http.get(f"/v1/threads/{watched.run['thread_id']}")).json()

    assert events[-1].event == "done", events[-1]
    retry = [e.event for e in events].index("retry")
    before = memory_events(events[:retry], "remembered")
    after = memory_events(events[retry:], "remembered")
    assert [e["key"] for e in before] == ["name", "location"]
    assert after == before  # replayed: the same stamps, no new write
    assert memory_events(events, "unchanged") == []
    stamps = {e["key"]: e["written_at"] for e in before}
    ledger, rows = await ledger_and_store(cluster_settings, watched.run["run_id"])
    assert ledger == [
        ("fact:location", 1, stamps["location"]),
        ("fact:name", 1, stamps["name"]),
    ]
    assert [row[:3] for row in rows] == [
        ("location", "Paris", stamps["location"]),
        ("name", "Ann", stamps["name"]),
    ]
    assert all(at < killed_at for *_, at in rows)  # not written again
    answers = [m for m in thread["messages"] if m["role"] == "assistant"]
    assert len(answers) == 1


async def test_a_worker_killed_between_two_facts_writes_replays_the_first_and_writes_the_second(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    """Killed inside the extraction, after the first fact's write and before the second's
    (each write lingers before it starts): the next attempt replays the first from the ledger
    (its recorded stamp, the store left as it was) and writes the second, each once."""
    _, url = await cluster.server(**PROJECT)
    lingering = {"RUNSTREAM_TEST_LINGER_S": "0", "RUNSTREAM_TEST_FACT_LINGER_S": "5"}
    first = await cluster.ready_worker(**PROJECT, **lingering)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        request = body("My name is Ann and I live in Paris.", graph="assistant")
        watched = await WatchedRun.submit(http, url, request)
        events = watched.events
        await wait_for(
            lambda: len(memory_events(events, "remembered")) == 1, what="the first fact written"
        )
        killed_at = datetime.now(UTC)  # the second write is a linger (5 s) away
        first.kill()
        await cluster.ready_worker(**PROJECT, RUNSTREAM_TEST_LINGER_S="0")
        await watched.end()
        thread = (await http.get(f"/v1/threads/{watched.run['thread_id']}")).json()

    assert events[-1].event == "done", events[-1]
    names = [e.event for e in events]
    assert names.count("retry") == 1
    retry = names.index("retry")
    before = memory_events(events[:retry], "remembered")
    after = memory_events(events[retry:], "remembered")
    assert [e["key"] for e in before] == ["name"]  # killed before the second write
    assert [e["key"] for e in after] == ["name", "location"]
    # the replay path: the second attempt got the first's recorded stamp back (a new write
    # would have made a new one)
    assert after[0] == before[0]
    name, location = before[0]["written_at"], after[1]["written_at"]
    ledger, rows = await ledger_and_store(cluster_settings, watched.run["run_id"])
    # each key once in the ledger: the name claimed by attempt 1, the location by attempt 2
    assert ledger == [("fact:location", 2, location), ("fact:name", 1, name)]
    # and once in the store: the name as attempt 1 wrote it, the location after the kill
    assert [row[:3] for row in rows] == [("location", "Paris", location), ("name", "Ann", name)]
    written = {key: at for key, *_, at in rows}
    assert written["name"] < killed_at < written["location"]
    answers = [m for m in thread["messages"] if m["role"] == "assistant"]
    assert len(answers) == 1


async def test_a_worker_killed_after_a_confirmed_answer_applies_it_once(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    """Killed after "yes" replaced the stored name and before the confirmation's checkpoint:
    the next attempt answers the same question again from the checkpoint, finds the write in
    the ledger and writes nothing; the thread says "Updated" once, the answer is graded once."""
    _, url = await cluster.server(**PROJECT)
    lingering = {"RUNSTREAM_TEST_LINGER_S": "0", "RUNSTREAM_TEST_CONFIRM_LINGER_S": "5"}
    first = await cluster.ready_worker(**PROJECT, **lingering)
    schema = cluster_settings.database_schema

    async def stored_name() -> dict[str, object] | None:
        async with await psycopg.AsyncConnection.connect(str(cluster_settings.database_url)) as c:
            row = await (
                await c.execute(f"SELECT value FROM \"{schema}\".store WHERE key = 'name'")
            ).fetchone()
        return row[0] if row else None

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        ann = await WatchedRun.submit(http, url, body("My name is Ann.", graph="assistant"))
        assert (await ann.end())[-1].event == "done"
        bob = await WatchedRun.submit(
            http, url, body("Actually my name is Bob.", graph="assistant")
        )
        run_id = bob.run["run_id"]
        await wait_for(
            lambda: any(
                e.event == "run" and e.data.get("status") == "interrupted" for e in bob.events
            ),
            what="the question",
        )
        answered = await http.post(f"/v1/runs/{run_id}/resume", json={"resume": "yes"})
        assert answered.status_code == 202, answered.text

        deadline = asyncio.get_running_loop().time() + 30
        while (applied := await stored_name()) is None or applied["value"] != "Bob":
            assert asyncio.get_running_loop().time() < deadline, "the answer was not applied"
            await asyncio.sleep(0.05)
        killed_at = datetime.now(UTC)
        first.kill()
        await cluster.ready_worker(**PROJECT, RUNSTREAM_TEST_LINGER_S="0")
        events = await bob.end()
        thread = (await http.get(f"/v1/threads/{bob.run['thread_id']}")).json()
        graded = (await http.get(f"/v1/runs/{run_id}/evaluations")).json()["evaluations"]

    assert events[-1].event == "done", events[-1]
    assert "retry" in [e.event for e in events]
    assert await stored_name() == applied  # the same value and stamp: not written again
    async with await psycopg.AsyncConnection.connect(str(cluster_settings.database_url)) as conn:
        updated_at, ledger = await (
            await conn.execute(
                f"SELECT (SELECT updated_at FROM \"{schema}\".store WHERE key = 'name'),"
                f' (SELECT array_agg(tool_call_id) FROM "{schema}".runstream_tool_executions'
                " WHERE run_id = %s)",
                (run_id,),
            )
        ).fetchone() or (None, None)
    assert updated_at is not None and updated_at < killed_at
    assert ledger is not None and len(ledger) == 1 and ledger[0].startswith("confirm:")
    said = [m["content"] for m in thread["messages"] if m["role"] == "assistant"]
    assert said.count("Updated: your name is Bob.") == 1, said
    assert len(said) == 2, said  # the turn's answer and the update, each once
    kinds = sorted(e["kind"] for e in graded)
    assert kinds.count("confirmation") == 1, kinds
    assert len({e["key"] for e in graded}) == len(graded)


async def test_a_worker_killed_after_grading_records_each_grade_once(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    """Killed after the turn's grades were recorded and before the grading's checkpoint: the
    next attempt grades again and records nothing twice (each grade's key, once per run)."""
    _, url = await cluster.server(**PROJECT)
    lingering = {"RUNSTREAM_TEST_LINGER_S": "0", "RUNSTREAM_TEST_GRADE_LINGER_S": "5"}
    first = await cluster.ready_worker(**PROJECT, **lingering)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        watched = await WatchedRun.submit(http, url, body("I like tea.", graph="assistant"))
        run_id = watched.run["run_id"]

        async def recorded() -> list[dict[str, object]]:
            found = (await http.get(f"/v1/runs/{run_id}/evaluations")).json()["evaluations"]
            return list(found)

        deadline = asyncio.get_running_loop().time() + 30
        while len(before := await recorded()) < 2:  # the reply's grade and the extraction's
            assert asyncio.get_running_loop().time() < deadline, "no grades recorded"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the grading has recorded all it will, and lingers
        before = await recorded()
        first.kill()
        await cluster.ready_worker(**PROJECT, RUNSTREAM_TEST_LINGER_S="0")
        events = await watched.end()
        after = await recorded()
        thread = (await http.get(f"/v1/threads/{watched.run['thread_id']}")).json()

    assert events[-1].event == "done", events[-1]
    assert "retry" in [e.event for e in events]
    assert sorted(e["kind"] for e in before) == ["extraction", "reply"]
    # the same rows (attempt 1, recorded once); the answer's message id is joined in at the end
    assert [{**e, "message_id": None} for e in after] == [{**e, "message_id": None} for e in before]
    assert all(e["attempt"] == 1 for e in after)
    said = [m for m in thread["messages"] if m["role"] == "assistant"]
    assert len(said) == 1
