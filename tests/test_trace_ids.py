"""`X-Trace-ID` (issue 33, the seed's convention; server/trace_ids.py): taken from a request when
it is a safe token, else 400; made when absent; on every answer of both APIs beside
`X-Request-ID`; in the request's logs and the worker's; stored on the runs a request submits and
on their evaluations, which also say whose they are. Real server, worker, Redis and Postgres."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import StartServer
from tests.test_assistant_settings import Served, served  # noqa: F401 (the fixture)
from tests.test_bad_input import assert_error, run_body
from tests.test_cors import UI
from tests.test_errors import all_logs
from tests.test_langgraph_api import human

MADE = re.compile(r"[0-9a-f]{32}")


async def test_every_answer_of_both_apis_carries_a_trace_id(client: httpx.AsyncClient) -> None:
    answers = [
        await client.get("/healthz"),
        await client.post("/v1/threads", json={}),
        await client.get("/no-such-route"),  # answered by the router, before any handler
        await client.get("/v1/runs/not-a-uuid"),
        await client.post("/threads", json={}),  # LangGraph's
        await client.post("/assistants/search", json={}),
    ]
    assert [a.status_code for a in answers] == [200, 201, 404, 400, 200, 200]
    made = [a.headers["x-trace-id"] for a in answers]
    assert all(MADE.fullmatch(t) for t in made), made
    assert len(set(made)) == len(made)
    assert all(a.headers["x-request-id"] for a in answers)


@pytest.mark.parametrize("sent", ["edge-7f3a:42", "Root=1-5759e988+bd86/2e3f", "a" * 128])
async def test_a_client_trace_id_is_kept_on_both_apis(client: httpx.AsyncClient, sent: str) -> None:
    for answer in (
        await client.post("/v1/threads", json={}, headers={"X-Trace-ID": sent}),
        await client.post("/threads", json={}, headers={"X-Trace-ID": sent}),
        await client.get("/v1/runs/not-a-uuid", headers={"X-Trace-ID": sent}),
    ):
        assert answer.headers["x-trace-id"] == sent


@pytest.mark.parametrize(
    "sent",
    ["a" * 129, "two words", "<script>", 'say "hi"', "a;b", ""],
    ids=["too-long", "space", "markup", "quotes", "semicolon", "empty"],
)
async def test_a_malformed_trace_id_is_a_400(client: httpx.AsyncClient, sent: str) -> None:
    v1 = await client.post("/v1/threads", json={}, headers={"X-Trace-ID": sent})
    assert assert_error(v1, 400)["code"] == "invalid_trace_id", v1.text
    assert "X-Trace-ID" in v1.json()["error"]["message"]
    langgraph = await client.post("/threads", json={}, headers={"X-Trace-ID": sent})
    assert langgraph.status_code == 400, langgraph.text
    assert "X-Trace-ID" in langgraph.json()["detail"]  # LangGraph's shape of an error
    for answer in (v1, langgraph):
        made = answer.headers["x-trace-id"]
        assert made != sent and MADE.fullmatch(made)
    assert (await client.get("/v1/threads")).json()["threads"] == []


async def test_the_trace_id_is_in_the_log_context_of_the_request(
    client: httpx.AsyncClient,
) -> None:
    with all_logs() as logs:
        created = await client.post("/v1/threads", json={}, headers={"X-Trace-ID": "tr-1"})
        made = await client.post("/v1/threads", json={})
    assert created.status_code == made.status_code == 201
    created_logs = [e for e in logs if e["event"] == "thread created"]
    assert [e.get("x_trace_id") for e in created_logs] == ["tr-1", made.headers["x-trace-id"]]


async def test_runs_and_their_evaluations_carry_the_trace_id_and_their_owner(
    served: Served,  # noqa: F811
) -> None:
    with all_logs() as logs:
        submitted = await served.http.post(
            "/v1/runs",
            json=run_body("My name is Ann.", graph="assistant"),
            headers={"X-Trace-ID": "client-trace-1"},
        )
        assert submitted.status_code == 202, submitted.text
        assert submitted.headers["x-trace-id"] == "client-trace-1"
        run = await served.ended(submitted.json()["run_id"])
    assert run["status"] == "succeeded", run
    assert run["x_trace_id"] == "client-trace-1"
    # the worker's lines of the run carry it too
    worker_lines = [e for e in logs if e.get("run_id") == run["run_id"] and "request_id" not in e]
    assert worker_lines and {e.get("x_trace_id") for e in worker_lines} == {"client-trace-1"}
    answer = await served.http.get(f"/v1/runs/{run['run_id']}/evaluations")
    evaluations = answer.json()["evaluations"]
    assert evaluations, answer.text
    assert {(e["owner"], e["x_trace_id"]) for e in evaluations} == {("alice", "client-trace-1")}
    thread = await served.http.get(f"/v1/threads/{run['thread_id']}/evaluations")
    assert {e["x_trace_id"] for e in thread.json()["evaluations"]} == {"client-trace-1"}

    # LangGraph's routes: the same, and a run without one gets the trace id it was answered with
    thread_id = (await served.http.post("/threads", json={})).json()["thread_id"]
    waited = await served.http.post(
        f"/threads/{thread_id}/runs/wait",
        json={"assistant_id": "assistant", "input": human("hello")},
    )
    assert waited.status_code == 200, waited.text
    made = waited.headers["x-trace-id"]
    [lg_run] = (await served.http.get(f"/threads/{thread_id}/runs")).json()
    assert (await served.http.get(f"/v1/runs/{lg_run['run_id']}")).json()["x_trace_id"] == made
    graded = (await served.http.get(f"/v1/runs/{lg_run['run_id']}/evaluations")).json()
    assert {(e["owner"], e["x_trace_id"]) for e in graded["evaluations"]} == {("alice", made)}


async def test_a_browser_ui_on_another_origin_may_send_and_read_it(
    start_server: StartServer,
) -> None:
    server = await start_server(cors_origins=(UI,))
    async with httpx.AsyncClient(base_url=server.url) as http:
        preflight = await http.options(
            "/v1/threads",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-trace-id",
            },
        )
        assert preflight.status_code in (200, 204), preflight.text
        assert "x-trace-id" in preflight.headers["access-control-allow-headers"].lower()
        created = await http.post(
            "/v1/threads", json={}, headers={"Origin": UI, "X-Trace-ID": "ui-1"}
        )
        assert created.headers["x-trace-id"] == "ui-1"
        assert "x-trace-id" in created.headers["access-control-expose-headers"].lower()
