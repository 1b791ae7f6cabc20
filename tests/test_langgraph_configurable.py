"""What a graph run through LangGraph's routes finds in `config.configurable` beside the
caller's keys, as LangGraph's server puts it there (issue 35; observed on `langgraph dev`,
langgraph-api 0.16.7): the request's id, its start and `__after_seconds__`, and `user_id`.
They are recorded with the run, so a second attempt sees what the first saw."""

from __future__ import annotations

import time
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from structlog.testing import capture_logs

from project.configurable import select
from tests.conftest import ServerHandle, StartServer, StartWorker, stop_worker
from tests.test_langgraph_api import client_for

GRAPHS = {"shows_its_configurable": "tests.custom_graphs:shows_its_configurable"}
GRAPH = "shows_its_configurable"
API_KEYS = {"key-a": "alice"}
REQUEST_KEYS = ("langgraph_request_id", "__request_start_time_ms__", "__after_seconds__")


@pytest.fixture
async def served(start_server: StartServer) -> ServerHandle:
    return await start_server(graphs=GRAPHS, api_keys=API_KEYS, cron_interval_s=0)


def _sdk(served: ServerHandle, request_id: str | None = None) -> LangGraphClient:
    sdk = client_for(served.url, api_key="key-a")
    if request_id is not None:
        sdk.http.client.headers["X-Request-ID"] = request_id
    return sdk


async def test_a_graph_sees_the_request_and_the_signed_in_user_as_on_langgraph(
    served: ServerHandle, start_worker: StartWorker
) -> None:
    await start_worker(graphs=GRAPHS)
    sdk = _sdk(served, request_id="req-42")
    thread_id = (await sdk.threads.create())["thread_id"]
    before_ms = int(time.time() * 1000)
    out = await sdk.runs.wait(
        thread_id, GRAPH, input={"seen": {}}, config={"configurable": {"mine": 1}}
    )
    after_ms = int(time.time() * 1000)
    seen = out["seen"]
    assert seen["mine"] == 1
    assert seen["langgraph_request_id"] == "req-42"  # the request's X-Request-ID
    assert before_ms <= seen["__request_start_time_ms__"] <= after_ms
    assert seen["__after_seconds__"] == 0  # runstream delays no run (docs/langgraph.md)
    assert seen["user_id"] == seen["langgraph_auth_user_id"] == "alice"
    # `user_id` is the caller's when it gives one, as LangGraph's; the request's keys never are
    given = {"user_id": "someone", "mine": 2}
    out = await sdk.runs.wait(thread_id, GRAPH, input={"seen": {}}, config={"configurable": given})
    assert out["seen"]["user_id"] == "someone"
    assert out["seen"]["langgraph_auth_user_id"] == "alice"
    for key in REQUEST_KEYS:
        refused = await sdk.http.client.post(
            f"/threads/{thread_id}/runs",
            json={
                "assistant_id": GRAPH,
                "input": {"seen": {}},
                "config": {"configurable": {key: 1}},
            },
        )
        assert refused.status_code == 422 and "reserved" in refused.json()["detail"]


async def test_each_request_gets_its_own_id(
    served: ServerHandle, start_worker: StartWorker
) -> None:
    await start_worker(graphs=GRAPHS)
    sdk = _sdk(served)
    seen = [
        (await sdk.runs.wait(None, GRAPH, input={"seen": {}}))["seen"]["langgraph_request_id"]
        for _ in range(2)
    ]
    assert seen[0] != seen[1] and all(seen)


async def test_a_second_attempt_sees_the_request_keys_the_first_saw(
    served: ServerHandle, start_worker: StartWorker
) -> None:
    first_worker = await start_worker(graphs=GRAPHS)
    sdk = _sdk(served, request_id="req-retried")
    run = await sdk.runs.create(
        None, GRAPH, input={"seen": {}, "linger_first": True}, stream_mode="custom"
    )
    parts: list[dict[str, Any]] = []
    async for part in sdk.runs.join_stream(run["thread_id"], run["run_id"], stream_mode="custom"):
        if part.event != "custom":
            continue
        parts.append(part.data)
        if len(parts) == 1:  # the first attempt lingers now: its worker goes, another takes it
            await stop_worker(first_worker)
            await start_worker(graphs=GRAPHS)
    assert [p["attempt"] for p in parts] == [1, 2]
    first, second = (p["seen"] for p in parts)
    assert first["langgraph_request_id"] == "req-retried"
    for key in (*REQUEST_KEYS, "user_id"):
        assert second[key] == first[key], key


def test_the_request_keys_are_handed_on_without_a_warning_that_they_were_dropped() -> None:
    """A LangGraph run records the request's keys; the graph gets them from the server's own
    configurable (runner/execute.py), so only a caller's reserved or undeclared key is named
    as dropped."""
    recorded = {"langgraph_request_id": "r", "__after_seconds__": 0, "mine": 1, "thread_id": "t"}
    with capture_logs() as logs:
        taken = select(recorded, None)
    assert taken == {"mine": 1}
    assert [entry["keys"] for entry in logs if "dropped" in entry["event"]] == [["thread_id"]]
