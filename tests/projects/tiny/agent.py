"""The tiny project's graphs: a compiled graph, and two factories (tests/test_project.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from helpers import reply_to
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph_sdk.runtime import ServerRuntime


def _replying(text: str) -> StateGraph[Any, Any, Any, Any]:
    async def reply(state: MessagesState) -> dict[str, Any]:
        heard = reply_to(str(state["messages"][-1].content))
        return {"messages": [AIMessage(content=f"{text} | {heard}")]}

    return (
        StateGraph(MessagesState)
        .add_node("reply", reply)
        .add_edge(START, "reply")
        .add_edge("reply", END)
    )


# Read when the node runs: the env reached the graph's process.
async def greet(state: MessagesState) -> dict[str, Any]:
    greeting = os.environ.get("TINY_GREETING", "no greeting")
    return {"messages": [AIMessage(content=greeting)]}


graph = StateGraph(MessagesState).add_node("greet", greet)
graph.add_edge(START, "greet").add_edge("greet", END)
graph = graph.compile()

builds = 0  # how many times make_graph ran in this process


def make_graph(config: RunnableConfig) -> StateGraph[Any, Any, Any, Any]:
    """A factory: LangGraph calls it with the run's config."""
    global builds
    builds += 1
    thread_id = config.get("configurable", {}).get("thread_id", "none")
    return _replying(f"build {builds} for thread {thread_id}")


@contextlib.asynccontextmanager
async def make_graph_in_context(runtime: ServerRuntime) -> AsyncIterator[Any]:
    """A factory returning an async context manager, taking LangGraph's ServerRuntime."""
    yield _replying(f"built for {runtime.access_context}").compile()
