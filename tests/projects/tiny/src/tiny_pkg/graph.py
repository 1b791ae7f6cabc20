"""A `StateGraph` builder, not compiled: runstream compiles it with its checkpointer."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph


async def answer(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="from the package")]}


builder = StateGraph(MessagesState).add_node("answer", answer)
builder.add_edge(START, "answer").add_edge("answer", END)
