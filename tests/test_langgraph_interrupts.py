"""A run stopped at `interrupt()`, its interrupt items as LangGraph's server shows them on each
of its routes (issue 35; observed on `langgraph dev`, langgraph-api 0.16.7):

- streamed (`updates`, `values`) and in `wait`'s answer, the `Interrupt` whole:
  `{"value", "id", "response_schema"}`, `response_schema` null when the graph gave none;
- read from the thread (`get_state`, `threads.get`, history) and in the join of a run already
  over: `{"id", "value"}`, with `response_schema` only when the graph gave one; that join
  answers the thread's interrupts alone, without its values.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.custom_graphs import ANSWER_SCHEMA
from tests.test_langgraph_api import client_for

GRAPHS = {
    "asks_with_schema": "tests.custom_graphs:asks_with_schema",
    "asks_steps": "tests.custom_graphs:asks_steps",
}
QUESTION = {"question": "ok?"}


@pytest.fixture
async def sdk(start_server: StartServer, start_worker: StartWorker) -> LangGraphClient:
    server: ServerHandle = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return client_for(server.url)


def _streamed(interrupt_id: str, schema: dict[str, Any] | None) -> dict[str, Any]:
    return {"value": QUESTION, "id": interrupt_id, "response_schema": schema}


@pytest.mark.parametrize(
    ("graph", "schema"), [("asks_steps", None), ("asks_with_schema", ANSWER_SCHEMA)]
)
async def test_interrupt_items_carry_response_schema_as_langgraph_shows_them(
    sdk: LangGraphClient, graph: str, schema: dict[str, Any] | None
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id, graph, input={"steps": []}, stream_mode=["updates", "values"]
        )
    ]
    state = await sdk.threads.get_state(thread_id)
    [read] = state["interrupts"]
    interrupt_id = read["id"]
    streamed = [_streamed(interrupt_id, schema)]
    assert {"event": "updates", "data": {"__interrupt__": streamed}} in [
        {"event": p.event, "data": p.data} for p in parts
    ]
    assert [p.data for p in parts if p.event == "values"][-1] == {
        "steps": [],
        "__interrupt__": streamed,
    }
    # read from the thread: `{"id", "value"}`, the schema only when there is one
    shown = {"id": interrupt_id, "value": QUESTION} | (
        {"response_schema": schema} if schema else {}
    )
    assert read == shown
    assert state["tasks"][0]["interrupts"] == [shown]
    thread = await sdk.threads.get(thread_id)
    assert thread["interrupts"] == {state["tasks"][0]["id"]: [shown]}
    # the join of the run, over already: the thread's interrupts alone
    [run] = await sdk.runs.list(thread_id)
    assert await sdk.runs.join(thread_id, run["run_id"]) == {"__interrupt__": [shown]}


@pytest.mark.parametrize(
    ("graph", "schema"), [("asks_steps", None), ("asks_with_schema", ANSWER_SCHEMA)]
)
async def test_wait_answers_the_interrupt_as_streamed(
    sdk: LangGraphClient, graph: str, schema: dict[str, Any] | None
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    answer = await sdk.runs.wait(thread_id, graph, input={"steps": []})
    [read] = (await sdk.threads.get_state(thread_id))["interrupts"]
    assert answer == {"steps": [], "__interrupt__": [_streamed(read["id"], schema)]}
