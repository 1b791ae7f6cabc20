"""LangGraph's `debug`, `tasks` and `checkpoints` stream modes, and LangGraph's statuses on
LangGraph's routes (issue 35), through runstream's LangGraph routes with LangGraph's SDK.

The names and payload keys asserted are those `langgraph dev` (langgraph-api 0.16.7) sent for
the same graph (`bench.langgraph_diff` drives both servers and diffs them).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import APIStatusError
from langgraph_sdk.schema import StreamPart

from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.test_langgraph_api import client_for

GRAPHS = {"steps": "tests.custom_graphs:steps", "nested": "tests.custom_graphs:nested"}

# LangGraph's payloads' keys (langgraph dev, the `steps` graph); a `debug` part wraps one of
# the others: `{"step", "timestamp", "type", "payload"}`
CHECKPOINT_KEYS = {"config", "parent_config", "values", "metadata", "next", "tasks"}
DEBUG_CHECKPOINT_KEYS = CHECKPOINT_KEYS | {"checkpoint", "parent_checkpoint"}
TASK_KEYS = {"id", "name", "input", "triggers", "metadata"}
TASK_RESULT_KEYS = {"id", "name", "error", "result", "interrupts"}
DEBUG_KEYS = {"step", "timestamp", "type", "payload"}
# the order of the parts of a run of `steps` (a, b, c) in these three modes
OBSERVED_ORDER = [
    "checkpoints",
    "debug",  # the input checkpoint
    *(["checkpoints", "debug", "tasks", "debug", "tasks", "debug"] * 3),  # each node
    "checkpoints",
    "debug",  # the last checkpoint
]


@pytest.fixture
async def served(start_server: StartServer, start_worker: StartWorker) -> ServerHandle:
    server = await start_server(graphs=GRAPHS, cron_interval_s=0)
    await start_worker(graphs=GRAPHS)
    return server


@pytest.fixture
def sdk(served: ServerHandle) -> LangGraphClient:
    return client_for(served.url)


async def stream_steps(
    sdk: LangGraphClient, modes: list[str], graph: str = "steps", subgraphs: bool = False
) -> tuple[str, str, list[StreamPart]]:
    """(thread id, run id, the parts between `metadata` and `end`) of a streamed run."""
    thread_id = (await sdk.threads.create())["thread_id"]
    stream = sdk.runs.stream(
        thread_id,
        graph,
        input={"steps": []},
        stream_mode=modes,  # type: ignore[arg-type]
        stream_subgraphs=subgraphs,
        metadata={"team": "blue"},
    )
    parts = [part async for part in stream]
    assert parts[0].event == "metadata" and parts[-1].event == "end"
    return thread_id, parts[0].data["run_id"], parts[1:-1]


async def test_step_modes_stream_langgraphs_event_names_and_payloads(
    sdk: LangGraphClient,
) -> None:
    thread_id, run_id, parts = await stream_steps(sdk, ["debug", "tasks", "checkpoints"])
    assert [p.event for p in parts] == OBSERVED_ORDER
    checkpoints = [p.data for p in parts if p.event == "checkpoints"]
    assert all(c.keys() == CHECKPOINT_KEYS for c in checkpoints)
    assert [c["values"] for c in checkpoints] == [
        {},
        {"steps": []},
        {"steps": ["a"]},
        {"steps": ["a", "b"]},
        {"steps": ["a", "b", "c"]},
    ]
    assert [c["next"] for c in checkpoints] == [["__start__"], ["a"], ["b"], ["c"], []]
    first, second = checkpoints[0], checkpoints[1]
    assert first["parent_config"] is None and first["metadata"]["source"] == "input"
    configurable = second["config"]["configurable"]
    assert (configurable["thread_id"], configurable["run_id"]) == (thread_id, run_id)
    assert second["parent_config"] == {
        "configurable": {**first["config"]["configurable"]}
    }  # each checkpoint's parent is the one before it
    assert second["tasks"] == [
        {"id": second["tasks"][0]["id"], "name": "a", "interrupts": [], "state": None}
    ]
    starts = [p.data for p in parts if p.event == "tasks" and "input" in p.data]
    results = [p.data for p in parts if p.event == "tasks" and "input" not in p.data]
    assert all(t.keys() == TASK_KEYS for t in starts)
    assert all(t.keys() == TASK_RESULT_KEYS for t in results)
    assert [(t["name"], t["input"], t["triggers"]) for t in starts] == [
        ("a", {"steps": []}, ["branch:to:a"]),
        ("b", {"steps": ["a"]}, ["branch:to:b"]),
        ("c", {"steps": ["a", "b"]}, ["branch:to:c"]),
    ]
    meta = starts[0]["metadata"]
    assert (meta["team"], meta["graph_id"], meta["run_id"], meta["run_attempt"]) == (
        "blue",
        "steps",
        run_id,
        1,
    )
    assert [(t["name"], t["result"], t["error"]) for t in results] == [
        ("a", {"steps": ["a"]}, None),
        ("b", {"steps": ["a", "b"]}, None),
        ("c", {"steps": ["a", "b", "c"]}, None),
    ]
    debug = [p.data for p in parts if p.event == "debug"]
    assert all(d.keys() == DEBUG_KEYS for d in debug)
    assert [d["type"] for d in debug] == ["checkpoint"] + [
        "checkpoint",
        "task",
        "task_result",
    ] * 3 + ["checkpoint"]
    wrapped = [d["payload"] for d in debug if d["type"] == "checkpoint"]
    assert all(c.keys() == DEBUG_CHECKPOINT_KEYS for c in wrapped)
    assert wrapped[1]["checkpoint"] == {
        "checkpoint_id": configurable["checkpoint_id"],
        "thread_id": thread_id,
        "checkpoint_ns": "",
    }
    assert wrapped[0]["parent_checkpoint"] is None
    assert wrapped[1]["parent_checkpoint"] == wrapped[0]["checkpoint"]
    # the debug parts carry what the other modes do
    assert [{k: v for k, v in c.items() if k in CHECKPOINT_KEYS} for c in wrapped] == checkpoints
    assert [d["payload"] for d in debug if d["type"] == "task"] == starts
    # the last checkpoint is the thread's state
    state = await sdk.threads.get_state(thread_id)
    assert state["checkpoint"] == wrapped[-1]["checkpoint"]


async def test_each_step_mode_streams_only_its_own_parts(sdk: LangGraphClient) -> None:
    for mode in ("debug", "tasks", "checkpoints"):
        _, _, parts = await stream_steps(sdk, [mode])
        assert {p.event for p in parts} == {mode}
    _, _, parts = await stream_steps(sdk, ["values", "tasks"])
    assert [p.event for p in parts if p.event == "values"] == ["values"] * 4
    assert len([p for p in parts if p.event == "tasks"]) == 6


async def test_a_subgraphs_step_parts_are_named_mode_and_namespace(sdk: LangGraphClient) -> None:
    _, _, parts = await stream_steps(sdk, ["tasks", "checkpoints"], "nested", subgraphs=True)
    names = [p.event.split("|")[0] + ("|ns" if "|" in p.event else "") for p in parts]
    namespaces = {p.event.split("|", 1)[1] for p in parts if "|" in p.event}
    assert len(namespaces) == 1 and next(iter(namespaces)).startswith("child:")
    assert names == [
        "checkpoints",
        "checkpoints",
        "tasks",
        "tasks",
        "checkpoints",
        "tasks",
        "checkpoints|ns",
        "checkpoints|ns",
        "tasks|ns",
        "tasks|ns",
        "checkpoints|ns",
        "tasks|ns",
        "tasks|ns",
        "checkpoints|ns",
        "tasks",
        "checkpoints",
    ]
    inner = [p.data for p in parts if p.event.startswith("checkpoints|")]
    assert all(c.keys() == CHECKPOINT_KEYS for c in inner)
    assert inner[-1]["config"]["configurable"]["checkpoint_ns"].startswith("child:")


async def test_step_parts_are_replayed_on_reconnect_and_to_a_join(sdk: LangGraphClient) -> None:
    modes = ["debug", "tasks", "checkpoints"]
    thread_id = (await sdk.threads.create())["thread_id"]
    stream = sdk.runs.stream(thread_id, "steps", input={"steps": []}, stream_mode=modes)  # type: ignore[arg-type]
    whole = [part async for part in stream]
    run_id = whole[0].data["run_id"]
    # a join of the finished run sees all of them
    joined = [p async for p in sdk.runs.join_stream(thread_id, run_id, stream_mode=modes)]  # type: ignore[arg-type]
    assert [(p.event, p.data) for p in joined[1:]] == [(p.event, p.data) for p in whole[1:]]
    # a reconnect after the fifth part gets the rest, each once
    cut = whole[5]
    assert cut.id is not None
    rest = [
        p
        async for p in sdk.runs.join_stream(
            thread_id,
            run_id,
            stream_mode=modes,  # type: ignore[arg-type]
            last_event_id=cut.id,
        )
    ]
    assert [(p.event, p.data, p.id) for p in rest] == [(p.event, p.data, p.id) for p in whole[6:]]
    # a join asking for one of the run's modes gets that one's parts only
    only = [p async for p in sdk.runs.join_stream(thread_id, run_id, stream_mode="tasks")]
    assert [p.data for p in only[1:-1]] == [p.data for p in whole if p.event == "tasks"]


async def test_the_thread_stream_carries_a_runs_step_parts(served: ServerHandle) -> None:
    sdk = client_for(served.url)
    thread_id, _, parts = await stream_steps(sdk, ["checkpoints"])
    # `-1`: every run of the thread, this one over already among them
    async with (
        httpx.AsyncClient(base_url=served.url, timeout=30) as client,
        client.stream(
            "GET", f"/threads/{thread_id}/stream", headers={"Last-Event-ID": "-1"}
        ) as response,
    ):
        events: list[str] = []
        with anyio.fail_after(60):  # the thread stream goes on after the run: no hang
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    events.append(line.removeprefix("event: "))
                if events[-1:] == ["end"]:
                    break
    assert events.count("checkpoints") == len(parts) == 5


async def test_update_state_of_a_thread_never_run_is_400_as_on_langgraph(
    sdk: LangGraphClient,
) -> None:
    thread_id = (await sdk.threads.create())["thread_id"]
    with pytest.raises(APIStatusError) as refused:
        await sdk.threads.update_state(thread_id, {"steps": ["x"]})
    assert refused.value.status_code == 400
    body: Any = refused.value.body
    assert body["code"] == "thread_has_no_graph" and "no assigned graph" in body["detail"]
    assert (await sdk.threads.get_state(thread_id))["values"] == {}


BAD_THREAD = "Invalid thread ID: must be a UUID"
BAD_RUN = "Invalid run ID: must be a UUID"
UNCHECKED = "badly formed hexadecimal UUID string"  # Python's `UUID()`, unchecked by LangGraph
A_RUN = {"assistant_id": "steps", "input": {"steps": []}}


# each as `langgraph dev` (langgraph-api 0.16.7) answered it (`bench.langgraph_diff`)
@pytest.mark.parametrize(
    ("method", "path", "body", "status", "detail"),
    [
        ("GET", "/threads/not-a-uuid", None, 422, BAD_THREAD),
        ("PATCH", "/threads/not-a-uuid", {"metadata": {}}, 422, BAD_THREAD),
        ("DELETE", "/threads/not-a-uuid", None, 422, BAD_THREAD),
        ("GET", "/threads/not-a-uuid/state", None, 422, BAD_THREAD),
        ("POST", "/threads/not-a-uuid/state", {"values": {}}, 422, BAD_THREAD),
        ("GET", "/threads/not-a-uuid/state/abc", None, 422, BAD_THREAD),
        ("POST", "/threads/not-a-uuid/state/checkpoint", {"checkpoint": {}}, 422, BAD_THREAD),
        ("GET", "/threads/not-a-uuid/history", None, 422, BAD_THREAD),
        ("POST", "/threads/not-a-uuid/history", {}, 422, BAD_THREAD),
        ("GET", "/threads/not-a-uuid/stream", None, 422, BAD_THREAD),
        ("POST", "/threads/not-a-uuid/copy", None, 400, UNCHECKED),
        ("GET", "/threads/not-a-uuid/runs", None, 422, BAD_THREAD),
        ("POST", "/threads/not-a-uuid/runs", A_RUN, 422, "Invalid thread ID"),
        ("POST", "/threads/not-a-uuid/runs/stream", A_RUN, 400, UNCHECKED),
        ("POST", "/threads/not-a-uuid/runs/wait", A_RUN, 400, UNCHECKED),
        ("GET", "/threads/{thread}/runs/not-a-uuid", None, 422, BAD_RUN),
        ("GET", "/threads/{thread}/runs/not-a-uuid/join", None, 422, BAD_RUN),
        ("GET", "/threads/{thread}/runs/not-a-uuid/stream", None, 422, BAD_RUN),
        ("POST", "/threads/{thread}/runs/not-a-uuid/cancel", None, 422, BAD_RUN),
        ("DELETE", "/threads/{thread}/runs/not-a-uuid", None, 422, BAD_RUN),
        ("POST", "/threads", {"thread_id": "not-a-uuid"}, 422, BAD_THREAD),
    ],
)
async def test_a_malformed_id_in_a_langgraph_path_is_answered_as_langgraph_and_400_on_v1(
    served: ServerHandle,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    detail: str,
) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        thread_id = (await client.post("/threads", json={})).json()["thread_id"]
        answer = await client.request(method, path.format(thread=thread_id), json=body)
        assert (answer.status_code, answer.json()["detail"]) == (status, detail)
        assert answer.json()["code"] == "invalid_id"
        threads = (await client.post("/threads/search", json={})).json()
        assert [t["thread_id"] for t in threads] == [thread_id]  # nothing made
        v1 = await client.get("/v1/threads/not-a-uuid")
        assert v1.status_code == 400 and v1.json()["error"]["code"] == "invalid_id"
