"""A chat agent with long-term memory across threads, on LangGraph's store.

Each turn, the facts kept about the user that are closest in meaning to their message
(`runtime.store.asearch(query=...)`, the project's `store.index`) go into the system prompt;
the model keeps a new fact with the `remember` tool. The store is the caller's own: another
API key's facts are never found. The model is `ChatOpenAI` (`OPENAI_API_KEY`, and
`OPENAI_BASE_URL` for any OpenAI-compatible server; `MEMORY_AGENT_MODEL` picks the model).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.runtime import Runtime

NAMESPACE = ("memories",)
RECALLED = 5


@tool
async def remember(fact: str) -> str:
    """Keep a fact the user told you about themselves, for later conversations."""
    key = uuid.uuid5(uuid.NAMESPACE_URL, fact).hex  # the same fact twice is kept once
    await get_store().aput(NAMESPACE, key, {"text": fact})
    return f"kept: {fact}"


def _last_user_text(messages: list[AnyMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


async def answer(state: MessagesState, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None  # the server gives every run its owner's store
    query = _last_user_text(state["messages"])
    found = await runtime.store.asearch(NAMESPACE, query=query, limit=RECALLED) if query else []
    recalled = "\n".join(f"- {item.value['text']}" for item in found) or "- (nothing yet)"
    system = SystemMessage(
        "You are a helpful assistant with a long-term memory. When the user tells you"
        " something about themselves worth keeping, call `remember` with it.\n"
        f"What you remember about the user, most relevant first:\n{recalled}"
    )
    model = ChatOpenAI(model=os.environ.get("MEMORY_AGENT_MODEL", "gpt-4o-mini"), temperature=0)
    reply = await model.bind_tools([remember]).ainvoke([system, *state["messages"]])
    return {"messages": [reply]}


graph = (
    StateGraph(MessagesState)
    .add_node(answer)
    .add_node("tools", ToolNode([remember]))
    .add_edge(START, "answer")
    .add_conditional_edges("answer", tools_condition)
    .add_edge("tools", "answer")
    .compile()
)
