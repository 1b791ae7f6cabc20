"""A graph whose state has no messages (tests/test_graph_input.py): it counts a topic's runs."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import StreamWriter
from typing_extensions import TypedDict  # pydantic reads its schema on Python < 3.12


class Counter(TypedDict):
    topic: str
    count: int


async def bump(state: Counter, writer: StreamWriter) -> dict[str, Any]:
    count = state.get("count", 0) + 1
    writer({"counted": state["topic"]})
    return {"count": count}


graph = StateGraph(Counter).add_node("bump", bump)
graph.add_edge(START, "bump").add_edge("bump", END)
graph = graph.compile()
