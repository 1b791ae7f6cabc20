"""The desk: read the amount asked for, ask a person when it is above the assistant's limit
(`interrupt`), pay it once (`runner.run_scope.once`), and answer with the model.

`make_graph` is a graph factory, as LangGraph's server calls one: once per run, with the run's
config, so it can shape the graph by who asks (here it only names the graph for the user).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from refund_desk.context import Context
from runner.run_scope import once

AMOUNT = re.compile(r"(\d+(?:\.\d+)?)")


class Desk(MessagesState):
    amount: float | None
    approved: bool | None


def read_amount(state: Desk) -> dict[str, Any]:
    found = AMOUNT.search(str(state["messages"][-1].content))
    return {"amount": float(found.group(1)) if found else None, "approved": None}


def approve(state: Desk, runtime: Runtime[Context]) -> dict[str, Any]:
    """Below the limit: approved. Above it: a person decides (the run waits, `pending`)."""
    amount = state["amount"]
    if amount is None:
        return {"approved": False}
    if amount <= runtime.context.refund_limit:
        return {"approved": True}
    answer = interrupt(
        {
            "question": f"Refund {amount:.2f} (above {runtime.context.refund_limit:.2f})?",
            "options": ["approve", "reject"],
        }
    )
    return {"approved": str(answer).strip().lower() in ("approve", "yes", "y")}


async def pay(state: Desk, config: RunnableConfig) -> dict[str, Any]:
    """Pay an approved refund, at most once per run whatever the worker crashes."""
    if not state["approved"]:
        return {}
    thread_id = config["configurable"]["thread_id"]
    amount = state["amount"]

    def append_line() -> None:
        with open(os.environ["REFUND_LEDGER"], "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"thread_id": thread_id, "amount": amount}) + "\n")

    async def write_to_ledger() -> str:
        await asyncio.to_thread(append_line)
        return "paid"

    await once(f"refund:{thread_id}", write_to_ledger, name="refund")
    return {}


async def answer(state: Desk, runtime: Runtime[Context]) -> dict[str, Any]:
    if state["amount"] is None:
        outcome = "no amount was given"
    elif state["approved"]:
        outcome = f"a refund of {state['amount']:.2f} was paid"
    else:
        outcome = f"the refund of {state['amount']:.2f} was declined"
    model = ChatOpenAI(model=runtime.context.model, streaming=True)
    system = SystemMessage(f"You answer for {runtime.context.shop_name}: {outcome}.")
    reply = await model.ainvoke([system, *state["messages"]])
    return {"messages": [AIMessage(content=f"{outcome.capitalize()}. {reply.content}")]}


def make_graph(config: RunnableConfig) -> CompiledStateGraph:
    user = config.get("configurable", {}).get("langgraph_auth_user_id", "anyone")
    builder = StateGraph(Desk, context_schema=Context)
    builder.add_node(read_amount)
    builder.add_node(approve)
    builder.add_node(pay)
    builder.add_node(answer)
    builder.add_edge(START, "read_amount")
    builder.add_edge("read_amount", "approve")
    builder.add_edge("approve", "pay")
    builder.add_edge("pay", "answer")
    return builder.compile(name=f"refund desk for {user}")
