"""The memory-aware assistant (runner/assistant, served as a project through its langgraph.json)
driven with LangGraph's Python SDK against a real server and worker, the `fake` model: facts
remembered across threads and kept apart between users, conflicts confirmed or refused, the
summary bounding the prompt. Its pure parts (extraction rules, the yes/no fast path, graders)
are tested in tests/test_assistant_parts.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.conftest import StartServer, StartWorker
from tests.processes import ROOT
from tests.test_langgraph_api import API_KEYS, client_for, human

CONFIG = str(ROOT / "runner" / "assistant" / "langgraph.json")
FACTS = ["memory", "facts"]


@pytest.fixture
async def users(
    start_server: StartServer, start_worker: StartWorker
) -> tuple[LangGraphClient, LangGraphClient]:
    """Alice's and bob's SDK clients on a server and worker serving the assistant's project."""
    server = await start_server(api_keys=API_KEYS, config_path=CONFIG)
    await start_worker(api_keys=API_KEYS, config_path=CONFIG)
    return client_for(server.url, "key-a"), client_for(server.url, "key-b")


class Turn:
    """What one streamed run showed: the answer's tokens, the custom events, the last state."""

    def __init__(self, parts: list[Any]) -> None:
        self.tokens = [
            p.data[0]["content"]
            for p in parts
            if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"
        ]
        self.custom = [p.data for p in parts if p.event == "custom"]
        self.memory = [c["memory"] for c in self.custom if "memory" in c]
        values = [p.data for p in parts if p.event == "values"]
        self.values = values[-1] if values else {}

    @property
    def answer(self) -> str:
        return "".join(self.tokens)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.memory if m["event"] == kind]


async def turn(
    sdk: LangGraphClient, thread_id: str, text: str | None = None, **kwargs: Any
) -> Turn:
    run_input = human(text) if text is not None else None
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id,
            "assistant",
            input=run_input,
            stream_mode=["messages-tuple", "custom", "values"],
            **kwargs,
        )
    ]
    errors = [p for p in parts if p.event == "error"]
    assert not errors, errors
    return Turn(parts)


async def facts_of(sdk: LangGraphClient) -> dict[str, dict[str, Any]]:
    found = await sdk.store.search_items(FACTS, limit=100)
    return {item["key"]: item["value"] for item in found["items"]}


async def new_thread(sdk: LangGraphClient) -> str:
    return str((await sdk.threads.create())["thread_id"])


async def test_facts_are_remembered_in_a_new_thread_and_not_by_another_user(
    users: tuple[LangGraphClient, LangGraphClient],
) -> None:
    alice, bob = users
    thread_id = await new_thread(alice)
    first = await turn(alice, thread_id, "Hi, my name is Ann and I live in Paris.")
    assert (
        first.answer
        == "I don't know anything about you yet. You said: Hi, my name is Ann and I live in Paris."
    )
    assert len(first.tokens) > 5  # streamed token by token
    assert sorted(e["key"] for e in first.events("remembered")) == ["location", "name"]
    stored = await facts_of(alice)
    assert {k: (v["value"], v["confidence"]) for k, v in stored.items()} == {
        "name": ("Ann", 0.9),
        "location": ("Paris", 0.9),
    }
    runs = await alice.runs.list(thread_id)
    assert stored["name"]["source_run"] == runs[0]["run_id"]

    # a new thread of the same user: one store search puts the facts in the answer's context
    later = await turn(alice, await new_thread(alice), "What is my name?")
    assert later.answer.startswith("I remember that your name is Ann; you live in Paris.")
    prompt = later.events("prompt")[0]
    assert prompt["facts"] == 2

    # bob sees none of them, in his answer or through the store routes
    other = await turn(bob, await new_thread(bob), "What is my name?")
    assert other.answer.startswith("I don't know anything about you yet.")
    assert await facts_of(bob) == {}
