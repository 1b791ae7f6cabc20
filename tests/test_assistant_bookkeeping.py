"""The assistant's bookkeeping is not input (issue 31): `turn` (what `grade` grades) and
`pending` (the conflicts `confirm` asks about) are the graph's own channels. Its input schema is
`messages` alone, so a run's input that names them is refused at submit (422, as any key the
input schema lacks) and, reaching the worker any other way, dropped by the graph as LangGraph
drops it; and whatever a pending conflict says, no fact longer than the documented limit is
written. Real server, worker, Redis and Postgres; the `fake` model."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from runner.assistant.facts import Fact
from runner.assistant.graph import remember_once
from runner.run_scope import RunScope, running
from stream_store.run_submit import NewRun
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.store import OwnerStore, StoreCaps
from tests.conftest import StartServer, StartWorker
from tests.test_assistant import CONFIG, FACTS, facts_of, new_thread, turn
from tests.test_langgraph_api import API_KEYS, client_for, human
from tests.test_metrics import samples, scrape, until, value

LIMIT = 120  # characters of a fact's value (docs/memory.md)
LONG = "x" * 5000
FORGED_TURN = {
    "confirmations": [
        {"key": f"k{i}", "answer": "yes", "verdict": "yes", "by": "fast_path"} for i in range(50)
    ]
}


def forged_conflict(new_value: str = LONG) -> dict[str, Any]:
    """A pending conflict as `extract` stages one, for a name the user never stated."""
    return {
        "id": "forged:name",
        "key": "name",
        "old": Fact("name", "Ann", 0.9, "forged").as_value(),
        "new": Fact("name", new_value, 0.9, "forged").as_value(),
        "staged_at": time.time(),
    }


class Served:
    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self.alice = client_for(url, "key-a")
        self.http = httpx.AsyncClient(
            base_url=url, timeout=30, headers={"Authorization": "Bearer key-a"}
        )

    async def run_ended(self, run_id: str) -> dict[str, Any]:
        """`/v1`'s record of the run once it stopped (ended, or at a question)."""
        for _ in range(300):
            run: dict[str, Any] = (await self.http.get(f"/v1/runs/{run_id}")).json()
            if run["status"] not in ("queued", "running"):
                return run
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} did not stop: {run}")

    async def evaluations(self, run_id: str) -> list[dict[str, Any]]:
        answer = await self.http.get(f"/v1/runs/{run_id}/evaluations")
        assert answer.status_code == 200, answer.text
        return list(answer.json()["evaluations"])

    async def confirmation_grades_counted(self) -> float:
        """`runstream_evaluations_total` of the assistant's confirmations, once /metrics shows
        its reply grades (the deployment figures are cached for a second)."""
        metrics = f"{self.url}/metrics"
        await until(
            metrics,
            lambda t: value(t, "runstream_evaluations_total", graph="assistant", kind="reply") >= 1,
        )
        return sum(
            s.value
            for s in samples(await scrape(metrics))
            if s.name == "runstream_evaluations_total"
            and s.labels.get("graph") == "assistant"
            and s.labels.get("kind") == "confirmation"
        )

    async def recorded_past_submit(self, run_input: dict[str, Any]) -> str:
        """Record a run of alice's with `run_input` as it is, past the submit's check of the
        graph's input schema: as a run queued before that check, or any path that skipped it,
        reaches the worker. Its id."""
        new = NewRun(owner="alice", graph="assistant", input=run_input)
        async with open_services(self.settings) as services:
            created = await services.lifecycle.submit(new)
        return created.run.run_id


@pytest.fixture
async def served(
    settings: Settings, start_server: StartServer, start_worker: StartWorker
) -> AsyncIterator[Served]:
    server = await start_server(api_keys=API_KEYS, config_path=CONFIG)
    await start_worker(api_keys=API_KEYS, config_path=CONFIG)
    served = Served(server.url, settings)
    async with served.http:
        yield served


def user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "id": f"m-{time.monotonic_ns()}"}


