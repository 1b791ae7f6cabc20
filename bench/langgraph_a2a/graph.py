"""The graphs `bench/langgraph_a2a/differential.py` drives on both servers: a reply, a failure,
a run long enough to cancel, a graph without messages, and one that asks before it answers."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


def respond(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def boom(state: MessagesState) -> dict[str, Any]:
    raise ValueError("it broke")


async def slow_respond(state: MessagesState) -> dict[str, Any]:
    await asyncio.sleep(30)
    return {"messages": [AIMessage(content="late")]}


class Plain(TypedDict):
    x: int


def inc(state: Plain) -> dict[str, Any]:
    return {"x": state["x"] + 1}


def ask(state: MessagesState) -> dict[str, Any]:
    answer = interrupt({"question": "sure?"})
    return {"messages": [AIMessage(content=f"you said {answer}")]}


echo = StateGraph(MessagesState).add_node("respond", respond).add_edge(START, "respond").compile()
fails = StateGraph(MessagesState).add_node("boom", boom).add_edge(START, "boom").compile()
slow = (
    StateGraph(MessagesState).add_node("respond", slow_respond).add_edge(START, "respond").compile()
)
plain = StateGraph(Plain).add_node("inc", inc).add_edge(START, "inc").compile()
asks = StateGraph(MessagesState).add_node("ask", ask).add_edge(START, "ask").compile()
