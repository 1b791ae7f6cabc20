"""Graphs that report the runtime they see (tests/test_graph_runtime.py): their context, built
into a dataclass, a TypedDict or a Pydantic `context_schema`, the `configurable` they are given,
and a store item they write for the run's owner."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store, get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from pydantic import BaseModel

from runner.run_scope import once

SEEN_KEYS = ("thread_id", "run_id", "assistant_id", "graph_id", "team", "langgraph_auth_user_id")


@dataclasses.dataclass
class Dated:
    user_name: str
    tone: str = "plain"
    limit: int = 3


class Typed(TypedDict, total=False):
    user_name: str


class Modelled(BaseModel):
    level: int = 1


def _context_json(context: Any) -> Any:
    if dataclasses.is_dataclass(context) and not isinstance(context, type):
        return {"type": "dataclass", **dataclasses.asdict(context)}
    if isinstance(context, BaseModel):
        return {"type": "pydantic", **context.model_dump()}
    # an empty dict reaches a node as None: LangGraph's `Runtime.merge` keeps the parent's
    return {"type": type(context).__name__, **(context or {})}


async def report(state: MessagesState, config: RunnableConfig, runtime: Runtime[Any]) -> Any:
    """Streams what the node sees, and writes a note to the store for the run's owner."""
    configurable = config.get("configurable") or {}
    seen = {key: configurable.get(key) for key in SEEN_KEYS}
    info = runtime.server_info
    get_stream_writer()(
        {
            "context": _context_json(runtime.context),
            "configurable": seen,
            "server_info": [info.assistant_id, info.graph_id] if info else None,
            "same_store": get_store() is runtime.store,
        }
    )
    note = str(state["messages"][-1].content)
    await runtime.store.aput(("notes",), configurable["thread_id"], {"note": note})
    return {"messages": [AIMessage(content=json.dumps(_context_json(runtime.context)))]}


def _graph(schema: type[Any]) -> Any:
    builder = StateGraph(MessagesState, context_schema=schema).add_node("report", report)
    return builder.add_edge(START, "report").add_edge("report", END).compile()


dated = _graph(Dated)
typed = _graph(Typed)
modelled = _graph(Modelled)


async def send_once(state: MessagesState) -> Any:
    """A user tool's effect (a line appended to a file) through `once`, then a linger before
    the checkpoint: a worker killed then hands the step to an attempt that must not send again."""

    def append() -> int:
        path = Path(os.environ["RUNTIME_EFFECTS_FILE"])
        with path.open("a") as sent:
            sent.write("sent\n")
        return len(path.read_text().splitlines())

    async def send() -> dict[str, Any]:
        return {"sent": await asyncio.to_thread(append)}

    result = await once("send-1", send, name="send")
    get_stream_writer()({"result": result})
    await asyncio.sleep(float(os.environ.get("RUNSTREAM_TEST_LINGER_S", "3")))
    return {"messages": [AIMessage(content=json.dumps(result))]}


sends_once = (
    StateGraph(MessagesState)
    .add_node("send", send_once)
    .add_edge(START, "send")
    .add_edge("send", END)
    .compile()
)