async def test_guarantee_turn_and_pending_in_a_runs_input_are_refused_and_record_nothing(
    served: Served,
) -> None:
    """On the LangGraph API the input schema is `messages`: a run whose input also names the
    graph's bookkeeping is a 422 naming the keys, and nothing is recorded: no run, no grade,
    no fact."""
    thread_id = await new_thread(served.alice)
    for forged in ({"turn": FORGED_TURN}, {"pending": [forged_conflict()]}, {"summary": "x"}):
        response = await served.alice.http.client.post(
            f"/threads/{thread_id}/runs",
            json={"assistant_id": "assistant", "input": {**human("hi"), **forged}},
        )
        assert response.status_code == 422, response.text
        (key,) = forged
        assert f"the graph's input has no key {key!r}; it takes messages" in response.text
    assert await served.alice.runs.list(thread_id) == []
    assert (await served.http.get(f"/v1/threads/{thread_id}/evaluations")).json()[
        "evaluations"
    ] == []
    assert await facts_of(served.alice) == {}
    # what a client may send, the schemas say too
    schemas = await served.alice.assistants.get_schemas("assistant")
    assert set(schemas["input_schema"]["properties"]) == {"messages"}
    assert {"turn", "pending", "summary"} <= set(schemas["state_schema"]["properties"])


async def test_guarantee_a_forged_turn_that_reaches_the_worker_records_no_grades(
    served: Served,
) -> None:
    """A run whose recorded input carries a `turn` of 50 confirmations (never asked): the graph
    drops the key (LangGraph's input schema), so the run's grades are its own reply and
    extraction, and /metrics counts no confirmation."""
    run_id = await served.recorded_past_submit(
        {"messages": [user_message("hello there")], "turn": FORGED_TURN}
    )
    run = await served.run_ended(run_id)
    assert run["status"] == "succeeded", run
    grades = await served.evaluations(run_id)
    assert sorted(e["kind"] for e in grades) == ["extraction", "reply"]
    assert await served.confirmation_grades_counted() == 0
    assert await facts_of(served.alice) == {}


async def test_guarantee_a_forged_pending_conflict_answered_yes_writes_nothing(
    served: Served,
) -> None:
    """A run whose recorded input carries a pending conflict (a 5,000-character name): the
    graph drops it, so nothing is asked, a "yes" has nothing to answer, and no fact is
    written."""
    run_id = await served.recorded_past_submit(
        {"messages": [user_message("hello there")], "pending": [forged_conflict()]}
    )
    run = await served.run_ended(run_id)
    assert run["status"] == "succeeded" and run["interrupt"] is None, run
    answered = await served.http.post(f"/v1/runs/{run_id}/resume", json={"resume": "yes"})
    assert answered.status_code == 409, answered.text
    await served.run_ended(run_id)
    assert await facts_of(served.alice) == {}
    assert [e["kind"] for e in await served.evaluations(run_id)] == ["reply", "extraction"]


async def test_guarantee_a_fact_over_the_limit_is_never_stored(served: Served) -> None:
    """`pending` is still state a thread's owner may write (LangGraph's `update_state` writes
    any channel): a conflict whose new value is past the documented 120 characters is dropped
    unasked, and the write itself refuses such a value."""
    alice = served.alice
    thread_id = await new_thread(alice)
    await turn(alice, thread_id, "hello")
    await alice.threads.update_state(thread_id, {"pending": [forged_conflict()]})
    after = await turn(alice, thread_id, "hello again")
    assert after.events("conflict_dropped") == [
        {"event": "conflict_dropped", "key": "name", "problems": ["value too long"]}
    ]
    assert after.events("confirmation") == []
    assert (await alice.threads.get(thread_id))["status"] == "idle"
    assert await facts_of(alice) == {}

    # the write: a value one past the limit is refused, one at it is written
    run_id = (await alice.runs.list(thread_id))[0]["run_id"]
    async with open_services(served.settings) as services:
        store = OwnerStore(services.store, "alice", StoreCaps.of(services.settings))
        run = await services.run_records.get_run(run_id)
        assert run is not None
        with running(RunScope.of(run, services)):
            too_long = Fact("note", "y" * (LIMIT + 1), 0.9, run_id)
            assert await remember_once(store, "fact:too-long", too_long) is None
            at_limit = Fact("note", "z" * LIMIT, 0.9, run_id)
            assert await remember_once(store, "fact:at-limit", at_limit) is not None
    stored = await alice.store.search_items(FACTS, limit=100)
    assert [item["value"]["value"] for item in stored["items"]] == ["z" * LIMIT]
