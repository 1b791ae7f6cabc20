"""The example projects in examples/, served unchanged by a real `runstream serve` and worker,
their model the local OpenAI-compatible server (tests/openai_compat.py) through the real
`langchain-openai` client, driven with LangGraph's Python SDK."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart

from tests.openai_compat import RunningServer
from tests.processes import ROOT, Cluster
from tests.test_langgraph_api import client_for

TOOL_AGENT = ROOT / "examples" / "tool-agent"
REFUND_DESK = ROOT / "examples" / "refund-desk"

pytestmark = pytest.mark.slow  # a server, a worker and a model server each: ./scripts/test runs it


async def serve_example(
    cluster: Cluster, folder: Path, model: RunningServer, tmp_path: Path, **env: str
) -> LangGraphClient:
    """Server and worker for a copy of `folder` without its `.env` (a developer's own `.env`
    would point the model elsewhere), the model at the local server; `env` adds settings."""
    return client_for(await example_url(cluster, folder, model, tmp_path, **env))


async def example_url(
    cluster: Cluster, folder: Path, model: RunningServer, tmp_path: Path, **env: str
) -> str:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(".env", "__pycache__"))
    env = {
        "RUNSTREAM_CONFIG": str(copy / "langgraph.json"),
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "not-a-secret",
        **env,
    }
    (_, url), _ = await asyncio.gather(cluster.server(**env), cluster.ready_worker(**env))
    return url


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def stream(sdk: LangGraphClient, thread_id: str, run_input: Any) -> list[StreamPart]:
    return [
        part
        async for part in sdk.runs.stream(
            thread_id, "agent", input=run_input, stream_mode=["messages-tuple", "values"]
        )
    ]


async def test_the_tool_agent_calls_its_tool_and_streams_the_answer(
    cluster: Cluster, openai_compat: RunningServer, tmp_path: Path
) -> None:
    sdk = await serve_example(cluster, TOOL_AGENT, openai_compat, tmp_path)
    thread = await sdk.threads.create()
    parts = await stream(sdk, thread["thread_id"], user("What is get_weather for Paris?"))

    chunks = [p.data[0] for p in parts if p.event == "messages"]
    answer_chunks = [c["content"] for c in chunks if c["type"] == "AIMessageChunk"]
    answer = "The get_weather tool returned: Paris: sunny, 21 °C"
    # token by token, as the model streamed them, not one message at the end
    assert "".join(answer_chunks).endswith(answer)
    assert len([c for c in answer_chunks if c]) >= len(answer.split())
    # the model's tool call arrives as one whole `ai` message (runstream streams text
    # token by token; LangGraph would also stream the call's argument fragments)
    calls = [c for c in chunks if c.get("tool_calls")]
    assert calls and calls[0]["type"] == "ai"
    assert calls[0]["tool_calls"][0]["name"] == "get_weather"
    tool_results = [c for c in chunks if c["type"] == "tool"]
    assert [t["content"] for t in tool_results] == ["Paris: sunny, 21 °C"]

    final = [p.data for p in parts if p.event == "values"][-1]
    kinds = [m["type"] for m in final["messages"]]
    assert kinds == ["human", "ai", "tool", "ai"]
    assert final["messages"][1]["tool_calls"][0]["args"] == {"city": "Paris"}
    assert final["messages"][-1]["content"] == answer


async def test_the_tool_agent_takes_a_tool_result_as_input(
    cluster: Cluster, openai_compat: RunningServer, tmp_path: Path
) -> None:
    """A client that ran the tool itself sends the call and its result; the model answers."""
    sdk = await serve_example(cluster, TOOL_AGENT, openai_compat, tmp_path)
    thread = await sdk.threads.create()
    call = {"id": "call_1", "name": "get_weather", "args": {"city": "Oslo"}}
    run_input = {
        "messages": [
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "Oslo: raining, 4 °C", "tool_call_id": "call_1"},
        ]
    }
    parts = await stream(sdk, thread["thread_id"], run_input)
    final = [p.data for p in parts if p.event == "values"][-1]
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    assert final["messages"][-1]["content"] == "The get_weather tool returned: Oslo: raining, 4 °C"


async def test_the_refund_desk_signs_in_asks_above_the_limit_and_pays_once(
    cluster: Cluster, openai_compat: RunningServer, tmp_path: Path
) -> None:
    """A factory graph with a `context_schema`, an interrupt, a write-once effect and the
    project's own auth (examples/refund-desk)."""
    ledger = tmp_path / "ledger.jsonl"
    url = await example_url(
        cluster,
        REFUND_DESK,
        openai_compat,
        tmp_path,
        DESK_TOKENS="alice-token:alice,bob-token:bob",
        REFUND_LEDGER=str(ledger),
        RUNSTREAM_SIGNING_KEY="k" * 32,
    )
    alice = get_client(url=url, headers={"Authorization": "Bearer alice-token"})
    bob = get_client(url=url, headers={"Authorization": "Bearer bob-token"})
    nobody = await client_for(url).http.client.post("/threads/search", json={})
    assert nobody.status_code == 401 and "a desk token is required" in nobody.text

    thread_id = (await alice.threads.create())["thread_id"]
    assert (await alice.threads.get(thread_id))["metadata"]["owner"] == "alice"
    small = await alice.runs.wait(thread_id, "desk", input=user("refund 20 please"))
    assert small["messages"][-1]["content"].startswith("A refund of 20.00 was paid.")

    # above the assistant's limit (a run's context over the schema's default): a person decides
    await alice.runs.wait(
        thread_id, "desk", input=user("refund 80 please"), context={"refund_limit": 50}
    )
    waiting = await alice.threads.get_state(thread_id)
    assert waiting["next"] == ["approve"]
    assert waiting["interrupts"][0]["value"]["question"] == "Refund 80.00 (above 50.00)?"
    assert (await alice.threads.get(thread_id))["status"] == "interrupted"
    done = await alice.runs.wait(thread_id, "desk", command={"resume": "approve"})
    assert done["messages"][-1]["content"].startswith("A refund of 80.00 was paid.")
    paid = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert paid == [
        {"thread_id": thread_id, "amount": 20.0},
        {"thread_id": thread_id, "amount": 80.0},
    ]

    # another user: not found, and not in their search
    with pytest.raises(httpx.HTTPStatusError) as missing:
        await bob.threads.get(thread_id)
    assert missing.value.response.status_code == 404
    assert thread_id not in [t["thread_id"] for t in await bob.threads.search()]
