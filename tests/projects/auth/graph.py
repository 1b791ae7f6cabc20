"""A graph that tells who ran it: what LangGraph's server hands a graph about the user."""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime


class State(TypedDict, total=False):
    question: str
    seen: dict[str, Any]


def look(state: State, config: RunnableConfig, runtime: Runtime[Any]) -> State:
    configurable = config["configurable"]
    user = configurable["langgraph_auth_user"]
    server_user = runtime.server_info.user if runtime.server_info else None
    return {
        "seen": {
            "user_id": configurable["langgraph_auth_user_id"],
            "identity": user.identity,
            "display_name": user.display_name,
            "team": user.get("team"),
            "permissions": configurable["langgraph_auth_permissions"],
            "server_info_user": server_user.identity if server_user else None,
        }
    }


graph = StateGraph(State).add_node("look", look).add_edge(START, "look").add_edge("look", END)
