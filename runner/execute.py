"""The job: execute one run's graph and write its events, start to terminal (or interrupt).

Order of writes at every status change: Postgres first (the system of record, by a conditional
update that only the current attempt can make), then the event. A viewer that sees `done` can
therefore always read the final status back from `GET /v1/runs/{id}`.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import structlog
from langchain_core.messages import AIMessage, BaseMessage, convert_to_messages
from langgraph.types import Command, StreamMode

from stream_store.events import (
    DoneData,
    ErrorData,
    MessageData,
    PendingData,
    RunStatusData,
    encode_data,
)
from stream_store.records import RunRecord

from .context import WorkerContext
from .graphs import RunContext
from .models import make_chat_model
from .translate import StreamTranslator, to_wire_message

__all__ = ["execute_run"]

logger = structlog.get_logger()

STREAM_MODES: list[StreamMode] = ["messages", "updates", "custom"]


class _Writer:
    """Appends events for one attempt of one run."""

    def __init__(self, ctx: WorkerContext, run: RunRecord) -> None:
        self.events = ctx["events"]
        self.run = run

    async def emit(self, event: str, data: Any, *, status: str | None = None) -> str:
        return await self.events.append(
            self.run.run_id, self.run.attempt, event, encode_data(data), status=status
        )

    async def status(self, status: str) -> str:
        data = RunStatusData(status=status, attempt=self.run.attempt)  # type: ignore[arg-type]
        return await self.emit("run", data, status=status)


def _input_messages(run: RunRecord) -> list[BaseMessage]:
    """The run's input messages, each given an id so its `message` event can name it."""
    messages = convert_to_messages(run.input.get("messages", []))
    for message in messages:
        if message.id is None:
            message.id = str(uuid.uuid4())
    return messages


async def execute_run(ctx: WorkerContext, run_id: str) -> None:
    """Claim the run, stream its graph into its event log, and record the outcome."""
    records = ctx["records"]
    run = await records.claim_run(run_id)
    if run is None:
        logger.info("run not claimable, skipping", run_id=run_id)
        return
    structlog.contextvars.bind_contextvars(run_id=run.run_id, thread_id=run.thread_id)
    task = asyncio.current_task()
    assert task is not None
    ctx["running"][run_id] = task
    writer = _Writer(ctx, run)
    try:
        if await ctx["events"].cancel_requested(run_id):
            raise asyncio.CancelledError
        await writer.status("running")
        logger.info("run started", graph=run.graph, attempt=run.attempt)
        await _stream_graph(ctx, run, writer)
    except asyncio.CancelledError:
        if run_id not in ctx["cancelling"] and not await ctx["events"].cancel_requested(run_id):
            raise  # the worker is shutting down, not a user's cancel
        task.uncancel()
        await _finish(ctx, run, writer, "cancelled")
    except Exception as exc:
        logger.exception("run failed")
        message = f"{type(exc).__name__}: {exc}"
        secret = ctx["settings"].openai_api_key
        if secret:  # an upstream may echo the key back in its error text
            message = message.replace(secret, "***")
        error = {"code": "graph_error", "message": message[:1000]}
        await _finish(ctx, run, writer, "failed", error=error)
    finally:
        ctx["running"].pop(run_id, None)
        ctx["cancelling"].discard(run_id)
        structlog.contextvars.unbind_contextvars("run_id", "thread_id")
    await ctx["queue"].dispatch_next(run.thread_id)


async def _stream_graph(ctx: WorkerContext, run: RunRecord, writer: _Writer) -> None:
    graph = ctx["graphs"].get(run.graph, ctx["checkpointer"])
    configurable = dict(run.config.get("configurable") or {})
    config: dict[str, Any] = {
        "configurable": {**configurable, "thread_id": run.thread_id},
        "metadata": {"run_id": run.run_id},
    }
    context = RunContext(
        run_id=run.run_id,
        thread_id=run.thread_id,
        chat_model=make_chat_model(ctx["settings"], configurable),
    )
    graph_input: Any
    if run.resume is not None:
        graph_input = Command(resume=run.resume.get("value"))
    else:
        messages = _input_messages(run)
        for message in messages:
            await writer.emit("message", MessageData(message=to_wire_message(message)))
        graph_input = {"messages": messages}

    translator = StreamTranslator()
    stream = graph.astream(  # type: ignore[call-overload]
        graph_input, config, context=context, stream_mode=STREAM_MODES, durability="sync"
    )
    async for mode, chunk in stream:
        for event, data in translator.translate(mode, chunk):
            await writer.emit(event, data)

    state = await graph.aget_state(config)  # type: ignore[arg-type]
    if state.interrupts:
        value = state.interrupts[0].value
        if await ctx["records"].interrupt_run(run.run_id, run.attempt, value) is not None:
            await writer.emit("pending", PendingData(interrupt=value))
            await writer.status("interrupted")
            logger.info("run interrupted")
        return
    messages = state.values.get("messages") or []
    last = messages[-1] if messages else None
    output = to_wire_message(last) if isinstance(last, AIMessage) else None
    await _finish(ctx, run, writer, "succeeded", output=output)


async def _finish(
    ctx: WorkerContext,
    run: RunRecord,
    writer: _Writer,
    status: str,
    *,
    output: Any = None,
    error: dict[str, str] | None = None,
) -> None:
    output_dict = msgspec.to_builtins(output) if output is not None else None
    done = await ctx["records"].finish_run(
        run.run_id, run.attempt, status, output=output_dict, error=error
    )
    if done is None:
        logger.warning("run changed hands before it finished; writing nothing", status=status)
        return
    await writer.status(status)
    if status == "failed":
        assert error is not None
        last_id = await writer.emit("error", ErrorData(**error))
    else:
        last_id = await writer.emit("done", DoneData(status=status, output=output))  # type: ignore[arg-type]
    await ctx["records"].set_last_event_id(run.run_id, last_id)
    logger.info("run finished", status=status)
