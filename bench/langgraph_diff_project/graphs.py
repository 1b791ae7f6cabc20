"""The graphs `bench.langgraph_diff` runs on both servers: steps in a row, a subgraph, an
`interrupt()`, one that shows its `configurable`, and for `/mcp` and `/a2a` a reply, a failure,
a run long enough to cancel, a graph without messages and one that asks before it answers; no
model, so both servers' answers depend on the graph alone."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


class Steps(TypedDict):
    steps: list[str]


def _step(name: str) -> Any:
    def step(state: Steps) -> dict[str, Any]:
        return {"steps": [*state.get("steps", []), name]}

    step.__name__ = name
    return step


def _ask(state: Steps) -> dict[str, Any]:
    answer = interrupt({"question": "ok?"})
    return {"steps": [*state["steps"], f"ask:{answer}"]}


steps = (
    StateGraph(Steps)
    .add_node("a", _step("a"))
    .add_node("b", _step("b"))
    .add_edge(START, "a")
    .add_edge("a", "b")
    .add_edge("b", END)
    .compile()
)

_inner = (
    StateGraph(Steps)
    .add_node("inner_a", _step("inner_a"))
    .add_edge(START, "inner_a")
    .add_edge("inner_a", END)
    .compile()
)
nested = (
    StateGraph(Steps)
    .add_node("first", _step("first"))
    .add_node("child", _inner)
    .add_edge(START, "first")
    .add_edge("first", "child")
    .add_edge("child", END)
    .compile()
)

asks = (
    StateGraph(Steps)
    .add_node("first", _step("first"))
    .add_node("ask", _ask)
    .add_edge(START, "first")
    .add_edge("first", "ask")
    .add_edge("ask", END)
    .compile()
)


class Seen(TypedDict, total=False):
    seen: dict[str, Any]


def _see(state: Seen, config: RunnableConfig) -> dict[str, Any]:
    shown = {k: v for k, v in config["configurable"].items() if not k.startswith("__pregel")}
    return {"seen": {k: v for k, v in shown.items() if _is_json(v)}}


def _is_json(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, list, dict))


configured = StateGraph(Seen).add_node("see", _see).add_edge(START, "see").compile()


def _respond(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def _boom(state: MessagesState) -> dict[str, Any]:
    raise ValueError("it broke")


async def _slow_respond(state: MessagesState) -> dict[str, Any]:
    await asyncio.sleep(30)
    return {"messages": [AIMessage(content="late")]}


class Plain(TypedDict):
    x: int


def _inc(state: Plain) -> dict[str, Any]:
    return {"x": state["x"] + 1}


def _ask_in_messages(state: MessagesState) -> dict[str, Any]:
    answer = interrupt({"question": "sure?"})
    return {"messages": [AIMessage(content=f"you said {answer}")]}


echo = StateGraph(MessagesState).add_node("respond", _respond).add_edge(START, "respond").compile()
fails = StateGraph(MessagesState).add_node("boom", _boom).add_edge(START, "boom").compile()
slow = (
    StateGraph(MessagesState)
    .add_node("respond", _slow_respond)
    .add_edge(START, "respond")
    .compile()
)
plain = StateGraph(Plain).add_node("inc", _inc).add_edge(START, "inc").compile()
asks_in_messages = (
    StateGraph(MessagesState).add_node("ask", _ask_in_messages).add_edge(START, "ask").compile()
)
