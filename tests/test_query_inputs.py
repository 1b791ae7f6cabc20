"""Every route reads a boolean query flag and `Last-Event-ID` the same way (server/inputs.py):
a flag is `true`/`1` or `false`/`0` in any case, anything else refused with the flag named;
`Last-Event-ID` is the header when there is one, else the `last_event_id` query parameter."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from server import inputs
from server.errors import ApiError
from tests.conftest import ServerHandle
from tests.sse import read_events
from tests.test_langgraph_api import client_for, human
from tests.test_runs import submit

ACCEPTED = [("true", True), ("1", True), ("TRUE", True), ("False", False), ("0", False)]
REFUSED = ["yes", "2", "", "on", " true"]


@pytest.mark.parametrize(("value", "meaning"), ACCEPTED)
def test_a_flag_is_true_or_1_false_or_0_in_any_case(value: str, meaning: bool) -> None:
    assert inputs.flag(value, "wait") is meaning


def test_an_absent_flag_is_false() -> None:
    assert inputs.flag(None, "wait") is False


@pytest.mark.parametrize("value", REFUSED)
def test_any_other_flag_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ApiError) as refused:
        inputs.flag(value, "wait")
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")
    assert refused.value.message == f"wait must be true or false (or 1 or 0), got {value!r}"


@pytest.fixture
async def sdk(server: ServerHandle, worker: Any) -> LangGraphClient:
    return client_for(server.url)


async def finished_langgraph_run(sdk: LangGraphClient) -> tuple[str, str]:
    thread_id = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.create(thread_id, "chat", input=human("one two three four five"))
    await sdk.runs.join(thread_id, run["run_id"])
    return thread_id, run["run_id"]


async def test_langgraph_routes_take_the_flags_and_refuse_others_with_422(
    sdk: LangGraphClient, client: httpx.AsyncClient
) -> None:
    thread_id, run_id = await finished_langgraph_run(sdk)
    routes = [
        (f"/threads/{thread_id}/runs/{run_id}/join", "cancel_on_disconnect"),
        (f"/threads/{thread_id}/state", "subgraphs"),
        ("/assistants/chat/subgraphs", "recurse"),
    ]
    for path, name in routes:
        for value, _ in ACCEPTED:
            response = await client.get(path, params={name: value})
            assert response.status_code == 200, (path, value, response.text)
        for value in REFUSED:
            response = await client.get(path, params={name: value})
            assert response.status_code == 422, (path, value, response.text)
            body = response.json()
            assert body["code"] == "invalid_request", body
            assert body["detail"].startswith(f"{name} must be true or false (or 1 or 0)"), body


async def test_langgraph_run_stream_reads_the_header_then_the_query(
    sdk: LangGraphClient, client: httpx.AsyncClient
) -> None:
    thread_id, run_id = await finished_langgraph_run(sdk)
    path = f"/threads/{thread_id}/runs/{run_id}/stream"
    whole = await read_events(client, path)
    ids = [e.id for e in whole if e.id and "." not in e.id]
    assert len(ids) >= 3, whole
    after = ids[len(ids) // 2]
    rest = whole[[e.id for e in whole].index(after) + 1 :]
    assert rest and rest != whole

    by_header = await read_events(client, path, headers={"Last-Event-ID": after})
    by_query = await read_events(client, path, params={"last_event_id": after})
    header_over_query = await read_events(
        client, path, headers={"Last-Event-ID": after}, params={"last_event_id": "-1"}
    )
    assert by_header == by_query == header_over_query == rest


async def test_langgraph_thread_stream_reads_the_header_then_the_query(
    sdk: LangGraphClient, client: httpx.AsyncClient
) -> None:
    """Before, the thread stream read only the header; a malformed id shows which was read
    (400 `invalid_last_event_id` before anything is streamed)."""
    thread_id, _ = await finished_langgraph_run(sdk)
    path = f"/threads/{thread_id}/stream"
    by_query = await client.get(path, params={"last_event_id": "not-an-id"})
    header_over_query = await client.get(
        path, headers={"Last-Event-ID": "not-an-id"}, params={"last_event_id": "also-not"}
    )
    for refused in (by_query, header_over_query):
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "invalid_last_event_id"
        assert "'not-an-id'" in refused.json()["detail"]


async def test_v1_events_read_the_header_then_the_query(
    client: httpx.AsyncClient, worker: Any
) -> None:
    run = await submit(client)
    path = f"/v1/runs/{run['run_id']}/events"
    whole = await read_events(client, path)
    after = whole[2].id

    by_header = await read_events(client, path, headers={"Last-Event-ID": after})
    by_query = await read_events(client, path, params={"last_event_id": after})
    header_over_query = await read_events(
        client, path, headers={"Last-Event-ID": after}, params={"last_event_id": "not-an-id"}
    )
    assert by_header == by_query == header_over_query == whole[3:]

    refused = await client.get(path, params={"last_event_id": "not-an-id"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_last_event_id"
