"""The local OpenAI-compatible server (tests/openai_compat.py) as the real `langchain-openai`
client sees it: what the examples' tests rely on."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from typing import cast

import httpx
import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from bench.launcher import ROOT, free_port
from tests.openai_compat import (
    CompatConfig,
    ReceivedRequests,
    RunningServer,
    running_in_thread,
)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def add(a: int, b: int) -> int:
    """The sum of two integers."""
    return a + b


def chat(server: RunningServer, **kwargs: object) -> ChatOpenAI:
    return ChatOpenAI(
        model="compat-gpt",
        base_url=server.base_url,
        api_key="not-a-secret",  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


async def test_astream_yields_the_reply_word_by_word(openai_compat: RunningServer) -> None:
    model = chat(openai_compat, streaming=True, stream_usage=True)
    chunks = [chunk async for chunk in model.astream("hello there")]
    texts = [chunk.content for chunk in chunks if chunk.content]
    assert texts == ["You", " said:", " hello", " there"]
    total = chunks[0]
    for chunk in chunks[1:]:
        total += chunk
    assert isinstance(total, AIMessageChunk)
    assert total.response_metadata["finish_reason"] == "stop"
    assert total.usage_metadata is not None and total.usage_metadata["output_tokens"] == 4


def test_the_stream_is_openai_s_wire_format() -> None:
    """Role delta first, one content delta per word, finish_reason, a usage chunk, [DONE]."""
    with running_in_thread() as server:
        body = {
            "model": "m",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "hi you"}],
        }
        with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            frames = [line for line in response.iter_lines() if line]
    assert frames[-1] == "data: [DONE]"
    chunks = [json.loads(frame.removeprefix("data: ")) for frame in frames[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[:-1]]
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"] == ""
    assert [d["content"] for d in deltas[1:-1]] == ["You", " said:", " hi", " you"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


async def test_bound_tools_are_called_by_name_and_parse(openai_compat: RunningServer) -> None:
    model = chat(openai_compat, streaming=True).bind_tools([get_weather, add])
    chunks = [
        c async for c in model.astream('use get_weather for Paris, then add {"a": 2, "b": 3}')
    ]
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    total = sum(chunks[1:], start=cast(AIMessageChunk, chunks[0]))
    assert [(c["name"], c["args"]) for c in total.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("add", {"a": 2, "b": 3}),
    ]
    assert total.response_metadata["finish_reason"] == "tool_calls"
    assert all(c["id"] and c["id"].startswith("call_") for c in total.tool_calls)


async def test_after_a_tool_message_the_answer_uses_its_result(
    openai_compat: RunningServer,
) -> None:
    model = chat(openai_compat).bind_tools([get_weather])
    question = HumanMessage("what is get_weather in Oslo?")
    call = await model.ainvoke([question])
    assert call.tool_calls[0]["args"] == {"city": "Oslo"}
    result = ToolMessage("snowing in Oslo", tool_call_id=call.tool_calls[0]["id"])
    answer = await model.ainvoke([question, call, result])
    assert answer.content == "The get_weather tool returned: snowing in Oslo"


async def test_without_a_tool_s_name_the_model_just_answers(openai_compat: RunningServer) -> None:
    model = chat(openai_compat).bind_tools([get_weather])
    answer = await model.ainvoke("how are you")
    assert answer.tool_calls == []
    assert answer.content == "You said: how are you"


async def test_embeddings_are_deterministic_normalised_and_sized() -> None:
    received = ReceivedRequests()
    with running_in_thread(received=received) as server:
        embeddings = OpenAIEmbeddings(
            model="text-embedding-3-small",
            base_url=server.base_url,
            api_key="not-a-secret",  # type: ignore[arg-type]
            dimensions=64,
            check_embedding_ctx_length=False,  # tiktoken would download its tables
        )
        first, second = await embeddings.aembed_documents(["red apples", "Apples red!"])
        other = await embeddings.aembed_query("blue sky")
    assert len(first) == 64 and math.isclose(sum(x * x for x in first), 1.0, rel_tol=1e-5)
    assert first == second  # the same bag of words
    assert first != other
    assert received.for_path("/v1/embeddings")[0]["encoding_format"] == "base64"


def test_token_id_inputs_are_embedded() -> None:
    with running_in_thread() as server:
        body = {"model": "e", "input": [[1, 2, 3], [1, 2, 3]], "encoding_format": "float"}
        data = httpx.post(f"{server.base_url}/embeddings", json=body).json()["data"]
    assert data[0]["embedding"] == data[1]["embedding"]
    assert len(data[0]["embedding"]) == 1536


def test_token_count_and_delay_are_configurable() -> None:
    with running_in_thread(CompatConfig(reply_tokens=10, token_delay=0.02)) as server:
        started = time.monotonic()
        model = chat(server, streaming=True)
        texts = [chunk.content for chunk in model.stream("one two") if chunk.content]
        elapsed = time.monotonic() - started
    assert len(texts) == 10
    assert elapsed >= 9 * 0.02


def test_bad_requests_get_openai_s_error_object() -> None:
    with running_in_thread() as server:
        response = httpx.post(f"{server.base_url}/chat/completions", json={"messages": []})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"


def test_it_runs_as_a_command() -> None:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.openai_compat", "--port", str(port), "--tokens", "3"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = chat(RunningServer(f"http://127.0.0.1:{port}")).invoke("a b c d")
                break
            except Exception:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise
                time.sleep(0.1)
        assert answer.content == "You said: a"
    finally:
        child.terminate()
        child.wait(10)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_tool_choice_forces_a_call(choice: str | dict[str, object]) -> None:
    with running_in_thread() as server:
        model = chat(server).bind_tools([get_weather, add], tool_choice=choice)
        message = model.invoke("no names here, 7")
    assert len(message.tool_calls) == 1
