"""The graph `bench.langgraph_ui_reload` serves on both servers: one node answering with a
fake chat model that streams its answer a character every 100 ms (about 6 s), so a page can be
reloaded while the answer streams. No network, no key."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.graph import END, START, MessagesState, StateGraph

ANSWER = "This answer streams slowly, one character every tenth of a second."
CHARACTER_DELAY_S = 0.1


async def respond(state: MessagesState) -> dict[str, Any]:
    model = FakeListChatModel(responses=[ANSWER], sleep=CHARACTER_DELAY_S)
    return {"messages": [await model.ainvoke(state["messages"])]}


slow_chat = (
    StateGraph(MessagesState)
    .add_node("respond", respond)
    .add_edge(START, "respond")
    .add_edge("respond", END)
    .compile()
)
