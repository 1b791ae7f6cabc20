"""The assistant's thresholds (its `context`, docs/memory.md "Settings") checked once, by its
context schema, wherever they are given: a run's context at submit (both APIs), an assistant's
at create and update; and settable from `/v1` (`context`, or the same keys in
`config.configurable`), with any other key refused (issue 33). Real server, worker, Redis and
Postgres; the `fake` model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from runner.assistant.graph import AssistantContext
from tests.conftest import StartServer, StartWorker
from tests.test_assistant import CONFIG, new_thread, turn
from tests.test_langgraph_api import API_KEYS, client_for, human


class Served:
    def __init__(self, url: str) -> None:
        self.alice = client_for(url, "key-a")
        self.http = httpx.AsyncClient(
            base_url=url, timeout=30, headers={"Authorization": "Bearer key-a"}
        )

    async def v1_turn(self, thread_id: str | None, text: str, **body: Any) -> dict[str, Any]:
        """One `/v1` run of the assistant, waited for; its record."""
        submitted = await self.http.post(
            "/v1/runs",
            json={
                "graph": "assistant",
                "thread_id": thread_id,
                "input": {"messages": [{"role": "user", "content": text}]},
                **body,
            },
        )
        assert submitted.status_code == 202, submitted.text
        return await self.ended(submitted.json()["run_id"])

    async def ended(self, run_id: str) -> dict[str, Any]:
        """The run's record once it is neither queued nor running."""
        for _ in range(300):
            run: dict[str, Any] = (await self.http.get(f"/v1/runs/{run_id}")).json()
            if run["status"] not in ("queued", "running"):
                return run
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} did not stop")


@pytest.fixture
async def served(start_server: StartServer, start_worker: StartWorker) -> AsyncIterator[Served]:
    server = await start_server(api_keys=API_KEYS, config_path=CONFIG)
    await start_worker(api_keys=API_KEYS, config_path=CONFIG)
    served = Served(server.url)
    async with served.http:
        yield served


# each context the schema must refuse, and the field its 422 must name
REFUSED = [
    ({"keep_recent": 2.5, "summary_after": 4}, "keep_recent must be an integer"),
    ({"recalled_facts": 1.5}, "recalled_facts must be an integer"),
    ({"summary_after": "many"}, "summary_after must be an integer"),
    ({"summary_after": True}, "summary_after must be an integer"),
    ({"keep_recent": 1}, "keep_recent must be from 2"),
    ({"recalled_facts": 0}, "recalled_facts must be from 1"),
    ({"summary_after": 1001}, "summary_after must be from 3 to 1000"),
    ({"conflict_ttl_s": 0}, "conflict_ttl_s must be a number"),
    ({"conflict_ttl_s": "1"}, "conflict_ttl_s must be a number"),
    ({"summary_after": 4, "keep_recent": 4}, "keep_recent (4) must be less than summary_after"),
]


