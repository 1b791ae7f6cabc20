"""`/mcp` as LangGraph's server serves it (docs/langgraph.md, "MCP"), driven by the official
`mcp` client over streamable HTTP: the caller's assistants are tools, a call is a recorded run.

What LangGraph's endpoint answers was observed on `langgraph dev` (langgraph-api 0.16.7): the
tool list, a call's text (Python's repr of the run's outcome), a failing graph's `isError`
with the exception's name, the JSON-RPC errors, and the HTTP answers to bad messages.
"""

from __future__ import annotations

import ast
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.test_langgraph_api import client_for

KEYS = {"key-a": "alice", "key-b": "bob"}
GRAPHS = {"chat": "runner.graphs:chat", "fails": "tests.custom_graphs:always_fails"}


@asynccontextmanager
async def mcp_session(url: str, api_key: str) -> AsyncIterator[ClientSession]:
    http = httpx2.AsyncClient(headers={"X-Api-Key": api_key}, timeout=60)
    async with (
        http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture
async def served(start_server: StartServer, start_worker: StartWorker) -> ServerHandle:
    await start_worker(api_keys=KEYS, graphs=GRAPHS)
    return await start_server(api_keys=KEYS, graphs=GRAPHS)


async def test_the_callers_assistants_are_listed_as_tools_with_a_message_for_input(
    served: ServerHandle,
) -> None:
    sdk = client_for(served.url, "key-a")
    await sdk.assistants.create("chat", name="Mine, in words")
    async with mcp_session(served.url, "key-a") as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    async with mcp_session(served.url, "key-b") as session:
        bobs = {tool.name for tool in (await session.list_tools()).tools}

    graphs = {"chat", "approval", "fails"}  # every graph's own assistant, and alice's
    assert set(tools) == {*graphs, "Mine_in_words"}
    assert bobs == graphs  # alice's assistant is hers alone
    mine = tools["Mine_in_words"]
    assert mine.title == "Mine, in words"
    assert mine.description == "Tool based on the Mine, in words assistant"
    # a list of LangChain messages is one string, the user's message, as LangGraph offers it
    assert mine.input_schema["type"] == "object"
    assert mine.input_schema["properties"]["messages"] == {
        "type": "string",
        "title": "Messages",
        "description": "The user message to send to the agent.",
    }
    assert "$defs" not in mine.input_schema or not {"HumanMessage", "AIMessage"} & set(
        mine.input_schema["$defs"]
    )


async def test_a_tool_call_is_a_recorded_run_of_the_callers_and_answers_its_outcome(
    served: ServerHandle,
) -> None:
    async with mcp_session(served.url, "key-a") as session:
        result = await session.call_tool("chat", {"messages": "hello there"})

    assert not result.is_error
    outcome = ast.literal_eval(result.content[0].text)  # Python's repr, as LangGraph sends
    assert [(m["type"], m["content"]) for m in outcome["messages"]] == [
        ("human", "hello there"),
        ("ai", "hello there"),
    ]
    sdk = client_for(served.url, "key-a")
    [thread] = await sdk.threads.search()
    [run] = await sdk.runs.list(thread["thread_id"])
    assert run["status"] == "success"
    assert await client_for(served.url, "key-b").threads.search() == []


async def test_a_failing_graph_is_an_error_result_named_by_its_exception(
    served: ServerHandle,
) -> None:
    async with mcp_session(served.url, "key-a") as session:
        result = await session.call_tool("fails", {"messages": "x"})
    assert result.is_error
    assert result.content[0].text == "RuntimeError"


async def test_protocol_errors_are_answered_as_langgraphs_endpoint_answers_them(
    served: ServerHandle,
) -> None:
    headers = {"X-Api-Key": "key-a", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=served.url, headers=headers, timeout=30) as http:

        async def rpc(body: Any, **extra: Any) -> httpx.Response:
            return await http.post("/mcp", json=body, **extra)

        unknown = await rpc({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {}})
        assert unknown.json() == {
            "jsonrpc": "2.0",
            "id": 5,
            "error": {"code": -32602, "message": "Unknown tool: None"},
        }
        nope = await rpc(
            {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "nope"}}
        )
        assert nope.json()["error"] == {"code": -32602, "message": "Unknown tool: nope"}
        assert nope.json()["id"] == 0
        bogus = await rpc({"jsonrpc": "2.0", "id": 6, "method": "bogus"})
        assert bogus.json()["error"] == {"code": -32601, "message": "Method not found: bogus"}
        assert (
            await rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        ).status_code == 202
        assert (await rpc({"jsonrpc": "2.0", "id": 7, "method": "ping"})).json()["result"] == {}

        for body, message in (
            ([1], "Invalid message format."),
            (
                {"id": 8, "method": "ping"},
                "Invalid JSON-RPC message. Missing or invalid jsonrpc version.",
            ),
        ):
            refused = await rpc(body)
            assert (refused.status_code, refused.json()) == (400, {"error": message})
        not_json = await http.post(
            "/mcp", content=b"notjson", headers={"Content-Type": "application/json"}
        )
        assert (not_json.status_code, not_json.json()) == (400, {"error": "Invalid JSON"})
        html_only = await rpc(
            {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Accept": "text/html"}
        )
        assert html_only.status_code == 400
        assert (await http.get("/mcp")).status_code == 405
        assert (await http.delete("/mcp")).status_code == 404
        version = await rpc(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "1999"},
            }
        )
        assert version.json()["result"]["protocolVersion"] == "2025-11-25"

    async with httpx.AsyncClient(base_url=served.url, timeout=30) as anonymous:
        assert (
            await anonymous.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        ).status_code == 401


async def test_a_project_that_disables_mcp_has_no_mcp_route(
    start_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "langgraph.json"
    config.write_text(
        json.dumps({"graphs": {"chat": "runner.graphs:chat"}, "http": {"disable_mcp": True}})
    )
    server = await start_server(config_path=str(config))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        response = await http.post(
            "/mcp", json=ping, headers={"Accept": "application/json, text/event-stream"}
        )
    assert response.status_code == 404
