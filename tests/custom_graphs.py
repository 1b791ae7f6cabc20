"""Graphs registered through RUNSTREAM_GRAPHS in tests: a builder and a compiled graph."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import PutOp
from langgraph.types import interrupt

from project.graph_context import RunContext
from runner.graphs import run_save_note
from runner.run_scope import chat_model, current_run, once, record_evaluation


async def count_words(state: MessagesState) -> dict[str, Any]:
    text = str(state["messages"][-1].content)
    writer = get_stream_writer()
    for index, word in enumerate(text.split()):
        writer({"word": word, "index": index})
    return {"messages": [AIMessage(content=f"{len(text.split())} words", id="counted")]}


builder = StateGraph(MessagesState).add_node("count", count_words)
builder.add_edge(START, "count").add_edge("count", END)
compiled = builder.compile()


# A write tool whose node lingers after the write committed and before the node returns (and
# so before the checkpoint): the window in which a crash would make a naive tool run twice.
async def propose_note(state: MessagesState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    call_id = f"call-{runtime.context.run_id}"
    call = {"name": "save_note", "args": {"content": "write me once"}, "id": call_id}
    return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{call_id}")]}


async def write_then_linger(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    call = last.tool_calls[0]
    execution = await run_save_note(call)
    get_stream_writer()({"wrote": True, "replayed": execution.replayed})
    await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_LINGER_S", "3")))
    message = ToolMessage(content=str(execution.result), tool_call_id=call["id"] or "")
    return {"messages": [message]}


slow_writer = (
    StateGraph(MessagesState, context_schema=RunContext)
    .add_node("propose_note", propose_note)
    .add_node("write_then_linger", write_then_linger)
    .add_edge(START, "propose_note")
    .add_edge("propose_note", "write_then_linger")
    .add_edge("write_then_linger", END)
)


# A graph that reads a `configurable` key of its own, declared in CONFIGURABLE_KEYS below, and
# reports what of the config it was given (the worker must pass only the declared keys).
async def greet(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
    configurable = config.get("configurable") or {}
    persona = configurable.get("persona", "nobody")
    get_stream_writer()(
        {
            "persona": persona,
            "thread_id": configurable.get("thread_id"),
            "injected": "injected" in configurable,
        }
    )
    return {"messages": [AIMessage(content=f"as {persona}", id="greeted")]}


persona = StateGraph(MessagesState).add_node("greet", greet)
persona.add_edge(START, "greet").add_edge("greet", END)

declares_reserved = persona  # registered under an attribute that declares a reserved key

# The configurable keys each graph of this module takes, by attribute (runner.graph_registry).
CONFIGURABLE_KEYS = {"persona": {"persona"}, "declares_reserved": {"persona", "checkpoint_id"}}


# A graph with long-term memory in LangGraph's store: it answers with what it remembered (every
# item under ("memories",), as the run's owner sees the store) and then remembers the message.
async def recall(state: MessagesState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    store = runtime.store
    assert store is not None
    remembered = await store.asearch(("memories",), limit=100)
    text = str(state["messages"][-1].content)
    await store.aput(("memories",), f"m{len(remembered)}", {"text": text})
    known = ", ".join(sorted(str(item.value["text"]) for item in remembered))
    reply = AIMessage(content=f"I remember: {known}", id=f"recall-{runtime.context.run_id}")
    return {"messages": [reply]}


remembers = StateGraph(MessagesState, context_schema=RunContext).add_node("recall", recall)
remembers.add_edge(START, "recall").add_edge("recall", END)


# Three steps in a row, for breakpoints (`interrupt_before` / `interrupt_after`).
class Steps(TypedDict):
    steps: list[str]


def _step(name: str) -> Any:
    def step(state: Steps) -> dict[str, Any]:
        return {"steps": [*state.get("steps", []), name]}

    step.__name__ = name
    return step


steps = (
    StateGraph(Steps)
    .add_node("a", _step("a"))
    .add_node("b", _step("b"))
    .add_node("c", _step("c"))
    .add_edge(START, "a")
    .add_edge("a", "b")
    .add_edge("b", "c")
)


# A graph with a subgraph as a node, which writes a custom part (`stream_subgraphs`).
def _inner_a(state: Steps) -> dict[str, Any]:
    get_stream_writer()({"inner": "a"})
    return {"steps": [*state["steps"], "inner_a"]}


inner = (
    StateGraph(Steps)
    .add_node("inner_a", _inner_a)
    .add_node("inner_b", _step("inner_b"))
    .add_edge(START, "inner_a")
    .add_edge("inner_a", "inner_b")
    .compile()
)
nested = (
    StateGraph(Steps)
    .add_node("first", _step("first"))
    .add_node("child", inner)
    .add_edge(START, "first")
    .add_edge("first", "child")
)


# An async node that blocks the worker's event loop (a synchronous call where an await was
# meant) for RUNSTREAM_TEST_BLOCK_S: longer than the tests' lease.
async def block_the_loop(state: MessagesState) -> dict[str, Any]:
    time.sleep(float(os.environ.get("RUNSTREAM_TEST_BLOCK_S", "3")))  # noqa: ASYNC251
    return {"messages": [AIMessage(content="unblocked", id="unblocked")]}


blocks_the_loop = (
    StateGraph(MessagesState)
    .add_node("block", block_the_loop)
    .add_edge(START, "block")
    .add_edge("block", END)
)


# A subgraph whose node streams a chat model's tokens (`messages|<ns>` with `stream_subgraphs`).
async def _chat(state: MessagesState) -> dict[str, Any]:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello there friend")]))
    return {"messages": [await model.ainvoke(state["messages"])]}


chat_nested = (
    StateGraph(MessagesState)
    .add_node("first", lambda state: {})
    .add_node(
        "child", StateGraph(MessagesState).add_node("chat", _chat).add_edge(START, "chat").compile()
    )
    .add_edge(START, "first")
    .add_edge("first", "child")
)


# A subgraph that calls interrupt() (subgraph state and checkpoints), and one two levels down
# (`get_subgraphs` with `recurse`).
def _ask(state: Steps) -> dict[str, Any]:
    answer = interrupt({"question": "ok?"})
    return {"steps": [*state["steps"], f"ask:{answer}"]}


inner_ask = (
    StateGraph(Steps)
    .add_node("ask", _ask)
    .add_node("after", _step("after"))
    .add_edge(START, "ask")
    .add_edge("ask", "after")
    .compile()
)
ask_nested = (
    StateGraph(Steps)
    .add_node("first", _step("first"))
    .add_node("child", inner_ask)
    .add_edge(START, "first")
    .add_edge("first", "child")
)
deep = (
    StateGraph(Steps)
    .add_node("first", _step("first"))
    .add_node(
        "mid", StateGraph(Steps).add_node("inner", inner_ask).add_edge(START, "inner").compile()
    )
    .add_edge(START, "first")
    .add_edge("first", "mid")
)


# A graph that knows nothing of runstream's `RunContext`: its model is `runner.run_scope`'s
async def answer_with_the_workers_model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await chat_model().ainvoke(state["messages"])]}


with_public_model = (
    StateGraph(MessagesState)
    .add_node("answer", answer_with_the_workers_model)
    .add_edge(START, "answer")
    .add_edge("answer", END)
)


# A graph that grades its own answer (runner/evaluations.py): the reply, then a node that records
# two evaluations and lingers (`RUNSTREAM_TEST_LINGER_S`, none unless set) before its checkpoint,
# the window in which a killed worker hands the grading to an attempt that must not record again.
async def answer(state: MessagesState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    text = str(state["messages"][-1].content)
    reply = f"you said {len(text.split())} words"
    return {"messages": [AIMessage(content=reply, id=f"answer-{runtime.context.run_id}")]}


async def grade(state: MessagesState) -> dict[str, Any]:
    words = len(str(state["messages"][-2].content).split())
    await record_evaluation("reply", 0.75, key="reply", passed=True, detail={"words": words})
    await record_evaluation("brevity", min(1.0, words / 10), key="brevity", passed=words <= 10)
    get_stream_writer()({"graded": True})
    await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_LINGER_S", "0")))
    return {}


grades_itself = (
    StateGraph(MessagesState, context_schema=RunContext)
    .add_node("answer", answer)
    .add_node("grade", grade)
    .add_edge(START, "answer")
    .add_edge("answer", "grade")
    .add_edge("grade", END)
)


# A graph whose node calls the four functions of `runner.run_scope` and reports the run each saw
# (tests/test_run_scope.py): the one the worker runs, through the one scope it set.
async def see_the_run(state: MessagesState) -> dict[str, Any]:
    run = current_run()

    async def effect() -> dict[str, Any]:
        inside = current_run()  # the effect runs in the node's scope too
        return {"run_id": inside.run_id, "attempt": inside.attempt}

    seen_by_once = await once("seen", effect, name="seen")
    await record_evaluation(
        "scope", 1.0, key="seen", detail={"run_id": run.run_id, "attempt": run.attempt}
    )
    reply = await chat_model().ainvoke(state["messages"])
    get_stream_writer()(
        {
            "current_run": [run.run_id, run.thread_id, run.graph, run.attempt],
            "once": seen_by_once,
            "model": type(chat_model()).__name__,
        }
    )
    return {"messages": [reply]}


sees_its_run = (
    StateGraph(MessagesState)
    .add_node("see", see_the_run)
    .add_edge(START, "see")
    .add_edge("see", END)
)


# Graphs that write their owner's store through `runtime.store`, for its caps
# (tests/test_store_bounds.py). The message says what: "put 3 x" puts x0, x1, x2 under
# ("filled",), "delete 1 x" deletes x0; all in one batch, as a graph's `abatch` may hold many.
# `fills_store_sync` does it from a sync node, which LangGraph runs in a thread.
def _store_ops(state: MessagesState) -> list[PutOp]:
    verb, count, prefix = str(state["messages"][-1].content).split()
    value = (lambda i: {"i": i}) if verb == "put" else (lambda i: None)
    return [PutOp(("filled",), f"{prefix}{i}", value(i)) for i in range(int(count))]


async def fill(state: MessagesState, runtime: Runtime[Any]) -> dict[str, Any]:
    assert runtime.store is not None
    await runtime.store.abatch(_store_ops(state))
    return {"messages": [AIMessage(content="done")]}


def fill_sync(state: MessagesState, runtime: Runtime[Any]) -> dict[str, Any]:
    assert runtime.store is not None
    runtime.store.batch(_store_ops(state))
    return {"messages": [AIMessage(content="done")]}


fills_store = (
    StateGraph(MessagesState).add_node("fill", fill).add_edge(START, "fill").add_edge("fill", END)
)
fills_store_sync = (
    StateGraph(MessagesState)
    .add_node("fill", fill_sync)
    .add_edge(START, "fill")
    .add_edge("fill", END)
)


# A graph that tries every store operation under the namespace its message names (labels
# separated by dots), as a graph that wanted another owner's items would, and answers with what
# it saw (tests/test_one_door.py).
async def probe(state: MessagesState, runtime: Runtime[Any]) -> dict[str, Any]:
    assert runtime.store is not None
    namespace = tuple(str(state["messages"][-1].content).split("."))
    store = runtime.store
    seen = {
        "search": [item.key for item in await store.asearch(namespace)],
        "get": (item := await store.aget(namespace, "todo")) and item.value,
        "namespaces": [list(ns) for ns in await store.alist_namespaces(prefix=namespace[:1])],
    }
    await store.adelete(namespace, "todo")
    await store.aput(namespace, "planted", {"by": "probe"})
    return {"messages": [AIMessage(content=json.dumps(seen))]}


probes_store = (
    StateGraph(MessagesState)
    .add_node("probe", probe)
    .add_edge(START, "probe")
    .add_edge("probe", END)
)


async def _fail(state: MessagesState) -> dict[str, Any]:
    raise RuntimeError("this graph always fails")


# a graph whose every run fails (tests/test_langgraph_mcp.py)
always_fails = StateGraph(MessagesState).add_node("fail", _fail).add_edge(START, "fail").compile()


async def _linger(state: MessagesState) -> dict[str, Any]:
    await asyncio.sleep(60)
    return {"messages": [AIMessage(content="too late")]}


# a graph whose run goes on for a minute: one to cancel (tests/test_langgraph_a2a.py)
lingers = StateGraph(MessagesState).add_node("linger", _linger).add_edge(START, "linger").compile()


async def _ask_first(state: MessagesState) -> dict[str, Any]:
    answer = interrupt({"question": "sure?"})
    return {"messages": [AIMessage(content=f"you said {answer}")]}


# a graph that asks before it answers (tests/test_langgraph_a2a.py)
asks = StateGraph(MessagesState).add_node("ask", _ask_first).add_edge(START, "ask").compile()


# a graph that asks with a `response_schema` (LangGraph's interrupt items carry it), and one
# that asks without (tests/test_langgraph_interrupts.py)
ANSWER_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


def _ask_with_schema(state: Steps) -> dict[str, Any]:
    answer = interrupt({"question": "ok?"}, response_schema=ANSWER_SCHEMA)
    return {"steps": [*state["steps"], f"ask:{answer}"]}


def _ask_plain(state: Steps) -> dict[str, Any]:
    answer = interrupt({"question": "ok?"})
    return {"steps": [*state["steps"], f"ask:{answer}"]}


asks_with_schema = StateGraph(Steps).add_node("ask", _ask_with_schema).add_edge(START, "ask")
asks_steps = StateGraph(Steps).add_node("ask", _ask_plain).add_edge(START, "ask")


# a graph that writes down the `configurable` it was given, JSON values only, in its state and
# as a custom part; with `linger_first`, its first attempt lingers after the part (for a worker
# to be stopped under it) (tests/test_langgraph_configurable.py)
class Seen(TypedDict, total=False):
    seen: dict[str, Any]
    linger_first: bool


async def _see_configurable(state: Seen, config: RunnableConfig) -> dict[str, Any]:
    configurable = config.get("configurable") or {}
    json_values = (str, int, float, bool, list, dict, type(None))
    seen = {
        key: value
        for key, value in configurable.items()
        if not key.startswith("__pregel") and isinstance(value, json_values)
    }
    attempt = current_run().attempt
    get_stream_writer()({"attempt": attempt, "seen": seen})
    if state.get("linger_first") and attempt == 1:
        await asyncio.sleep(60)
    return {"seen": seen}


shows_its_configurable = StateGraph(Seen).add_node("see", _see_configurable).add_edge(START, "see")
