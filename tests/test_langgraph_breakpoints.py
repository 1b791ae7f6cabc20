"""Breakpoints as LangGraph's server takes them (issue 25): a run with `interrupt_before` or
`interrupt_after` stops there and succeeds, its thread is `interrupted` with the node as `next`,
and a run with no input goes on from there. Observed on `langgraph dev` (langgraph-api 0.x):
the same statuses, `next` and values; `"*"` stops before the first node; a node the graph lacks
is ignored; any other string is a 422."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.conftest import StartServer, StartWorker
from tests.test_langgraph_api import client_for

GRAPHS = {"steps": "tests.custom_graphs:steps"}


@pytest.fixture
async def sdk(start_server: StartServer, start_worker: StartWorker) -> LangGraphClient:
    server = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return client_for(server.url)


async def test_a_run_stops_before_the_node_and_a_run_without_input_goes_on(
    sdk: LangGraphClient,
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    parts: list[tuple[str, Any]] = []
    async for part in sdk.runs.stream(
        thread_id, "steps", input={"steps": []}, interrupt_before=["b"], stream_mode="updates"
    ):
        parts.append((part.event, part.data))
    updates = [data for event, data in parts if event == "updates"]
    assert updates == [{"a": {"steps": ["a"]}}, {"__interrupt__": []}]
    assert [run["status"] for run in await sdk.runs.list(thread_id)] == ["success"]
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"
    state = await sdk.threads.get_state(thread_id)
    assert state["next"] == ["b"] and state["values"] == {"steps": ["a"]}

    assert await sdk.runs.wait(thread_id, "steps", input=None, interrupt_after=["b"]) == {
        "steps": ["a", "b"]
    }
    assert (await sdk.threads.get_state(thread_id))["next"] == ["c"]
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"

    assert await sdk.runs.wait(thread_id, "steps", input=None) == {"steps": ["a", "b", "c"]}
    assert (await sdk.threads.get(thread_id))["status"] == "idle"
    runs = await sdk.runs.list(thread_id)
    assert [run["status"] for run in runs] == ["success"] * 3
    assert runs[-1]["kwargs"]["interrupt_before"] == ["b"]
    assert "breakpoint" not in runs[-1]["kwargs"]  # runstream's note stays its own


async def test_star_stops_before_the_first_node_and_unknown_nodes_are_ignored(
    sdk: LangGraphClient,
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    assert await sdk.runs.wait(thread_id, "steps", input={"steps": []}, interrupt_before="*") == {
        "steps": []
    }
    assert (await sdk.threads.get_state(thread_id))["next"] == ["a"]
    other = (await sdk.threads.create())["thread_id"]
    done = await sdk.runs.wait(other, "steps", input={"steps": []}, interrupt_before=["nope"])
    assert done == {"steps": ["a", "b", "c"]}
    stateless = await sdk.runs.wait(None, "steps", input={"steps": []}, interrupt_after=["b"])
    assert stateless == {"steps": ["a", "b"]}


@pytest.mark.parametrize("value", ["b", 5, ["b", 3]])
async def test_breakpoints_other_than_star_or_node_names_are_422(
    sdk: LangGraphClient, value: Any
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    response = await sdk.http.client.post(
        f"/threads/{thread_id}/runs",
        json={"assistant_id": "steps", "input": {"steps": []}, "interrupt_before": value},
    )
    assert response.status_code == 422, response.text
    assert "interrupt_before" in response.text
    assert await sdk.runs.list(thread_id) == []