@pytest.mark.parametrize(("context", "named"), REFUSED)
def test_the_context_schema_refuses_what_would_fail_a_run_naming_the_field(
    context: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        AssistantContext(**context)


def test_the_context_schema_takes_whole_numbers_as_integers() -> None:
    context = AssistantContext(summary_after=4.0, keep_recent=2, conflict_ttl_s=5)  # type: ignore[arg-type]
    assert (context.summary_after, context.keep_recent, context.conflict_ttl_s) == (4, 2, 5.0)
    assert isinstance(context.summary_after, int)
    assert isinstance(context.conflict_ttl_s, float)


async def test_a_context_the_schema_refuses_is_a_422_naming_its_field_on_both_apis(
    served: Served,
) -> None:
    thread_id = await new_thread(served.alice)
    for context, named in REFUSED:
        answer = await served.alice.http.client.post(
            f"/threads/{thread_id}/runs",
            json={"assistant_id": "assistant", "input": human("hi"), "context": context},
        )
        assert answer.status_code == 422, (context, answer.text)
        assert named in answer.text, (context, answer.text)
        assert "not supported between" not in answer.text
        for where in ("context", "config"):
            body = (
                {"context": context}
                if where == "context"
                else {"config": {"configurable": context}}
            )
            v1 = await served.http.post(
                "/v1/runs",
                json={
                    "graph": "assistant",
                    "input": {"messages": [{"role": "user", "content": "hi"}]},
                    **body,
                },
            )
            assert v1.status_code == 422, (where, context, v1.text)
            assert named in v1.text, (where, context, v1.text)
    assert await served.alice.runs.list(thread_id) == []


async def test_fractional_thresholds_no_longer_fail_the_third_run(served: Served) -> None:
    """Issue 33: `keep_recent 2.5` was taken, and the third run failed (slice indices)."""
    alice = served.alice
    thread_id = await new_thread(alice)
    for text in ("one", "two", "three"):
        await turn(alice, thread_id, text, context={"keep_recent": 2.0, "summary_after": 4})
    state = (await alice.threads.get_state(thread_id))["values"]
    assert state["summary"]
    assert len(state["messages"]) <= 4


async def test_an_assistant_whose_context_would_fail_its_runs_is_refused(served: Served) -> None:
    alice = served.alice
    for context, named in REFUSED:
        answer = await alice.http.client.post(
            "/assistants", json={"graph_id": "assistant", "context": context}
        )
        assert answer.status_code == 422, (context, answer.text)
        assert named in answer.text, (context, answer.text)
        configured = await alice.http.client.post(
            "/assistants", json={"graph_id": "assistant", "config": {"configurable": context}}
        )
        assert configured.status_code == 422, (context, configured.text)
    assert await alice.assistants.search(graph_id="assistant", limit=100) == [
        await alice.assistants.get("assistant")
    ]
    made = await alice.assistants.create(
        "assistant", context={"keep_recent": 2, "summary_after": 4}
    )
    assert made["context"] == {"keep_recent": 2, "summary_after": 4}
    refused = await alice.http.client.patch(
        f"/assistants/{made['assistant_id']}", json={"context": {"keep_recent": 1}}
    )
    assert refused.status_code == 422, refused.text
    assert "keep_recent must be from 2" in refused.text
    assert (await alice.assistants.get(made["assistant_id"]))["version"] == 1
    # its runs take its thresholds
    thread_id = await new_thread(alice)
    for text in ("one", "two", "three"):
        parts = [
            p async for p in alice.runs.stream(thread_id, made["assistant_id"], input=human(text))
        ]
        assert not [p for p in parts if p.event == "error"], parts
    assert (await alice.threads.get_state(thread_id))["values"]["summary"]


async def test_v1_runs_set_the_thresholds_by_context_or_configurable(served: Served) -> None:
    """Issue 33: `config.configurable {"summary_after": 4, "keep_recent": 2}` on /v1 was taken
    and ignored (10 messages after 5 turns, nothing summarised); `context` was a 400."""
    for body in (
        {"config": {"configurable": {"summary_after": 4, "keep_recent": 2}}},
        {"context": {"summary_after": 4, "keep_recent": 2}},
    ):
        first = await served.v1_turn(None, "turn 0", **body)
        assert first["status"] == "succeeded", first
        thread_id = first["thread_id"]
        for index in range(1, 5):
            run = await served.v1_turn(thread_id, f"turn {index}", **body)
            assert run["status"] == "succeeded", run
        state = (await served.alice.threads.get_state(thread_id))["values"]
        assert len(state["messages"]) <= 4, (body, state["messages"])
        assert "turn 0" in state["summary"]


async def test_a_configurable_key_the_assistant_does_not_take_is_refused(served: Served) -> None:
    """The assistant declares its keys (its context's): any other is refused, not ignored."""
    v1 = await served.http.post(
        "/v1/runs",
        json={
            "graph": "assistant",
            "input": {"messages": [{"role": "user", "content": "hi"}]},
            "config": {"configurable": {"summary_afterr": 4}},
        },
    )
    assert v1.status_code == 400, v1.text
    assert "summary_afterr" in v1.text
    context = await served.http.post(
        "/v1/runs",
        json={
            "graph": "chat",
            "input": {"messages": [{"role": "user", "content": "hi"}]},
            "context": {"summary_after": 4},
        },
    )
    assert context.status_code == 400, context.text  # chat takes no context
    thread_id = await new_thread(served.alice)
    lg = await served.alice.http.client.post(
        f"/threads/{thread_id}/runs",
        json={
            "assistant_id": "assistant",
            "input": human("hi"),
            "config": {"configurable": {"summary_afterr": 4}},
        },
    )
    assert lg.status_code in (400, 422), lg.text
    assert "summary_afterr" in lg.text


async def test_a_langgraph_runs_configurable_is_its_context(served: Served) -> None:
    """As on LangGraph's server, a run's `config.configurable` alone is its context."""
    alice = served.alice
    thread_id = await new_thread(alice)
    for text in ("one", "two", "three"):
        await turn(
            alice, thread_id, text, config={"configurable": {"keep_recent": 2, "summary_after": 4}}
        )
    assert (await alice.threads.get_state(thread_id))["values"]["summary"]
