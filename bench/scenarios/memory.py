"""`memory`: the assistant's first token against chat's, and its prompt size as a thread grows.

Issue 22's speed targets for the memory-aware assistant (docs/memory.md).

One server, one worker, both `--config runner/assistant/langgraph.json` (which serves `chat`
and `assistant` side by side), the `fake` model with no token delay.

- first token: `POST /threads/{t}/runs/stream` (LangGraph API, `stream_mode:
  ["messages-tuple"]`, a new thread each run, a message stating no fact), from before the
  POST to the first `messages` event with text; `assistant` and `chat` take turns run by run,
  so other work on the machine falls on both alike. Target: the assistant's median within
  1.5x chat's (its context assembly is one store search and the thread's state, no model call
  before the answer's).
- prompt size: one thread of the assistant grown turn by turn, each turn streamed with
  `stream_mode: ["custom"]`; its `{"memory": {"event": "prompt", "characters", "messages"}}`
  event gives the size of the prompt the model was sent. Figures at 10, 50 and 200 turns
  (`--quick`: 10, 30, 60). Past the summary threshold (`summary_after`, 24 messages by
  default) the size is a sawtooth (it grows by a turn's two messages, then drops when the
  older ones are folded), so the point figures depend on where a turn falls in it; the target
  is on its peaks: the largest prompt of turns 51-200 within 1.1x of that of turns 11-50
  (flat, not growing).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx

from bench.context import BenchContext
from bench.launcher import ROOT
from bench.report import Target, summary
from bench.sse import LANGGRAPH_TERMINAL, run_stream_events

NAME = "memory"
NEEDS: tuple[str, ...] = ()
WARMUP = 3
PROJECT = ROOT / "runner" / "assistant" / "langgraph.json"
TEXT = "tell me about the weather in general"  # states no fact: no conflict, no question
CONFIG = {"configurable": {"fake_token_delay_ms": 0}}


async def first_token(http: httpx.AsyncClient, graph: str) -> float:
    """Seconds from before the POST to the first `messages` event with text, on a new thread
    (the stream read to its end)."""
    body = {
        "assistant_id": graph,
        "input": {"messages": [{"role": "user", "content": TEXT}]},
        "stream_mode": ["messages-tuple"],
        "config": CONFIG,
        "if_not_exists": "create",
    }
    first, done = 0.0, False
    start = time.perf_counter()
    async for event in run_stream_events(http, str(uuid.uuid4()), body):
        if event.event == b"messages" and b'"AIMessageChunk"' in event.data:
            if not first and b'"content":""' not in event.data:
                first = time.perf_counter() - start
        elif event.event in LANGGRAPH_TERMINAL:
            done = event.event == b"end"
    if not (first and done):
        raise AssertionError(f"{graph}: no token or no clean end")
    return first


async def prompt_of_turn(http: httpx.AsyncClient, thread_id: str, turn: int) -> dict[str, Any]:
    """One turn of the thread on the assistant: its `prompt` memory event."""
    body = {
        "assistant_id": "assistant",
        "input": {"messages": [{"role": "user", "content": f"{TEXT}, turn {turn}"}]},
        "stream_mode": ["custom"],
        "config": CONFIG,
        "if_not_exists": "create",
    }
    prompt: dict[str, Any] = {}
    async for event in run_stream_events(http, thread_id, body):
        if event.event == b"custom":
            memory = json.loads(event.data).get("memory") or {}
            if memory.get("event") == "prompt":
                prompt = memory
        elif event.event == b"error":
            raise RuntimeError(f"turn {turn}: {event.data!r}")
    if not prompt:
        raise AssertionError(f"turn {turn}: no prompt event")
    return prompt


async def run(ctx: BenchContext) -> None:
    n = ctx.size(30, 8)
    sizes = (10, 50, 200) if not ctx.quick else (10, 30, 60)
    firsts: dict[str, list[float]] = {"assistant": [], "chat": []}
    at_turn: dict[int, dict[str, Any]] = {}
    characters: list[int] = []  # each turn's prompt
    async with ctx.cluster(NAME) as (_, cluster):
        server = await cluster.server(RUNSTREAM_CONFIG=str(PROJECT))
        await cluster.ready_worker(RUNSTREAM_CONFIG=str(PROJECT))
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            for i in range(WARMUP + n):
                order = ("chat", "assistant") if i % 2 else ("assistant", "chat")
                for graph in order:
                    seconds = await first_token(http, graph)
                    if i >= WARMUP:
                        firsts[graph].append(seconds * 1000)
            thread_id = str(uuid.uuid4())
            for turn in range(1, sizes[-1] + 1):
                prompt = await prompt_of_turn(http, thread_id, turn)
                characters.append(int(prompt["characters"]))
                if turn in sizes:
                    at_turn[turn] = prompt
    assistant, chat = summary(firsts["assistant"]), summary(firsts["chat"])
    ctx.figure(
        NAME,
        "first token, assistant, median",
        assistant["median"],
        "ms",
        baseline=chat["median"],
        baseline_label="chat",
        targets=[Target("<=", 1.5, on="ratio")],
        stats=assistant,
    )
    ctx.figure(NAME, "first token, chat, median", chat["median"], "ms", stats=chat)
    for turn in sizes:
        prompt = at_turn[turn]
        ctx.figure(
            NAME,
            f"prompt at turn {turn}",
            float(prompt["characters"]),
            "chars",
            notes=f"{prompt['messages']} messages",
        )
    early = max(characters[sizes[0] : sizes[1]])  # turns sizes[0]+1 .. sizes[1]
    late = max(characters[sizes[1] :])
    ctx.figure(
        NAME,
        f"largest prompt, turns {sizes[1] + 1}-{sizes[2]}",
        float(late),
        "chars",
        baseline=float(early),
        baseline_label=f"turns {sizes[0] + 1}-{sizes[1]}",
        targets=[Target("<=", 1.1, on="ratio")],
    )
    ctx.note(
        NAME,
        runs=n,
        warmup_runs=WARMUP,
        first_token_ms={"assistant": assistant, "chat": chat},
        prompt_by_turn={turn: at_turn[turn] for turn in sizes},
        prompt_characters=characters,
    )
