"""`stream_mode="events"` as LangGraph's server streams it (issue 25): the run is streamed with
`astream_events(version="v2")` and each callback event is an `events` event, whole (observed
on `langgraph dev` with this graph: these names, in this order, and these fields)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.conftest import StartServer, StartWorker
from tests.test_langgraph_api import client_for

GRAPHS = {"chat_nested": "tests.custom_graphs:chat_nested"}

# `langgraph dev`'s events for `chat_nested` (its subgraph `child` runs `chat`, whose model
# streams "hello there friend" in five chunks): the graph's own `on_chain_stream` is not sent.
OBSERVED = [
    ("on_chain_start", "chat_nested"),
    ("on_chain_start", "first"),
    ("on_chain_stream", "first"),
    ("on_chain_end", "first"),
    ("on_chain_start", "child"),
    ("on_chain_start", "LangGraph"),
    ("on_chain_start", "chat"),
    ("on_chat_model_start", "GenericFakeChatModel"),
    *[("on_chat_model_stream", "GenericFakeChatModel")] * 5,
    ("on_chat_model_end", "GenericFakeChatModel"),
    ("on_chain_stream", "chat"),
    ("on_chain_end", "chat"),
    ("on_chain_end", "LangGraph"),
    ("on_chain_stream", "child"),
    ("on_chain_end", "child"),
    ("on_chain_end", "chat_nested"),
]


@pytest.fixture
async def sdk(start_server: StartServer, start_worker: StartWorker) -> LangGraphClient:
    server = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return client_for(server.url)


async def frames(
    sdk: LangGraphClient, modes: list[str], subgraphs: bool = False
) -> tuple[str, list[Any]]:
    thread_id = (await sdk.threads.create())["thread_id"]
    stream = sdk.runs.stream(
        thread_id,
        "chat_nested",
        input={"messages": [{"role": "user", "content": "hi"}]},
        stream_mode=modes,
        metadata={"team": "blue"},
        stream_subgraphs=subgraphs,
    )
    parts = [(part.event, part.data) async for part in stream]
    assert parts[0][0] == "metadata" and parts[-1][0] == "end"
    return parts[0][1]["run_id"], parts[1:-1]


async def test_events_mode_streams_astream_events_v2(sdk: LangGraphClient) -> None:
    run_id, parts = await frames(sdk, ["events"])
    assert {event for event, _ in parts} == {"events"}
    events = [data for _, data in parts]
    assert [(e["event"], e["name"]) for e in events] == OBSERVED
    keys = {"event", "data", "name", "tags", "run_id", "metadata", "parent_ids"}
    assert all(e.keys() == keys for e in events)
    first, last = events[0], events[-1]
    # the graph's own events have the run's id, as LangGraph's server gives them
    assert (first["run_id"], first["parent_ids"], first["tags"]) == (run_id, [], [])
    assert first["data"]["input"]["messages"][0]["content"] == "hi"
    assert last["run_id"] == run_id
    assert [m["content"] for m in last["data"]["output"]["messages"]] == [
        "hi",
        "hello there friend",
    ]
    chunks = [e for e in events if e["event"] == "on_chat_model_stream"]
    assert "".join(e["data"]["chunk"]["content"] for e in chunks) == "hello there friend"
    assert {e["data"]["chunk"]["type"] for e in chunks} == {"AIMessageChunk"}
    meta = chunks[0]["metadata"]
    assert meta["langgraph_node"] == "chat"
    assert meta["checkpoint_ns"].startswith("child:")
    assert (meta["run_id"], meta["graph_id"]) == (run_id, "chat_nested")
    assert (meta["run_attempt"], meta["team"]) == (1, "blue")  # the run's, as LangGraph's
    assert len(chunks[0]["parent_ids"]) == 4 and chunks[0]["parent_ids"][0] == run_id
    node = events[1]
    assert (node["tags"], node["metadata"]["langgraph_node"]) == (["graph:step:1"], "first")


async def test_events_with_other_modes_and_only_when_asked(sdk: LangGraphClient) -> None:
    _, parts = await frames(sdk, ["events", "values"])
    assert [event for event, _ in parts if event != "events"] == ["values"] * 2
    assert sum(event == "events" for event, _ in parts) == len(OBSERVED)
    _, without = await frames(sdk, ["values"])
    assert [event for event, _ in without] == ["values"] * 2


async def test_events_with_subgraphs_are_not_namespaced(sdk: LangGraphClient) -> None:
    """Observed on `langgraph dev`: with `stream_subgraphs`, the same 20 `events` (no
    `events|<ns>`) beside the root's `updates` and the subgraph's `updates|child:<id>`."""
    _, parts = await frames(sdk, ["events", "updates"], subgraphs=True)
    names = [event for event, _ in parts]
    assert names.count("events") == len(OBSERVED)
    others = [event for event in names if event != "events"]
    assert others[0] == "updates" and others[-1] == "updates" and len(others) == 3
    assert others[1].startswith("updates|child:")
