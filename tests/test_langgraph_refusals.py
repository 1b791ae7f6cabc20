"""Requests to the LangGraph routes that used to be 500s, or were accepted and then failed in
the run, are each a 422 that changes nothing (issue 20; docs/security.md, "Hostile input").

Each refusal is checked as LangGraph's shape (`detail`, with runstream's `code`) and against
the test's whole state before and after: the rows of runs and threads, the Redis keys, and
the checkpoints. Then the thread's next run still works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from stream_store.settings import Settings
from tests.conftest import ServerHandle
from tests.test_bad_input import State, state_of
from tests.test_langgraph_api import client_for, human, messages_of
from tests.test_owner_matrix import checkpoint_rows


@dataclass
class Api:
    """A server and worker, with one LangGraph thread that has run once."""

    client: httpx.AsyncClient
    sdk: LangGraphClient
    settings: Settings
    thread_id: str

    async def snapshot(self) -> tuple[State, tuple[int, int]]:
        return await state_of(self.settings), await checkpoint_rows(self.settings)

    async def refused(self, method: str, url: str, **kwargs: Any) -> str:
        """Send one request: a 422 in LangGraph's shape that changes nothing. Its `detail`."""
        before = await self.snapshot()
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
