"""LangGraph's `RemoteGraph` (how one agent calls a deployed graph) against runstream: invoke,
stream, state, history, and a `Command` resume of an interrupt (issue 25). `aget_state` sends a
checkpoint object with no `checkpoint_id`, which LangGraph's server answers with the latest
state (observed on `langgraph dev`); so does runstream."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command

from tests.conftest import StartServer, StartWorker
from tests.test_langgraph_api import client_for, human

GRAPHS = {"steps": "tests.custom_graphs:steps"}


@pytest.fixture
async def url(start_server: StartServer, start_worker: StartWorker) -> str:
    server = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return server.url


async def a_thread(url: str) -> dict[str, Any]:
    thread = await client_for(url).threads.create()
    return {"configurable": {"thread_id": thread["thread_id"]}}


async def test_invoke_stream_state_and_history(url: str) -> None:
    remote = RemoteGraph("steps", url=url, headers={})
    config = await a_thread(url)
    assert await remote.ainvoke({"steps": []}, config) == {"steps": ["a", "b", "c"]}
    state = await remote.aget_state(config)
    assert state.values == {"steps": ["a", "b", "c"]} and state.next == ()
    assert state.config["configurable"]["checkpoint_id"]
    history = [snapshot async for snapshot in remote.aget_state_history(config)]
    assert history[0].values == state.values and len(history) == 5  # input, a, b, c and start
    updates = [
        chunk async for chunk in remote.astream({"steps": []}, config, stream_mode="updates")
    ]
    assert updates == [
        {"a": {"steps": ["a"]}},
        {"b": {"steps": ["a", "b"]}},
        {"c": {"steps": ["a", "b", "c"]}},
    ]


async def test_an_interrupt_is_resumed_with_a_command(url: str) -> None:
    remote = RemoteGraph("approval", url=url, headers={})
    config = await a_thread(url)
    await remote.ainvoke(human("note this"), config)
    waiting = await remote.aget_state(config)
    assert waiting.next and waiting.interrupts
    approve = {"decisions": [{"type": "approve"}]}
    done = await remote.ainvoke(Command(resume=approve), config)
    assert [m["type"] for m in done["messages"]] == ["human", "ai", "tool", "ai"]
    assert done["messages"][-1]["content"] == "note this"  # the fake model's echo, after the tool
    after = await remote.aget_state(config)
    assert after.next == () and not after.interrupts


async def test_a_checkpoint_without_an_id_is_the_latest_and_a_bad_id_is_422(url: str) -> None:
    config = await a_thread(url)
    thread_id = config["configurable"]["thread_id"]
    sdk = client_for(url)
    await sdk.runs.wait(thread_id, "steps", input={"steps": []})
    latest = await sdk.threads.get_state(thread_id)
    response = await sdk.http.client.post(
        f"/threads/{thread_id}/state/checkpoint", json={"checkpoint": {"thread_id": thread_id}}
    )
    assert response.status_code == 200 and response.json()["values"] == latest["values"]
    assert response.json()["checkpoint"]["checkpoint_id"] == latest["checkpoint"]["checkpoint_id"]
    refused = await sdk.http.client.post(
        f"/threads/{thread_id}/state/checkpoint", json={"checkpoint": {"checkpoint_id": 5}}
    )
    assert refused.status_code == 422 and "checkpoint_id must be a string" in refused.text
