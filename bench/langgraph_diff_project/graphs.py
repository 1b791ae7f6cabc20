"""The graphs `bench.langgraph_diff` runs on both servers: steps in a row, a subgraph, and an
`interrupt()`; no model, so both servers' answers depend on the graph alone."""

from __future__ import annotations

from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
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
