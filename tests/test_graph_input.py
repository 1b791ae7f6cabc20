"""A LangGraph run's input as the graph's input schema takes it (server/langgraph/run_input.py):
any of its keys, messages of every kind under its message keys; and a graph's JSON schemas.
The project of tests/projects/inputs (a state without messages) is served by a real server
and worker through the SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.pregel import Pregel

from runner.graph_registry import GraphRegistry
from runner.graphs import chat
from server.errors import ApiError
from server.langgraph.run_input import checked_input, input_keys
from stream_store.settings import Settings
from tests.processes import ROOT, Cluster
from tests.test_langgraph_api import client_for, human

INPUTS = ROOT / "tests" / "projects" / "inputs"
CALL = {"name": "save_note", "args": {"content": "x"}, "id": "call-1", "type": "tool_call"}


async def counter_graph() -> Pregel:
    registry = GraphRegistry({"counter": str(INPUTS / "counter.py") + ":graph"})
    return await registry.graph_for_reading("counter", InMemorySaver())


def refused(value: Any, graph: Pregel, settings: Settings, needs_input: bool = True) -> ApiError:
    with pytest.raises(ApiError) as caught:
        checked_input(value, graph, settings, needs_input=needs_input)
    return caught.value


class TestCheckedInput:
    def test_message_keys_are_found_by_reducer(self) -> None:
        assert input_keys(chat.compile()) == {"messages": True}

    async def test_a_state_without_messages_takes_its_own_keys(self, settings: Settings) -> None:
        graph = await counter_graph()
        assert input_keys(graph) == {"topic": False, "count": False}
        assert checked_input({"topic": "cats"}, graph, settings, needs_input=True) == {
            "topic": "cats"
        }
        error = refused({"topic": "cats", "colour": "red"}, graph, settings)
        assert error.status == 422 and "no key 'colour'; it takes topic, count" in error.message
        assert "input needs" in refused({}, graph, settings).message
        assert refused(["cats"], graph, settings).status == 422
        assert checked_input(None, graph, settings, needs_input=False) == {}

    def test_tool_and_ai_tool_call_messages_get_ids(self, settings: Settings) -> None:
        messages = [
            {"type": "ai", "content": "", "tool_calls": [CALL]},
            {"type": "tool", "content": "cancelled", "tool_call_id": "call-1"},
        ]
        checked = checked_input({"messages": messages}, chat.compile(), settings, needs_input=True)
        assert [m["role"] for m in checked["messages"]] == ["assistant", "tool"]
        assert checked["messages"][0]["tool_calls"] == [CALL]
        assert all(m["id"] for m in checked["messages"])

    def test_message_bounds_and_rules_still_apply(self, settings: Settings) -> None:
        graph = chat.compile()
        long = "x" * (settings.max_message_chars + 1)
        assert refused(human(long), graph, settings).status == 413
        many = {"messages": ["hi"] * (settings.max_run_messages + 1)}
        assert refused(many, graph, settings).status == 413
        assert refused({"messages": []}, graph, settings).status == 422
        assert (
            refused({"messages": [{"type": "human", "content": ""}]}, graph, settings).status == 422
        )
        image = [{"type": "image_url", "image_url": "u"}]
        assert (
            refused({"messages": [{"type": "human", "content": image}]}, graph, settings).status
            == 422
        )


async def test_project_and_chat_inputs_through_the_sdk(cluster: Cluster) -> None:
    env = {"RUNSTREAM_CONFIG": str(INPUTS / "langgraph.json")}
    (_, url), _ = await asyncio.gather(cluster.server(**env), cluster.ready_worker(**env))
    sdk = client_for(url)

    # A state without messages: its values, updates and custom events stream.
    thread = await sdk.threads.create()
    tid = thread["thread_id"]
    assert await sdk.runs.wait(tid, "counter", input={"topic": "cats"}) == {
        "topic": "cats",
        "count": 1,
    }
    parts = [
        part
        async for part in sdk.runs.stream(
            tid, "counter", input={"topic": "dogs"}, stream_mode=["values", "updates", "custom"]
        )
    ]
    kinds = {part.event for part in parts}
    assert {"values", "updates", "custom"} <= kinds, parts
    assert [p.data for p in parts if p.event == "custom"] == [{"counted": "dogs"}]
    assert (await sdk.threads.get_state(tid))["values"] == {"topic": "dogs", "count": 2}

    # A key the graph's input does not take: 422 naming it, nothing recorded.
    runs_before = await sdk.runs.list(tid)
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await sdk.runs.create(tid, "counter", input={"topic": "x", "colour": "red"})
    assert caught.value.response.status_code == 422
    assert "'colour'" in caught.value.response.text
    assert len(await sdk.runs.list(tid)) == len(runs_before)

    # agent-chat-ui's case: a tool message answering the thread's dangling tool call.
    chat_thread = await sdk.threads.create()
    ctid = chat_thread["thread_id"]
    await sdk.runs.wait(ctid, "chat", input=human("save x"))
    dangling = {"type": "ai", "content": "", "tool_calls": [CALL]}
    await sdk.threads.update_state(ctid, {"messages": [dangling]}, as_node="respond")
    answer = {"type": "tool", "content": "cancelled", "tool_call_id": "call-1"}
    out = await sdk.runs.wait(ctid, "chat", input={"messages": [answer]})
    assert isinstance(out, dict), out
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "ai", "tool", "ai"]
    assert out["messages"][3]["tool_call_id"] == "call-1"
    assert out["messages"][-1]["content"] == "save x"  # the fake model echoes the human

    # The graphs' schemas, as LangGraph's server computes them.
    schemas = await sdk.assistants.get_schemas("counter")
    assert schemas["graph_id"] == "counter"
    assert schemas["input_schema"]["properties"].keys() == {"topic", "count"}
    assert schemas["output_schema"]["properties"].keys() == {"topic", "count"}
    assert schemas["state_schema"]["properties"].keys() == {"topic", "count"}
    assert schemas["config_schema"] == {}
    assert "context_schema" in schemas
    chat_schemas = await sdk.assistants.get_schemas("chat")
    assert chat_schemas["graph_id"] == "chat"
    assert "messages" in chat_schemas["input_schema"]["properties"]
    assert "messages" in chat_schemas["state_schema"]["properties"]
