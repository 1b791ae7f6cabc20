"""`user_graph`: a user's own project graph streaming from `ChatOpenAI`, served against in-process.

The graph is examples/tool-agent's agent (`ChatOpenAI` with tools bound, a `ToolNode`),
unchanged; its model is the local OpenAI-compatible server (tests/openai_compat.py, started
as its own process: `python -m tests.openai_compat --tokens N`), which answers every message
with N words streamed one chunk each, no delay, so the model is as fast as it can be and what
differs between the two ways is what runstream adds.

- in-process: the project's graph imported in this process (as `langgraph dev` would run it,
  no checkpointer) and streamed with `stream_mode="messages"`; time from the call to the first
  text chunk, and tokens over the time from the call to the stream's end.
- served: `runstream serve` + `worker` with `--config examples/tool-agent/langgraph.json`,
  `POST /threads/{t}/runs/stream` (LangGraph API, `stream_mode: ["messages-tuple"]`, a new
  thread each run); from before the POST to the first `messages` event with text, and tokens
  over the time from before the POST to `end`.

- built-in `chat`: the same request to runstream's own `chat` graph on the same server and
  worker, the `fake` model with no delay (`fake_token_delay_ms: 0`), first_token's message:
  runstream's fixed path (submit, queue, claim, checkpoint, event hop) in this run, on this
  machine's load, with next to no model in it. The user graph's added first token minus this
  is what is specific to a user's graph (its loading, its context, its model's client).

The ways take turns run by run, so other work on the machine falls on all alike. Figures:
runstream's added first-token latency (served median minus in-process median; issue 21's
aim ≤ 10 ms) and its token rate against the in-process rate (aim ≥ 0.8x), both medians; the
built-in `chat` graph's first token in the same run, for reference; and each process's CPU per
token both ways (server, worker, model server, this process), as on a machine with few cores
the rate follows the CPU spent per token more than the path.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx

from bench.context import BenchContext
from bench.launcher import ROOT, Process, free_port
from bench.report import Target, summary
from bench.sse import LANGGRAPH_TERMINAL, run_stream_events

from .sizes import TTFT_TEXT

NAME = "user_graph"
NEEDS: tuple[str, ...] = ()
WARMUP = 2
PROJECT = ROOT / "examples" / "tool-agent"
TEXT = "tell me about the weather in general"  # names no tool: the model just answers
API_KEY = "not-a-secret"


@asynccontextmanager
async def openai_compat(tokens: int) -> AsyncIterator[tuple[str, Process]]:
    """The local OpenAI-compatible server as a child process: its base URL (`.../v1`)."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.openai_compat", "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNSTREAM_", "OPENAI_"))}
    process = Process("openai-compat", [*argv, "--tokens", str(tokens)], env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await http.get(f"{url}/models")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if not process.alive() or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the OpenAI-compatible server did not start\n{process.tail()}"
                    )
                await asyncio.sleep(0.05)
        yield url, process
    finally:
        process.stop()
        process.remove_log()


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def model_environment(base_url: str) -> Iterator[None]:
    """`OPENAI_BASE_URL`/`OPENAI_API_KEY` for the in-process graph's `ChatOpenAI`, restored
    after (this process's children never inherit `OPENAI_*`: bench/launcher.py)."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    os.environ.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY=API_KEY)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def project_graph() -> Any:
    """The project's compiled graph, imported as its langgraph.json says (`./src` on the path)."""
    source = str(PROJECT / "src")
    if source not in sys.path:
        sys.path.append(source)
    from tool_agent.graph import graph

    return graph


async def in_process(graph: Any) -> tuple[int, float, float]:
    """(tokens, seconds to the first, seconds to the end) of one streamed run."""
    from langchain_core.messages import AIMessageChunk, HumanMessage

    tokens, first = 0, 0.0
    start = time.perf_counter()
    async for chunk, _ in graph.astream({"messages": [HumanMessage(TEXT)]}, stream_mode="messages"):
        if isinstance(chunk, AIMessageChunk) and chunk.content:
            tokens += 1
            if not first:
                first = time.perf_counter() - start
    return tokens, first, time.perf_counter() - start


