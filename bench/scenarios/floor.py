"""`floor`: the built-in `chat` graph and the fake model in this process, nothing else.

No queue, no Redis, no HTTP: `runner.graphs.chat` compiled with an `InMemorySaver`, streamed
with `stream_mode="messages"`, fake model delay 0. Its token rate (tokens over the whole
stream) and time to first token are what the served figures are compared with. It runs as a
worker process does: on uvloop (the bench's loop) and with the worker's garbage-collector
settings (`server.processes.heap`), taken once the graph is loaded; without them the floor was
slower than runstream's own worker (issue 12).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from bench.context import BenchContext
from bench.report import summary

from .sizes import THROUGHPUT_WORDS, TTFT_TEXT

if TYPE_CHECKING:
    from runner.run_scope import RunScope

NAME = "floor"
NEEDS: tuple[str, ...] = ()


def in_process_scope(thread_id: str, token_delay_s: float) -> RunScope:
    """The run scope of a `chat` run by LangGraph in this process (`runner.run_scope`): the fake
    model with this delay, and neither a ledger nor evaluations (the chat graph uses neither)."""
    from runner.models import EchoChatModel
    from runner.run_scope import RunScope

    return RunScope(
        run_id=str(uuid.uuid4()),
        thread_id=thread_id,
        owner="bench",
        graph="chat",
        attempt=1,
        trace_id=None,
        x_trace_id=None,
        max_facts=0,
        ledger=None,  # type: ignore[arg-type]
        evaluations=None,  # type: ignore[arg-type]
        chat_models=lambda _: EchoChatModel(token_delay_s=token_delay_s),
    )


async def stream_chat(
    graph: object,
    text: str,
    modes: object = "messages",
    *,
    token_delay_s: float = 0,
    durability: str | None = None,
    start: float | None = None,
) -> tuple[int, float, float]:
    """(tokens, seconds to the first token, seconds from the start to the end) of one `chat`
    run on a new thread, the fake model `token_delay_s` apart; `start` (a `perf_counter`
    reading) counts from a moment shared by runs started together instead of this call.

    With no delay the fake model never yields to the event loop between tokens, so in one
    process every token is produced before the first is consumed: the rate is taken over the
    whole stream (start to end), not from the first token.
    """
    from langchain_core.messages import AIMessageChunk, HumanMessage

    from project.graph_context import RunContext
    from runner.run_scope import running

    scope = in_process_scope(str(uuid.uuid4()), token_delay_s=token_delay_s)
    context = RunContext(run_id=scope.run_id, thread_id=scope.thread_id, attempt=1)
    config = {"configurable": {"thread_id": context.thread_id}}
    extra = {"durability": durability} if durability else {}
    tokens = 0
    first = 0.0
    start = time.perf_counter() if start is None else start
    stream = graph.astream(  # type: ignore[attr-defined]
        {"messages": [HumanMessage(text)]}, config, context=context, stream_mode=modes, **extra
    )
    with running(scope):  # what the worker sets around a run's stream
        async for item in stream:
            if isinstance(modes, list):  # (mode, payload) pairs
                mode, payload = item
                if mode != "messages":
                    continue
                item = payload
            chunk = item[0]
            if isinstance(chunk, AIMessageChunk) and chunk.content:
                tokens += 1
                if not first:
                    first = time.perf_counter()
    end = time.perf_counter()
    return tokens, first - start, end - start


async def run(ctx: BenchContext) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from runner.graphs import chat
    from server.processes.heap import settle_heap

    graph = chat.compile(checkpointer=InMemorySaver())
    settle_heap()  # as the worker does once loaded (the bench's own process, from here on)
    await stream_chat(graph, TTFT_TEXT)  # warm up imports and caches
    ttfts = [(await stream_chat(graph, TTFT_TEXT))[1] * 1000 for _ in range(ctx.size(50, 15))]
    rates = []
    for _ in range(ctx.size(3, 1)):
        tokens, _, seconds = await stream_chat(graph, _words())
        if tokens != THROUGHPUT_WORDS:
            raise AssertionError(f"floor streamed {tokens} tokens, expected {THROUGHPUT_WORDS}")
        rates.append(tokens / seconds)
    tokens, _, seconds = await stream_chat(graph, _words(), ["messages", "updates", "custom"])
    worker_modes_rate = tokens / seconds
    stats = summary(rates)
    ttft = summary(ttfts)
    ctx.baselines[NAME] = {"tokens_per_s": stats["median"], "ttft_ms": ttft["median"]}
    ctx.figure(NAME, "in-process tokens/s (messages mode)", stats["median"], "/s", stats=stats)
    ctx.figure(NAME, "in-process first token, median", ttft["median"], "ms", stats=ttft)
    ctx.note(
        NAME,
        words=THROUGHPUT_WORDS,
        tokens_per_s_worker_stream_modes=worker_modes_rate,
        note="worker_stream_modes: messages+updates+custom, as runner/execute.py streams",
    )


def _words() -> str:
    from bench.api import words

    return words(THROUGHPUT_WORDS)
