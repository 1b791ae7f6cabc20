"""The agent: a model node that may call tools, and a `ToolNode` that runs them, in a loop
until the model answers without a tool call (`tools_condition`).

The model is `ChatOpenAI` with streaming on, so its tokens reach clients as they come
(`stream_mode="messages-tuple"`); it reads `OPENAI_API_KEY` and `OPENAI_BASE_URL` from the
environment (the project's `.env`), and its name from `TOOL_AGENT_MODEL`.
"""

from __future__ import annotations

import os

from langchain_core.messages import SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from tool_agent.tools import TOOLS

SYSTEM = "You are a helpful assistant. Use the tools when they help; say what they returned."


async def call_model(state: MessagesState) -> dict[str, list[object]]:
    """One model turn over the conversation so far, tools bound."""
    model = ChatOpenAI(
        model=os.environ.get("TOOL_AGENT_MODEL", "gpt-4o-mini"), streaming=True
    ).bind_tools(TOOLS)
    reply = await model.ainvoke([SystemMessage(SYSTEM), *state["messages"]])
    return {"messages": [reply]}


builder = StateGraph(MessagesState)
builder.add_node("agent", call_model)
builder.add_node("tools", ToolNode(TOOLS))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")

graph = builder.compile()
