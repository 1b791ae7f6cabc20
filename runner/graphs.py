"""The built-in graphs, `chat` and `approval`: graph code, loaded by `GraphRegistry`
(runner/graph_registry.py) under the names `BUILTIN_GRAPHS` gives them, as any other graph is.

Their nodes use the run-scoped API any graph's code does (`runner.run_scope`): the worker's chat
model (`chat_model`, so a graph never knows whether it talks to OpenAI or the fake), and `once`
for `save_note`'s write. Their `context_schema` is `RunContext`, so no run's context reaches
them. Neither graph reads `configurable` itself: `CONFIGURABLE_KEYS` says so, as any graph's
module may (`project.configurable`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.tools import tool
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt
from psycopg import DatabaseError
from pydantic import AfterValidator

from project.graph_context import RunContext
from stream_store.checkpoints import FENCE_REFUSED
from stream_store.errors import Fenced
from wire.approvals import (
    ActionRequest,
    Decision,
    DecisionType,
    EditDecision,
    HITLRequest,
    RejectDecision,
    ReviewConfig,
    read_answer,
    request_value,
)

from .run_scope import chat_model, current_run, once
from .tools import Execution

__all__ = ["CONFIGURABLE_KEYS", "approval", "chat", "run_save_note"]


# -- chat ---------------------------------------------------------------------------------


async def respond(state: MessagesState) -> dict[str, Any]:
    """One model turn over the whole conversation."""
    reply = await chat_model().ainvoke(state["messages"])
    return {"messages": [reply]}


chat = (
    StateGraph(MessagesState, context_schema=RunContext)
    .add_node("respond", respond)
    .add_edge(START, "respond")
    .add_edge("respond", END)
)


# -- approval -------------------------------------------------------------------------------


@tool
def save_note(content: str) -> str:
    """Save a note for the user (a write: it runs only after a person approved it)."""
    raise NotImplementedError("executed by run_save_note; this is the schema")


async def run_save_note(call: ToolCall) -> Execution:
    """The `save_note` effect: one row in `runstream_notes`, once per tool call (`once`, keyed
    by the call's id; `replayed`: an earlier call ran it).

    The insert is made idempotent by that key, as `once` asks of an effect: an attempt that
    died between its insert and the ledger's record left the row, which the next attempt's
    insert finds; one that lost the run (`runstream_fence`) inserts nothing and stops.
    """
    run = current_run()
    content = str(call["args"].get("content", ""))
    call_id = call["id"] or ""
    ran = False

    async def insert() -> str:
        nonlocal ran
        ran = True
        try:
            async with run.ledger.pool.connection() as conn, conn.transaction():
                await conn.execute("SELECT runstream_fence(%s, %s)", (run.run_id, run.attempt))
                await conn.execute(
                    "INSERT INTO runstream_notes (thread_id, run_id, tool_call_id, content)"
                    " SELECT %s, %s, %s, %s WHERE NOT EXISTS (SELECT 1 FROM runstream_notes"
                    " WHERE run_id = %s AND tool_call_id = %s)",
                    (run.thread_id, run.run_id, call_id, content, run.run_id, call_id),
                )
        except DatabaseError as exc:
            if exc.sqlstate == FENCE_REFUSED:
                raise Fenced(f"run {run.run_id}: attempt {run.attempt} lost the run") from exc
            raise
        return f"saved note ({len(content)} characters)"

    result = await once(call_id, insert, name="save_note")
    return Execution(result=result, replayed=not ran)


async def propose(state: MessagesState) -> dict[str, Any]:
    """The model answers, or proposes a `save_note` call."""
    model = chat_model().bind_tools([save_note])
    reply = await model.ainvoke(state["messages"])
    return {"messages": [reply]}


# What a reviewer may do with a proposed note. No "respond": a note is not a question a person
# could answer in the tool's place.
APPROVAL_DECISIONS: list[DecisionType] = ["approve", "edit", "reject"]


def review_request(calls: list[ToolCall]) -> HITLRequest:
    """The interrupt's value for one model turn: every proposed call, as agent-chat-ui reads it."""
    return HITLRequest(
        action_requests=[
            ActionRequest(name=call["name"], args=call["args"], description=f"Run {call['name']}?")
            for call in calls
        ],
        review_configs=[
            ReviewConfig(action_name=name, allowed_decisions=APPROVAL_DECISIONS)
            for name in dict.fromkeys(call["name"] for call in calls)
        ],
    )


def _rejected(call: ToolCall, decision: RejectDecision) -> ToolMessage:
    """What the model reads for a rejected call (worded as LangChain's middleware words it)."""
    if decision.message:
        content = (
            f"User rejected the tool call for `{call['name']}` with reason: {decision.message}"
        )
    else:
        content = (
            f"User rejected the tool call for `{call['name']}` with id {call['id']}. The tool"
            " was not executed. Do not retry this tool call unless the user explicitly requests it."
        )
    return ToolMessage(
        content=content, name=call["name"], tool_call_id=call["id"] or "", status="error"
    )


def _answer_schema(request: HITLRequest) -> Any:
    """The answer to `request` as `interrupt()` validates it: the decisions it makes."""

    def review_answer(value: Any) -> list[Decision]:
        return read_answer(request, value)

    return Annotated[Any, AfterValidator(review_answer)]


async def confirm_and_run(state: MessagesState) -> dict[str, Any]:
    """Ask a person about the proposed calls at once; run the approved or edited ones.

    `interrupt()` pauses the run here; code above it re-runs on resume, so nothing with a side
    effect may come before it. An edited call runs with the reviewer's arguments under the
    model's tool-call id, so the ledger still runs it at most once.
    """
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    request = review_request(last.tool_calls)
    # The answer is read as `interrupt()` takes it (`response_schema`): one it cannot read fails
    # the run and is not kept, so the question still waits for a good one.
    value = request_value(request)
    decisions: list[Decision] = interrupt(value, response_schema=_answer_schema(request))
    results: list[ToolMessage] = []
    writer = get_stream_writer()
    for call, decision in zip(last.tool_calls, decisions, strict=True):
        if isinstance(decision, RejectDecision):
            results.append(_rejected(call, decision))
            writer({"tool": call["name"], "tool_call_id": call["id"], "executed": False})
            continue
        ran = call
        if isinstance(decision, EditDecision):
            ran = {**call, "args": decision.edited_action.args}
        execution = await run_save_note(ran)
        output = str(execution.result)
        if isinstance(decision, EditDecision):
            edited = json.dumps(decision.edited_action.args, ensure_ascii=False)
            output = f"{output}; a reviewer edited the call, it ran with {edited}"
        writer(
            {
                "tool": call["name"],
                "tool_call_id": call["id"],
                "executed": True,
                "replayed": execution.replayed,
            }
        )
        results.append(
            ToolMessage(content=output, name=call["name"], tool_call_id=call["id"] or "")
        )
    return {"messages": results}


def _after_propose(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "confirm_and_run" if isinstance(last, AIMessage) and last.tool_calls else END


approval = (
    StateGraph(MessagesState, context_schema=RunContext)
    .add_node("propose", propose)
    .add_node("confirm_and_run", confirm_and_run)
    .add_edge(START, "propose")
    .add_conditional_edges("propose", _after_propose, ["confirm_and_run", END])
    .add_edge("confirm_and_run", "propose")
)

# Neither built-in graph reads `configurable` itself: each takes the model factory's keys only.
CONFIGURABLE_KEYS: dict[str, frozenset[str]] = {"chat": frozenset(), "approval": frozenset()}
