"""`/a2a/{assistant_id}` as LangGraph's server serves it (docs/langgraph.md, "A2A"), driven
with the JSON-RPC calls an A2A client sends: a message is a recorded run of the caller's, a
task's id names its run, and the answers have LangGraph's shapes.

What LangGraph's endpoint answers was observed on `langgraph dev` (langgraph-api 0.16.7): the
agent card, `message/send`'s task, `message/stream`'s events and their order, `tasks/get`,
`tasks/cancel` of a running and of a finished task, and the errors below.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stream_store.assistant_ids import assistant_id_for
from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.test_langgraph_api import client_for

KEYS = {"key-a": "alice", "key-b": "bob"}
GRAPHS = {
    "chat": "runner.graphs:chat",
    "fails": "tests.custom_graphs:always_fails",
    "lingers": "tests.custom_graphs:lingers",
    "steps": "tests.custom_graphs:steps",
    "asks": "tests.custom_graphs:asks",
}
CHAT, FAILS, LINGERS, STEPS, ASKS = (
    assistant_id_for(g) for g in ("chat", "fails", "lingers", "steps", "asks")
)
JSON = {"Accept": "application/json"}
SSE = {"Accept": "text/event-stream"}


@pytest.fixture
async def served(start_server: StartServer, start_worker: StartWorker) -> ServerHandle:
    await start_worker(api_keys=KEYS, graphs=GRAPHS)
    return await start_server(api_keys=KEYS, graphs=GRAPHS)


def a2a_client(served: ServerHandle, key: str = "key-a") -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=served.url, headers={"X-Api-Key": key}, timeout=60)


def message(text: str, **extra: Any) -> dict[str, Any]:
    parts = [{"kind": "text", "text": text}]
    return {"message": {"role": "user", "parts": parts, "messageId": str(uuid.uuid4()), **extra}}


async def rpc(
    http: httpx.AsyncClient, assistant: str, method: str, params: Any, request_id: Any = 1
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = await http.post(f"/a2a/{assistant}", json=body, headers=JSON)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert (answer["jsonrpc"], answer["id"]) == ("2.0", request_id)
    return answer


async def streamed(
    http: httpx.AsyncClient, assistant: str, params: Any, method: str = "message/stream"
) -> AsyncIterator[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}
    async with http.stream("POST", f"/a2a/{assistant}", json=body, headers=SSE) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                assert event == "message"
                yield json.loads(line[6:])


def texts(parts: list[dict[str, Any]]) -> list[str]:
    return [part["text"] for part in parts]


async def test_the_agent_card_describes_the_assistant_at_langgraphs_paths(
    served: ServerHandle,
) -> None:
    async with a2a_client(served) as http:
        card = (await http.get(f"/a2a/{CHAT}/.well-known/agent-card.json")).json()
        for path in (
            f"/a2a/{CHAT}/.well-known/agent.json",
            f"/a2a/{CHAT}",
            f"/.well-known/agent-card.json?assistant_id={CHAT}",
        ):
            assert (await http.get(path)).json() == card, path
        steps = (await http.get(f"/a2a/{STEPS}")).json()
        unknown = await http.get(f"/a2a/{uuid.uuid4()}/.well-known/agent-card.json")
        not_an_id = await http.get("/a2a/nope/.well-known/agent-card.json")
        nameless = await http.get("/.well-known/agent-card.json")

    url = f"{served.url}/a2a/{CHAT}".replace("localhost", "127.0.0.1")
    assert card["name"] == "chat"
    assert card["description"] == "chat assistant"
    assert card["url"].endswith(f"/a2a/{CHAT}")
    assert card["supportedInterfaces"] == [
        {"url": card["url"], "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert url.rsplit(":", 1)[-1] == card["url"].rsplit(":", 1)[-1]  # the server's own port
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is False
    assert card["defaultInputModes"] == ["application/json", "text/plain"]
    [skill] = card["skills"]
    assert skill["id"] == f"{CHAT}-main"
    assert skill["name"] == "chat Capabilities"
    assert skill["metadata"]["inputSchema"]["supportsA2A"] is True
    assert "messages" in skill["metadata"]["inputSchema"]["properties"]
    assert steps["skills"][0]["metadata"]["inputSchema"]["supportsA2A"] is False
    missing = f"Assistant '{unknown.url.path.split('/')[2]}' not found"
    assert (unknown.status_code, unknown.json()) == (
        400,
        {"error": {"code": -32602, "message": missing}},
    )
    assert not_an_id.status_code == 400
    assert not_an_id.json()["error"]["message"] == (
        "Failed to get assistant 'nope': Invalid assistant ID: must be a UUID"
    )
    assert (nameless.status_code, nameless.json()["error"]["message"]) == (
        400,
        "Missing required query parameter: assistant_id",
    )


async def test_message_send_answers_the_reply_as_a_completed_task_of_a_recorded_run(
    served: ServerHandle,
) -> None:
    async with a2a_client(served) as http:
        first = (await rpc(http, CHAT, "message/send", message("hello there")))["result"]
        context = first["contextId"]
        second = await rpc(http, CHAT, "message/send", message("and again", contextId=context))
        v1_params = {"message": {"role": "ROLE_USER", "parts": [{"text": "v1"}], "messageId": "m"}}
        v1 = (await rpc(http, CHAT, "SendMessage", v1_params))["result"]

    sdk = client_for(served.url, "key-a")
    runs = await sdk.runs.list(context)
    assert [run["status"] for run in runs] == ["success", "success"]
    task_ids = [f"{context}:{run['run_id']}" for run in reversed(runs)]
    assert first["kind"] == "task"
    assert first["id"] == task_ids[0]
    assert first["status"]["state"] == "completed"
    [artifact] = first["artifacts"]
    assert artifact["name"] == "Assistant Response"
    assert artifact["description"] == f"Response from assistant {CHAT}"
    assert artifact["parts"] == [{"kind": "text", "text": "hello there"}]
    assert [(m["role"], texts(m["parts"]), m["taskId"]) for m in first["history"]] == [
        ("user", ["hello there"], task_ids[0]),
        ("agent", ["hello there"], task_ids[0]),
    ]
    assert first["history"][0]["messageId"] == runs[-1]["metadata"]["a2a"]["message_id"]
    # the context's history: each message with the task it was a turn of
    later = second["result"]
    assert later["id"] == task_ids[1]
    assert [(m["role"], m["taskId"]) for m in later["history"]] == [
        ("user", task_ids[0]),
        ("agent", task_ids[0]),
        ("user", task_ids[1]),
        ("agent", task_ids[1]),
    ]
    # A2A 1.0's method names: its enums, and the task under `task`
    assert v1["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in v1["task"]["history"]] == ["ROLE_USER", "ROLE_AGENT"]
    assert await client_for(served.url, "key-b").threads.search() == []


async def test_message_stream_sends_langgraphs_status_and_artifact_events_in_order(
    served: ServerHandle,
) -> None:
    sent = message("hello stream")
    async with a2a_client(served) as http:
        events = [event async for event in streamed(http, CHAT, sent)]
        v1 = [event async for event in streamed(http, CHAT, sent, "SendStreamingMessage")]

    results = [event["result"] for event in events]
    assert all(event["id"] == "s" and event["jsonrpc"] == "2.0" for event in events)
    task = results[0]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "submitted"
    assert task["history"] == [
        {"kind": "message", **sent["message"], "taskId": task["id"], "contextId": task["contextId"]}
    ]
    working, artifact, final = results[1:-2], results[-2], results[-1]
    assert working, "a working status for the streamed reply"
    for update in working:
        assert (update["kind"], update["status"]["state"], update["final"]) == (
            "status-update",
            "working",
            False,
        )
        assert update["status"]["message"]["role"] == "agent"
    assert texts(working[-1]["status"]["message"]["parts"]) == ["hello stream"]
    assert artifact["kind"] == "artifact-update"
    assert (artifact["append"], artifact["lastChunk"]) == (False, True)
    assert artifact["artifact"]["parts"] == [{"kind": "text", "text": "hello stream"}]
    assert final["kind"] == "status-update"
    assert final["status"]["state"] == "completed"
    assert final["final"] is True
    assert "message" not in final["status"]
    assert {r.get("taskId", r.get("id")) for r in results} == {task["id"]}
    context, run_id = task["id"].split(":")
    assert task["contextId"] == context
    run = await client_for(served.url, "key-a").runs.get(context, run_id)
    assert run["status"] == "success"
    assert v1[0]["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert v1[-1]["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_failing_graph_is_a_failed_task_named_by_its_error(served: ServerHandle) -> None:
    async with a2a_client(served) as http:
        sent = (await rpc(http, FAILS, "message/send", message("x")))["result"]
        events = [event["result"] async for event in streamed(http, FAILS, message("x"))]
        got = (await rpc(http, FAILS, "tasks/get", {"id": sent["id"]}))["result"]

    assert sent["history"] == []
    assert sent["status"]["state"] == "failed"
    assert texts(sent["status"]["message"]["parts"]) == ["Error executing assistant: RuntimeError"]
    assert "artifacts" not in sent
    assert [event["kind"] for event in events] == ["task", "status-update"]
    assert events[-1]["status"]["state"] == "failed"
    assert events[-1]["final"] is True
    assert texts(events[-1]["status"]["message"]["parts"]) == ["this graph always fails"]
    assert got["status"]["state"] == "failed"
    assert texts(got["status"]["message"]["parts"]) == ["Task failed with status: error"]


async def test_tasks_get_answers_a_finished_task_with_its_history(served: ServerHandle) -> None:
    async with a2a_client(served) as http:
        sent = (await rpc(http, CHAT, "message/send", message("what now")))["result"]
        got = (await rpc(http, CHAT, "tasks/get", {"id": sent["id"]}))["result"]
        last = await rpc(http, CHAT, "tasks/get", {"id": sent["id"], "historyLength": 1})
        none = await rpc(http, CHAT, "tasks/get", {"id": sent["id"], "historyLength": 0})
        too_long = await rpc(http, CHAT, "tasks/get", {"id": sent["id"], "historyLength": 11})
        v1 = (await rpc(http, CHAT, "GetTask", {"id": sent["id"]}))["result"]
        elsewhere = await rpc(http, STEPS, "tasks/get", {"id": sent["id"]})

    assert (got["kind"], got["id"], got["contextId"]) == ("task", sent["id"], sent["contextId"])
    assert got["status"]["state"] == "completed"
    assert texts(got["status"]["message"]["parts"]) == ["Task completed successfully"]
    assert got["status"]["message"]["taskId"] == sent["id"]
    assert got["history"] == sent["history"]
    assert last["result"]["history"] == sent["history"][-1:]
    assert "history" not in none["result"]
    assert too_long["error"] == {"code": -32602, "message": "historyLength cannot exceed 10"}
    assert v1["status"]["state"] == "TASK_STATE_COMPLETED"
    # a task is its assistant's: another assistant's endpoint does not know it
    assert elsewhere["error"] == {"code": -32001, "message": f"Task not found: {sent['id']}"}


async def test_tasks_cancel_cancels_a_running_task_once(served: ServerHandle) -> None:
    async with a2a_client(served) as http:
        events = streamed(http, LINGERS, message("take your time"))
        task = (await anext(events))["result"]
        running = (await rpc(http, LINGERS, "tasks/get", {"id": task["id"]}))["result"]
        cancelled = (await rpc(http, LINGERS, "tasks/cancel", {"id": task["id"]}))["result"]
        rest = [event["result"] async for event in events]
        got = (await rpc(http, LINGERS, "tasks/get", {"id": task["id"]}))["result"]
        again = await rpc(http, LINGERS, "tasks/cancel", {"id": task["id"]})

    assert running["status"]["state"] in ("submitted", "working")
    assert cancelled["id"] == task["id"]
    assert cancelled["status"]["state"] == "canceled"
    assert texts(cancelled["status"]["message"]["parts"]) == ["Task was canceled"]
    assert rest[-1]["final"] is True  # the stream ends with the run
    assert got["status"]["state"] == "canceled"
    assert again["error"] == {
        "code": -32002,
        "message": "Task is not cancelable in its current state",
    }
    context, run_id = task["id"].split(":")
    run = await client_for(served.url, "key-a").runs.get(context, run_id)
    assert run["status"] == "interrupted"  # LangGraph's name for a cancelled run


async def test_a_graph_that_asks_is_a_task_that_requires_input_until_cancelled(
    served: ServerHandle,
) -> None:
    asked = [{"kind": "data", "data": {"id": "<id>", "value": {"question": "sure?"}}}]
    async with a2a_client(served) as http:
        sent = (await rpc(http, ASKS, "message/send", message("go")))["result"]
        got = (await rpc(http, ASKS, "tasks/get", {"id": sent["id"]}))["result"]
        events = [event["result"] async for event in streamed(http, ASKS, message("go2"))]
        cancelled = (await rpc(http, ASKS, "tasks/cancel", {"id": sent["id"]}))["result"]
        after = await rpc(http, ASKS, "tasks/get", {"id": sent["id"], "historyLength": 0})

    def interrupt_parts(artifact: dict[str, Any]) -> list[dict[str, Any]]:
        assert (artifact["name"], artifact["description"]) == (
            "Interrupt",
            "Agent requires input to continue",
        )
        assert all(isinstance(part["data"]["id"], str) for part in artifact["parts"])
        return [{**part, "data": {**part["data"], "id": "<id>"}} for part in artifact["parts"]]

    assert sent["status"]["state"] == "input-required"
    [artifact] = sent["artifacts"]
    assert interrupt_parts(artifact) == asked
    assert [(m["role"], texts(m["parts"])) for m in sent["history"]] == [("user", ["go"])]
    assert got["status"]["state"] == "input-required"
    assert "message" not in got["status"]
    assert [event["kind"] for event in events] == ["task", "artifact-update", "status-update"]
    assert interrupt_parts(events[1]["artifact"]) == asked
    assert "lastChunk" not in events[1]
    assert (events[2]["status"]["state"], events[2]["final"]) == ("input-required", True)
    assert cancelled["status"]["state"] == "canceled"
    assert after["result"] == {
        "kind": "task",
        "id": sent["id"],
        "contextId": sent["contextId"],
        "status": {"state": "canceled", "timestamp": after["result"]["status"]["timestamp"]},
    }


async def test_a_message_to_a_task_that_waits_answers_its_interrupt(served: ServerHandle) -> None:
    async with a2a_client(served) as http:
        by_text = (await rpc(http, ASKS, "message/send", message("go")))["result"]
        answered = await rpc(http, ASKS, "message/send", message("yes", taskId=by_text["id"]))
        got = (await rpc(http, ASKS, "tasks/get", {"id": by_text["id"]}))["result"]
        over = await rpc(http, ASKS, "message/send", message("more", taskId=by_text["id"]))
        by_data = (await rpc(http, ASKS, "message/send", message("go")))["result"]
        resume = {"role": "user", "parts": [{"kind": "data", "data": {"resume": "by data"}}]}
        with_data = await rpc(
            http,
            ASKS,
            "message/send",
            {"message": {**resume, "messageId": "d1", "taskId": by_data["id"]}},
        )
        no_task = await rpc(http, ASKS, "message/send", {"message": {**resume, "messageId": "d2"}})

    done = answered["result"]
    assert (done["id"], done["status"]["state"]) == (by_text["id"], "completed")
    assert done["artifacts"][0]["parts"] == [{"kind": "text", "text": "you said yes"}]
    assert [(m["role"], texts(m["parts"]), m["taskId"]) for m in done["history"]] == [
        ("user", ["go"], by_text["id"]),
        ("agent", ["you said yes"], by_text["id"]),
    ]
    assert got["status"]["state"] == "completed"
    assert got["history"] == done["history"]
    assert over["error"] == {
        "code": -32004,
        "message": "A terminal task cannot accept another message",
    }
    assert with_data["result"]["artifacts"][0]["parts"] == [
        {"kind": "text", "text": "you said by data"}
    ]
    assert no_task["error"] == {
        "code": -32602,
        "message": "contextId and taskId are required when resuming a task",
    }


async def test_another_callers_task_is_not_found(served: ServerHandle) -> None:
    async with a2a_client(served) as alice:
        mine = (await rpc(alice, CHAT, "message/send", message("mine")))["result"]
        created = await alice.post("/assistants", json={"graph_id": "chat", "name": "hers"})
        hers = created.json()["assistant_id"]
    async with a2a_client(served, "key-b") as bob:
        got = await rpc(bob, CHAT, "tasks/get", {"id": mine["id"]})
        cancel = await rpc(bob, CHAT, "tasks/cancel", {"id": mine["id"]})
        into = await rpc(bob, CHAT, "message/send", message("me too", contextId=mine["contextId"]))
        card = await bob.get(f"/a2a/{hers}")
        send = await rpc(bob, hers, "message/send", message("hi"))

    assert got["error"] == {"code": -32001, "message": f"Task not found: {mine['id']}"}
    assert cancel["error"] == {"code": -32001, "message": f"Task not found: {mine['id']}"}
    assert into["error"]["code"] == -32602
    assert into["error"]["data"] == {
        "thread_id": mine["contextId"],
        "error_type": "thread_not_found",
    }
    assert card.status_code == 400
    assert send["error"] == {"code": -32602, "message": f"Assistant '{hers}' not found"}
    runs = await client_for(served.url, "key-a").runs.list(mine["contextId"])
    assert len(runs) == 1
    assert await client_for(served.url, "key-b").threads.search() == []


async def test_protocol_errors_are_answered_as_langgraphs_endpoint_answers_them(
    served: ServerHandle,
) -> None:
    async with a2a_client(served) as http:

        async def error_of(assistant: str, method: str, params: Any) -> dict[str, Any]:
            return (await rpc(http, assistant, method, params))["error"]

        async def post(body: Any, **extra: Any) -> httpx.Response:
            return await http.post(f"/a2a/{CHAT}", **{"headers": JSON, **extra, "json": body})

        no_text = "does not support A2A conversational messages"
        assert no_text in (await error_of(STEPS, "message/send", message("x")))["message"]
        data_only = {
            "message": {"role": "user", "parts": [{"data": {"steps": []}}], "messageId": "d"}
        }
        steps = (await rpc(http, STEPS, "message/send", data_only))["result"]
        assert steps["status"]["state"] == "completed"
        assert steps["artifacts"][0]["parts"] == [
            {"kind": "text", "text": "{'steps': ['a', 'b', 'c'], 'messages': []}"}
        ]
        assert await error_of("nope", "message/send", message("x")) == {
            "code": -32602,
            "message": "Invalid assistant ID: must be a UUID",
        }
        unknown = str(uuid.uuid4())
        assert await error_of(unknown, "message/send", message("x")) == {
            "code": -32602,
            "message": f"Assistant '{unknown}' not found",
        }
        for params, text in (
            ({}, "Missing or invalid 'message' in params"),
            ({"message": {"role": "user", "parts": []}}, "Missing required 'messageId' in message"),
            (
                {"message": {"role": "user", "parts": [], "messageId": "a"}},
                "Message must contain at least one part",
            ),
        ):
            assert await error_of(CHAT, "message/send", params) == {"code": -32602, "message": text}
        file_part = {"kind": "file", "file": {"uri": "https://example.com/a.png"}}
        files = {"message": {"role": "user", "parts": [file_part], "messageId": "f"}}
        assert (await error_of(CHAT, "message/send", files))["code"] == -32005
        for method, params, code, text in (
            ("tasks/get", {"id": "nope"}, -32001, "Task not found: nope"),
            ("tasks/get", {}, -32602, "Missing required parameter: id (task_id)"),
            ("tasks/cancel", {"id": "nope"}, -32001, "Task not found: nope"),
            ("bogus", {}, -32601, "Method not found: bogus"),
            ("tasks/list", {}, -32601, "Method not found: tasks/list"),
        ):
            assert await error_of(CHAT, method, params) == {"code": code, "message": text}
        unknown_task = f"{uuid.uuid4()}:{uuid.uuid4()}"
        assert (await error_of(CHAT, "tasks/get", {"id": unknown_task}))["code"] == -32001

        for body, answer in (
            ([1], (-32600, "Invalid message format: expected object", None)),
            (
                {"id": 1, "method": "tasks/get"},
                (-32600, "Invalid JSON-RPC message: missing or invalid jsonrpc version", 1),
            ),
            (
                {"jsonrpc": "2.0", "method": "tasks/get"},
                (
                    -32600,
                    "Invalid message format: must be a JSON-RPC request or notification",
                    None,
                ),
            ),
        ):
            refused = (await post(body)).json()
            assert (refused["error"]["code"], refused["error"]["message"], refused["id"]) == answer
        not_json = await http.post(
            f"/a2a/{CHAT}", content=b"notjson", headers={**JSON, "Content-Type": "application/json"}
        )
        assert not_json.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "Invalid JSON payload"},
        }
        assert (await post({"jsonrpc": "2.0", "id": 3, "result": {}})).status_code == 202
        html = await post(
            {"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}, headers={"Accept": "text/html"}
        )
        assert (html.status_code, html.json()) == (
            400,
            {"error": "Accept header must include application/json"},
        )
        stream_as_json = await post(
            {"jsonrpc": "2.0", "id": 1, "method": "message/stream", **{"params": message("x")}}
        )
        assert stream_as_json.status_code == 400
        events = [e async for e in streamed(http, CHAT, {"message": {"role": "user", "parts": []}})]
        assert [e["error"]["message"] for e in events] == [
            "Missing required 'messageId' in message"
        ]
        assert (await http.delete(f"/a2a/{CHAT}")).status_code == 405

    async with httpx.AsyncClient(base_url=served.url, timeout=30) as anonymous:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
        assert (await anonymous.post(f"/a2a/{CHAT}", json=body, headers=JSON)).status_code == 401
    sdk = client_for(served.url, "key-a")
    assert len(await sdk.threads.search()) == 1  # the data-only message's, nothing else


async def test_a_project_that_disables_a2a_has_no_a2a_routes(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "langgraph.json"
    config.write_text(
        json.dumps({"graphs": {"chat": "runner.graphs:chat"}, "http": {"disable_a2a": True}})
    )
    server = await start_server(config_path=str(config))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
        assert (await http.post(f"/a2a/{CHAT}", json=body, headers=JSON)).status_code == 404
        assert (await http.get(f"/a2a/{CHAT}/.well-known/agent-card.json")).status_code == 404
        assert (
            await http.get(f"/.well-known/agent-card.json?assistant_id={CHAT}")
        ).status_code == 404
