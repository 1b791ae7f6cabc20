"""Requests to the LangGraph routes that used to be 500s, or were accepted and then failed in
the run, are each a 422 that changes nothing (issue 20; docs/security.md, "Hostile input").

Each refusal is checked as LangGraph's shape (`detail`, with runstream's `code`) and against
the test's whole state before and after: the rows of runs and threads, the Redis keys, and
the checkpoints. Then the thread's next run still works.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from stream_store.settings import Settings
from tests.conftest import ServerHandle
from tests.test_bad_input import State, state_of
from tests.test_langgraph_api import client_for, human, messages_of
from tests.test_owner_matrix import checkpoint_rows

WORKER_KEYS = re.compile(rb":(worker:[^:]+:beat|workers|queue:health-check|reaper:[^:]+)$")


@dataclass
class Api:
    """A server and worker, with one LangGraph thread that has run once."""

    client: httpx.AsyncClient
    sdk: LangGraphClient
    settings: Settings
    thread_id: str

    async def snapshot(self) -> tuple[State, tuple[int, int]]:
        """The test's state, but for the keys a live worker rewrites on its own (its beat,
        health check and reaper's turn)."""
        state = await state_of(self.settings)
        redis = {k: v for k, v in state.redis.items() if not WORKER_KEYS.search(k)}
        return replace(state, redis=redis), await checkpoint_rows(self.settings)

    async def settled(self) -> tuple[State, tuple[int, int]]:
        """The state once the worker is done with the runs before (it records a run's end
        after the answer `runs.wait` reads)."""
        previous = await self.snapshot()
        for _ in range(100):
            await asyncio.sleep(0.1)
            current = await self.snapshot()
            if current == previous:
                return current
            previous = current
        raise AssertionError("the state did not settle")

    async def refused(self, method: str, url: str, **kwargs: Any) -> str:
        """Send one request: a 422 in LangGraph's shape that changes nothing. Its `detail`."""
        before = await self.settled()
        response = await self.client.request(method, url, **kwargs)
        assert response.status_code == 422, (response.status_code, response.text)
        body = response.json()
        assert body["code"] == "invalid_request" and body["detail"], body
        assert await self.snapshot() == before
        return str(body["detail"])

    async def still_runs(self) -> None:
        """The thread takes its next run as before the refusal."""
        out = await self.sdk.runs.wait(self.thread_id, "chat", input=human("after"))
        assert messages_of(out)[-2:] == [("human", "after"), ("ai", "after")]


@pytest.fixture
async def api(settings: Settings, server: ServerHandle, worker: Any) -> AsyncIterator[Api]:
    sdk = client_for(server.url)
    thread_id = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(thread_id, "chat", input=human("first"))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        yield Api(client, sdk, settings, thread_id)


# One server, worker and thread per test, so each test tries its cases in a loop.
BAD_XRAYS = ["²", "٣", "9" * 5000, "1000", "-1", "1.5", "yes"]
BAD_BEFORES: list[Any] = [
    {"checkpoint_id": 123},
    {"checkpoint_id": ["x"]},
    {"checkpoint_id": "x"},
    "not-a-checkpoint",
]


async def test_an_xray_that_is_not_true_false_or_a_small_number_is_422(api: Api) -> None:
    """`²` passed `str.isdigit` and failed `int`; 5,000 digits passed both checks and `int`
    refused them: both were 500s."""
    for xray in BAD_XRAYS:
        detail = await api.refused("GET", "/assistants/chat/graph", params={"xray": xray})
        assert "xray" in detail, xray
    for xray in ["true", "False", "0", "2", "999"]:
        response = await api.client.get("/assistants/chat/graph", params={"xray": xray})
        assert response.status_code == 200, response.text
        assert {node["id"] for node in response.json()["nodes"]} >= {"respond"}


async def test_nul_anywhere_in_any_query_string_is_422(api: Api) -> None:
    """`?before=%00` reached the checkpointer's query (a 500); now no route sees NUL."""
    history = f"/threads/{api.thread_id}/history"
    assert "NUL" in await api.refused("GET", f"{history}?before=%00")
    for query in ["limit=1%00", "x=%00", "before=a%00b&limit=2"]:
        for path in (history, "/assistants/chat/graph", "/info"):
            assert "NUL" in await api.refused("GET", f"{path}?{query}")


async def test_a_history_before_that_is_not_a_checkpoint_id_is_422(api: Api) -> None:
    """`{"before": {"checkpoint_id": 123}}` reached the checkpointer's query (a 500)."""
    url = f"/threads/{api.thread_id}/history"
    for before in BAD_BEFORES:
        detail = await api.refused("POST", url, json={"before": before})
        assert "checkpoint" in detail.lower(), before
    assert "checkpoint" in (await api.refused("GET", url, params={"before": "abc"})).lower()
    # a real checkpoint still pages the history, and the thread runs on
    history = await api.sdk.threads.get_history(api.thread_id, limit=100)
    older = await api.sdk.threads.get_history(
        api.thread_id, limit=100, before=history[0]["checkpoint"]
    )
    assert older == history[1:]
    response = await api.client.get(url, params={"before": history[0]["checkpoint_id"]})
    assert response.json() == history[1:11]
    await api.still_runs()


BAD_SENDS: list[Any] = [
    {"node": "respond", "input": 5},
    {"node": "respond"},
    {"node": "respond", "input": {}},
    {"node": "respond", "input": {"todos": []}},
    {"node": "respond", "input": {"messages": 5}},
    {"node": "respond", "input": {"messages": [{"type": "robot", "content": "x"}]}},
    [{"node": "respond", "input": {"messages": ["ok"]}}, {"node": "respond", "input": "no"}],
]


async def test_a_send_whose_input_the_node_cannot_take_is_422(api: Api) -> None:
    """LangGraph hands a Send's input to the node as it is: these were accepted and failed
    inside the run, leaving a pending Send on the thread."""
    url = f"/threads/{api.thread_id}/runs"
    for goto in BAD_SENDS:
        body = {"assistant_id": "chat", "command": {"goto": goto}}
        assert "command.goto[" in await api.refused("POST", url, json=body), goto
    await api.still_runs()
    sent = {"node": "respond", "input": {"messages": ["sent"]}}  # a string is a human message
    out = await api.sdk.runs.wait(api.thread_id, "chat", command={"goto": sent})
    assert messages_of(out)[-1] == ("ai", "sent")


async def test_a_null_resume_is_422_on_a_thread_interrupted_or_not(api: Api) -> None:
    """LangGraph takes `resume: null` as no resume, and then an empty command: the run failed
    (`UnboundLocalError` inside LangGraph) on an idle thread and an interrupted one alike."""
    url = f"/threads/{api.thread_id}/runs"
    body = {"assistant_id": "chat", "command": {"resume": None}}
    assert "command.resume" in await api.refused("POST", url, json=body)
    await api.still_runs()
    asked = (await api.sdk.threads.create())["thread_id"]
    await api.sdk.runs.wait(asked, "approval", input=human("buy milk"))
    assert (await api.sdk.threads.get(asked))["status"] == "interrupted"
    body = {"assistant_id": "approval", "command": {"resume": None}}
    assert "command.resume" in await api.refused("POST", f"/threads/{asked}/runs", json=body)
    out = await api.sdk.runs.wait(asked, "approval", command={"resume": {"approve": True}})
    assert messages_of(out)[2] == ("tool", "saved note (8 characters)")  # "buy milk"
