"""`stream_subgraphs` as LangGraph's server streams it (issues 21 and 25): a subgraph's
`values`, `updates` and `custom` parts come as events named `mode|node:task_id`, between its
parent's, for the modes the run asked for; without it, none of them (observed on `langgraph
dev`: the same names and order for this graph, `custom` from a subgraph only with
`stream_subgraphs`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.conftest import StartServer, StartWorker
from tests.test_langgraph_api import client_for

GRAPHS = {
    "nested": "tests.custom_graphs:nested",
    "chat_nested": "tests.custom_graphs:chat_nested",
    "ask_nested": "tests.custom_graphs:ask_nested",
    "deep": "tests.custom_graphs:deep",
}


@pytest.fixture
async def sdk(start_server: StartServer, start_worker: StartWorker) -> LangGraphClient:
    server = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return client_for(server.url)


async def parts_of(sdk: LangGraphClient, modes: list[str], subgraphs: bool) -> list[Any]:
    thread_id = (await sdk.threads.create())["thread_id"]
    stream = sdk.runs.stream(
        thread_id, "nested", input={"steps": []}, stream_mode=modes, stream_subgraphs=subgraphs
    )
    parts = [(part.event, part.data) async for part in stream if part.event != "metadata"]
    assert parts[-1][0] == "end" and parts[-1][1]["status"] == "success"
    return parts[:-1]


async def test_a_subgraphs_parts_are_named_by_mode_and_namespace(sdk: LangGraphClient) -> None:
    parts = await parts_of(sdk, ["values", "updates", "custom"], subgraphs=True)
    namespaces = {event.partition("|")[2] for event, _ in parts if "|" in event}
    assert len(namespaces) == 1
    ns = namespaces.pop()
    assert ns.startswith("child:")
    assert parts == [
        ("values", {"steps": []}),
        ("updates", {"first": {"steps": ["first"]}}),
        ("values", {"steps": ["first"]}),
        (f"values|{ns}", {"steps": ["first"]}),
        (f"custom|{ns}", {"inner": "a"}),
        (f"updates|{ns}", {"inner_a": {"steps": ["first", "inner_a"]}}),
        (f"values|{ns}", {"steps": ["first", "inner_a"]}),
        (f"updates|{ns}", {"inner_b": {"steps": ["first", "inner_a", "inner_b"]}}),
        (f"values|{ns}", {"steps": ["first", "inner_a", "inner_b"]}),
        ("updates", {"child": {"steps": ["first", "inner_a", "inner_b"]}}),
        ("values", {"steps": ["first", "inner_a", "inner_b"]}),
    ]


async def test_only_the_modes_asked_for_and_nothing_without_subgraphs(
    sdk: LangGraphClient,
) -> None:
    only_updates = await parts_of(sdk, ["updates"], subgraphs=True)
    assert {event.partition("|")[0] for event, _ in only_updates} == {"updates"}
    assert sum("|" in event for event, _ in only_updates) == 2
    flat = await parts_of(sdk, ["custom", "updates"], subgraphs=False)
    assert flat == [
        ("updates", {"first": {"steps": ["first"]}}),
        ("updates", {"child": {"steps": ["first", "inner_a", "inner_b"]}}),
    ]


async def chat_parts(sdk: LangGraphClient, modes: list[str], subgraphs: bool) -> list[Any]:
    """The frames of a `chat_nested` run, whose subgraph node streams "hello there friend"."""
    thread_id = (await sdk.threads.create())["thread_id"]
    stream = sdk.runs.stream(
        thread_id,
        "chat_nested",
        input={"messages": [{"role": "user", "content": "hi"}]},
        stream_mode=modes,
        stream_subgraphs=subgraphs,
    )
    parts = [(part.event, part.data) async for part in stream if part.event != "metadata"]
    assert parts[-1][0] == "end" and parts[-1][1]["status"] == "success"
    return parts[:-1]


async def test_a_subgraphs_tokens_are_messages_of_its_namespace(sdk: LangGraphClient) -> None:
    """Observed on `langgraph dev`: with `stream_subgraphs`, each token of a subgraph's model
    is `messages|child:<task id>`, `[AIMessageChunk, metadata]` with `checkpoint_ns` the
    namespace; nothing else of the message follows in that mode."""
    parts = await chat_parts(sdk, ["messages-tuple"], subgraphs=True)
    names = {event for event, _ in parts}
    assert len(names) == 1
    name = names.pop()
    ns = name.removeprefix("messages|")
    assert name.startswith("messages|child:") and ns.count("|") == 0
    chunks = [data[0] for _, data in parts]
    assert "".join(chunk["content"] for chunk in chunks) == "hello there friend"
    assert len(chunks) == 5
    assert {chunk["type"] for chunk in chunks} == {"AIMessageChunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    metadata = parts[0][1][1]
    assert metadata["checkpoint_ns"] == ns
    assert metadata["langgraph_node"] == "chat"
    assert metadata["graph_id"] == "chat_nested"


async def test_without_subgraphs_a_subgraphs_message_comes_whole(sdk: LangGraphClient) -> None:
    """Observed on `langgraph dev`: without `stream_subgraphs` the subgraph's model streams
    nothing; its message comes once, whole, as a `messages` event when its parent node ends."""
    parts = await chat_parts(sdk, ["messages-tuple"], subgraphs=False)
    assert [event for event, _ in parts] == ["messages"]
    assert parts[0][1][0]["content"] == "hello there friend"


async def test_plain_messages_mode_names_no_namespace(sdk: LangGraphClient) -> None:
    """Observed on `langgraph dev`: in plain `messages` mode a subgraph's tokens are the
    unnamed `messages/metadata` and `messages/partial` events, with or without subgraphs."""
    parts = await chat_parts(sdk, ["messages", "updates"], subgraphs=True)
    messages = [(event, data) for event, data in parts if event.startswith("messages")]
    assert messages[0][0] == "messages/metadata"
    partials = [data[0]["content"] for event, data in messages if event == "messages/partial"]
    assert partials == ["hello", "hello ", "hello there", "hello there ", "hello there friend"]
    assert next(event for event, _ in parts if "|" in event).startswith("updates|child:")


# `langgraph dev`'s answer for `deep`'s subgraphs: each a schema set as `/schemas` gives it,
# without `graph_id` (Python 3.11: a TypedDict state has no input or output schema there).
STEPS_SCHEMAS = {
    "input_schema": None,
    "output_schema": None,
    "state_schema": {
        "properties": {
            "steps": {
                "default": None,
                "items": {"type": "string"},
                "title": "Steps",
                "type": "array",
            }
        },
        "title": "LangGraphState",
        "type": "object",
    },
    "config_schema": {},
    "context_schema": None,
}


async def test_get_subgraphs_answers_schemas_by_namespace(sdk: LangGraphClient) -> None:
    """As observed on `langgraph dev`: the direct subgraphs by node name; with `recurse` the
    nested ones too, named `mid|inner`; a namespace gives only that subgraph (also with
    `recurse`), an unknown one `{}`."""
    subgraphs = sdk.assistants.get_subgraphs
    assert await subgraphs("deep") == {"mid": STEPS_SCHEMAS}
    assert await subgraphs("deep", recurse=True) == {
        "mid": STEPS_SCHEMAS,
        "mid|inner": STEPS_SCHEMAS,
    }
    assert await subgraphs("deep", namespace="mid") == {"mid": STEPS_SCHEMAS}
    assert await subgraphs("deep", namespace="mid", recurse=True) == {"mid": STEPS_SCHEMAS}
    assert await subgraphs("deep", namespace="nope") == {}
    assistant_id = (await sdk.assistants.get("ask_nested"))["assistant_id"]
    assert await subgraphs(assistant_id) == {"child": STEPS_SCHEMAS}
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.http.get("/assistants/deep/subgraphs", params={"recurse": "maybe"})
    assert refused.value.response.status_code == 422
    assert "recurse" in refused.value.response.json()["detail"]
    with pytest.raises(httpx.HTTPStatusError) as unknown:
        await subgraphs("no-such-graph")
    assert unknown.value.response.status_code == 404


async def test_a_subgraphs_interrupted_state_and_checkpoints(sdk: LangGraphClient) -> None:
    """As observed on `langgraph dev`, for a subgraph stopped at interrupt(): `get_state`
    shows its task's `checkpoint` (the thread and the subgraph's namespace, no id) and no
    `state`; with `subgraphs` the task's `state` is the subgraph's own snapshot (its
    checkpoints with `checkpoint_ns` and `checkpoint_map`) and `checkpoint` is null; that
    checkpoint, given to `get_state`, reads the subgraph; `get_history` with a
    `checkpoint_ns` lists the subgraph's checkpoints."""
    thread_id = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(thread_id, "ask_nested", input={"steps": []})
    question = {"question": "ok?"}

    flat = await sdk.threads.get_state(thread_id)
    (task,) = flat["tasks"]
    ns = f"child:{task['id']}"
    assert (task["name"], task["state"]) == ("child", None)
    assert task["checkpoint"] == {"thread_id": thread_id, "checkpoint_ns": ns}
    assert [i["value"] for i in task["interrupts"]] == [question]
    assert (flat["values"], flat["next"]) == ({"steps": ["first"]}, ["child"])

    deep = await sdk.threads.get_state(thread_id, subgraphs=True)
    (task,) = deep["tasks"]
    assert task["checkpoint"] is None
    sub = task["state"]
    assert (sub["values"], sub["next"]) == ({"steps": ["first"]}, ["ask"])
    assert [(t["name"], t["state"], t["checkpoint"]) for t in sub["tasks"]] == [("ask", None, None)]
    assert [i["value"] for i in sub["interrupts"]] == [question]
    root_id = deep["checkpoint"]["checkpoint_id"]
    sub_id = sub["checkpoint"]["checkpoint_id"]
    assert sub["checkpoint"] == {
        "checkpoint_id": sub_id,
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_map": {"": root_id, ns: sub_id},
    }
    assert sub["parent_checkpoint"]["checkpoint_ns"] == ns
    assert sub["parent_checkpoint"]["checkpoint_map"][""] == root_id
    assert deep["checkpoint"] == flat["checkpoint"] and "checkpoint_map" not in deep["checkpoint"]

    by_id = await sdk.threads.get_state(thread_id, checkpoint_id=root_id, subgraphs=True)
    assert by_id["tasks"][0]["state"]["checkpoint"] == sub["checkpoint"]
    at_sub = await sdk.threads.get_state(thread_id, checkpoint=sub["checkpoint"])
    assert at_sub["checkpoint"] == sub["checkpoint"]
    assert (at_sub["values"], at_sub["next"]) == (sub["values"], sub["next"])
    assert at_sub["tasks"] == sub["tasks"]
    latest_in_ns = await sdk.threads.get_state(thread_id, checkpoint={"checkpoint_ns": ns})
    assert latest_in_ns["checkpoint"] == sub["checkpoint"]

    history = await sdk.threads.get_history(thread_id, checkpoint={"checkpoint_ns": ns})
    assert [h["next"] for h in history] == [["ask"], ["__start__"]]
    assert {h["checkpoint"]["checkpoint_ns"] for h in history} == {ns}
    assert history[0]["checkpoint"] == sub["checkpoint"]
    root_history = await sdk.threads.get_history(thread_id)
    assert root_history[0]["tasks"][0]["checkpoint"] == {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
    }
    assert {h["checkpoint"]["checkpoint_ns"] for h in root_history} == {""}

    # a namespace the thread has no state in: an empty state and no history, as LangGraph's
    nowhere = {"checkpoint_ns": "child:00000000-0000-0000-0000-000000000000"}
    empty = await sdk.threads.get_state(thread_id, checkpoint=nowhere)
    assert (empty["values"], empty["checkpoint"]) == ({}, None)
    assert await sdk.threads.get_history(thread_id, checkpoint=nowhere) == []
    for bad in ({"checkpoint_ns": 5}, {"checkpoint_ns": ns, "checkpoint_map": {"": "x"}}):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await sdk.threads.get_state(thread_id, checkpoint=bad)  # type: ignore[arg-type]
        assert refused.value.response.status_code == 422

    # resumed, the subgraph finishes and no task is left
    await sdk.runs.wait(thread_id, "ask_nested", command={"resume": "yes"})
    done = await sdk.threads.get_state(thread_id, subgraphs=True)
    assert (done["values"], done["tasks"]) == ({"steps": ["first", "ask:yes", "after"]}, [])
