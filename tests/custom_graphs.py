"""Graphs registered through RUNSTREAM_GRAPHS in tests: a builder and a compiled graph."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph


async def count_words(state: MessagesState) -> dict[str, Any]:
    text = str(state["messages"][-1].content)
    writer = get_stream_writer()
    for index, word in enumerate(text.split()):
        writer({"word": word, "index": index})
    return {"messages": [AIMessage(content=f"{len(text.split())} words", id="counted")]}


builder = StateGraph(MessagesState).add_node("count", count_words)
builder.add_edge(START, "count").add_edge("count", END)
compiled = builder.compile()