async def served(
    http: httpx.AsyncClient, *, builtin_chat: bool = False
) -> tuple[int, float, float]:
    """(tokens, seconds to the first, seconds to `end`) of one run streamed by the server: of
    the project's agent, or of the built-in `chat` graph (fake model, no delay)."""
    body: dict[str, Any] = {
        "assistant_id": "agent",
        "input": {"messages": [{"role": "user", "content": TEXT}]},
        "stream_mode": ["messages-tuple"],
        "if_not_exists": "create",
    }
    if builtin_chat:
        body["assistant_id"] = "chat"
        body["input"] = {"messages": [{"role": "user", "content": TTFT_TEXT}]}
        body["config"] = {"configurable": {"fake_token_delay_ms": 0}}
    tokens, first, done = 0, 0.0, 0.0
    start = time.perf_counter()
    async for event in run_stream_events(http, str(uuid.uuid4()), body):
        if event.event == b"messages" and b'"AIMessageChunk"' in event.data:
            if b'"content":""' in event.data:
                continue
            tokens += 1
            if not first:
                first = time.perf_counter() - start
        elif event.event in LANGGRAPH_TERMINAL:
            done = time.perf_counter() - start
    if not (first and done):
        raise AssertionError("the served run had no token or no end")
    return tokens, first, done


async def run(ctx: BenchContext) -> None:
    n = ctx.size(20, 6)
    words = ctx.size(1000, 300)
    firsts: dict[str, list[float]] = {"served": [], "in_process": [], "builtin_chat": []}
    rates: dict[str, list[float]] = {"served": [], "in_process": []}
    cpu: dict[str, dict[str, float]] = {"served": {}, "in_process": {}}
    async with openai_compat(words) as (base_url, model):
        project = str(PROJECT / "langgraph.json")
        async with ctx.cluster(NAME) as (_, cluster):
            server = await cluster.server(
                RUNSTREAM_CONFIG=project, OPENAI_BASE_URL=base_url, OPENAI_API_KEY=API_KEY
            )
            worker = await cluster.ready_worker(
                RUNSTREAM_CONFIG=project, OPENAI_BASE_URL=base_url, OPENAI_API_KEY=API_KEY
            )
            tiers = {"server": server.process, "worker": worker, "model": model}
            with model_environment(base_url):
                graph = project_graph()
                async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
                    for i in range(WARMUP + n):
                        _, first, _ = await served(http, builtin_chat=True)
                        if i >= WARMUP:
                            firsts["builtin_chat"].append(first * 1000)
                        order = ("served", "in_process") if i % 2 else ("in_process", "served")
                        for way in order:
                            before = {name: p.cpu() for name, p in tiers.items()}
                            before["bench"] = _own_cpu()
                            tokens, first, done = await (
                                served(http) if way == "served" else in_process(graph)
                            )
                            if i >= WARMUP:
                                spent = cpu[way]
                                for name, process in tiers.items():
                                    used = process.cpu() - before[name]
                                    spent[name] = spent.get(name, 0.0) + used
                                used = _own_cpu() - before["bench"]
                                spent["bench"] = spent.get("bench", 0.0) + used
                            if tokens != words:
                                raise AssertionError(f"{way}: {tokens} tokens, not {words}")
                            if i >= WARMUP:
                                firsts[way].append(first * 1000)
                                rates[way].append(tokens / done)
    first_served, first_local = summary(firsts["served"]), summary(firsts["in_process"])
    first_chat = summary(firsts["builtin_chat"])
    rate_served, rate_local = summary(rates["served"]), summary(rates["in_process"])
    added = first_served["median"] - first_local["median"]
    ctx.figure(
        NAME,
        "first token added by runstream, median",
        added,
        "ms",
        targets=[Target("<=", 10)],
        notes=f"served {first_served['median']:.1f} ms, in-process {first_local['median']:.1f} ms",
    )
    ctx.figure(
        NAME,
        "built-in chat's first token, same run, median",
        first_chat["median"],
        "ms",
        stats=first_chat,
        notes="runstream's fixed path on this machine now; the agent's added first token"
        f" is {added - first_chat['median']:+.1f} ms beyond it",
    )
    ctx.figure(
        NAME,
        "tokens/s served, median",
        rate_served["median"],
        "tok/s",
        baseline=rate_local["median"],
        baseline_label="in-process",
        targets=[Target(">=", 0.8, on="ratio")],
        stats=rate_served,
    )
    # CPU per token of each process (µs), the whole run: where the served time goes
    per_token = {
        way: {name: round(seconds / (n * words) * 1e6, 1) for name, seconds in spent.items()}
        for way, spent in cpu.items()
    }
    for way, tiers_us in per_token.items():
        listed = ", ".join(f"{name} {us:.0f}" for name, us in tiers_us.items() if us >= 1)
        print(f"    CPU per token, {way} (µs): {listed}", flush=True)
    ctx.note(
        NAME,
        cpu_us_per_token=per_token,
        runs=n,
        warmup_runs=WARMUP,
        reply_tokens=words,
        first_token_ms={
            "served": first_served,
            "in_process": first_local,
            "builtin_chat_served": first_chat,
        },
        tokens_per_s={"served": rate_served, "in_process": rate_local},
    )
