"""Long-term memory on the run owner's store (`runtime.store`): "remember <fact>" keeps the
fact, anything else is answered with the facts closest to it in meaning, closest first."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def remember_or_recall(state: State, runtime: Runtime) -> dict[str, list[AnyMessage]]:
    store = runtime.store
    assert store is not None
    text = str(state["messages"][-1].content)
    if text.startswith("remember "):
        fact = text.removeprefix("remember ")
        key = uuid.uuid5(uuid.NAMESPACE_URL, fact).hex
        await store.aput(("memories",), key, {"text": fact, "said": text})
        return {"messages": [AIMessage("noted")]}
    found = await store.asearch(("memories",), query=text, limit=3)
    return {"messages": [AIMessage(" | ".join(item.value["text"] for item in found))]}


async def wait_a_little(state: State) -> dict[str, list[AnyMessage]]:
    await asyncio.sleep(float(str(state["messages"][-1].content)))
    return {"messages": [AIMessage("waited")]}


graph = StateGraph(State).add_node(remember_or_recall).add_edge(START, "remember_or_recall")
waits = StateGraph(State).add_node(wait_a_little).add_edge(START, "wait_a_little")
