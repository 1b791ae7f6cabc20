"""The job: execute one attempt of a run and write its events, to terminal or interrupt.

An attempt holds a lease on the run (renewed by a heartbeat) and every write it makes is
fenced by its attempt number: event appends by the Redis script, status changes by
conditional UPDATEs, checkpoints by `FencedPostgresSaver`. An attempt that loses its lease
stops without writing anything more; the reaper gives the run to the next attempt.

Order of writes at every status change: Postgres first (the system of record), then the event.
A viewer that sees `done` can therefore always read the final status back.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import structlog
from langchain_core.messages import AIMessage
from langgraph.pregel import Pregel
from langgraph.types import Command, Durability, Send, StreamMode
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer
from redis.exceptions import RedisError

from stream_store.checkpoints import attempt_fence
from stream_store.errors import Fenced, StoreUnavailable, StreamGone, StreamTooLarge
from stream_store.events import MessageData, RunStatus, ValuesData, WireMessage, encode_data
from stream_store.log import EventLog
from stream_store.messages import input_messages, state_to_json, to_wire_message
from stream_store.metrics import WorkerMetrics
from stream_store.records import RunRecord
from stream_store.services import Services
from stream_store.tracing import (
    context_of,
    record_outcome,
    run_attributes,
    span_context_of,
    traceparent_of,
)

from .attempt_spans import AppendSpan, graph_callbacks
from .graphs import RunContext
from .models import make_chat_model
from .recovery import hand_back, retry_planner
from .state import Attempt, AttemptPhase, WorkerState
from .translate import StreamTranslator

__all__ = ["execute_run"]

logger = structlog.get_logger()

STREAM_MODES: list[StreamMode] = ["messages", "updates", "custom"]  # + "values" if asked

# Checkpoints are written while the next step runs, not before it, which keeps two Postgres
# writes off the way to the first token. The stream ends only after every write has landed, so
# the outcome recorded after it always has its checkpoint; a crash mid-run may lose the latest
# step's checkpoint, and the retry runs that step again (write tools stay at most once by the
# ledger).
DURABILITY: Durability = "async"

MAX_BATCH_EVENTS = 512  # events per append_batch call
MAX_PENDING_EVENTS = 4096  # events a run may have waiting for Redis before the graph waits

# Failures of the services rather than of the graph: the attempt is abandoned, its lease runs
# out, and the reaper gives the run to a new attempt.
INFRASTRUCTURE_ERRORS = (StoreUnavailable, RedisError, psycopg.OperationalError)


class _Writer:
    """Appends events for one attempt of one run.

    Plain events (tokens, messages, custom) are batched without waiting: the first goes out at
    once, and those the graph produces while a batch is in flight go together in the next one.
    A fast model then costs one Redis round trip per batch rather than per token, and a slow one
    no added delay. Before a status change the attempt waits for every earlier event (`drain`),
    and a write's failure (`Fenced`, `StreamGone`, `StreamTooLarge`, a Redis error) is raised
    once, by the next `emit` or `drain`; nothing emitted after it is written.
    """

    def __init__(
        self, events: EventLog, run: RunRecord, metrics: WorkerMetrics, tracer: Tracer
    ) -> None:
        self.events = events
        self.run = run
        self.appends = AppendSpan(tracer)  # one span of all the attempt's batches (traces on)
        self.metrics = metrics  # the attempt's figures: bytes, first token, outcome
        # submit -> first token is timed for a run's first attempt, not for resumes or retries
        self._first_token_due = run.attempt == 1 and run.resume is None
        self._pending: list[tuple[str, bytes]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def emit(self, event: str, data: Any) -> None:
        self._raise_failure()
        self._pending.append((event, encode_data(data)))
        if self._flushing is None:
            self._flushing = asyncio.create_task(self._flush())
        elif len(self._pending) >= MAX_PENDING_EVENTS:
            await self.drain()  # Redis is slower than the model: wait rather than pile up

    async def drain(self) -> None:
        """Wait until every event emitted so far is written."""
        if self._flushing is not None:
            # Not cancelled with the caller: a cancelled run still writes what it emitted
            # before its outcome. `wait` does not raise the flush's failure: `_raise_failure`
            # does, once, so the outcome's own `drain` after it passes.
            await asyncio.wait([self._flushing])
        self._raise_failure()

    def abandon(self) -> None:
        """The attempt is over: stop writing (anything still unwritten is fenced out anyway)."""
        self.appends.end()
        task, self._flushing = self._flushing, None
        if task is not None and not task.done():
            task.cancel()
        elif task is not None and not task.cancelled():
            task.exception()  # retrieved: already reported through `drain` or not needed

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[:MAX_BATCH_EVENTS]
            del self._pending[:MAX_BATCH_EVENTS]
            with self.appends.batch(len(batch)):
                await self.events.append_batch(self.run.run_id, self.run.attempt, batch)
            self.metrics.appended(batch)
            if self._first_token_due and any(event == "token" for event, _ in batch):
                self._first_token_due = False
                self.metrics.first_token(self.run.graph, self.run.created_at)

    def _raise_failure(self) -> None:
        task = self._flushing
        if task is not None and task.done():
            self._flushing = None
            if not task.cancelled():
                task.result()


async def _keep_lease(services: Services, run: RunRecord, attempt: Attempt) -> None:
    lease_s = services.settings.lease_s
    while True:
        await asyncio.sleep(lease_s / 3)
        try:
            await services.events.renew(run.run_id, run.attempt, lease_s)
        except (Fenced, StreamGone):
            if attempt.lose():
                logger.warning("lease lost; stopping this attempt", run_id=run.run_id)
            return  # (settling: the outcome's events are exempt from the lease)
        except StoreUnavailable as exc:
            logger.warning("lease renewal failed; will retry", run_id=run.run_id, error=str(exc))


async def execute_run(ctx: dict[str, Any], run_id: str, traceparent: str | None = None) -> None:
    """The arq job: claim the run, stream its graph into its event log, record the outcome.

    The attempt is one span, a child of the run's submit span (`traceparent`, from the job),
    linked to the previous attempt's span when there was one (docs/architecture.md, Traces).
    """
    state = WorkerState.of(ctx)
    services = state.services
    tracer = services.tracer
    with tracer.start_as_current_span(
        "run attempt",
        context=context_of(traceparent),
        kind=SpanKind.CONSUMER,
        attributes={"runstream.run_id": run_id},
    ) as span:
        with tracer.start_as_current_span("claim"):
            run = await services.lifecycle.claim(
                run_id, attempt_traceparent=traceparent_of(span) if span.is_recording() else None
            )
        if run is None:
            record_outcome("not_claimed")
            return
        span.set_attributes(run_attributes(run))
        previous = span_context_of(run.attempt_traceparent)
        if previous is not None:
            span.add_link(previous, {"runstream.link": "previous attempt"})
        state.metrics.attempt_started(run.graph)
        with structlog.contextvars.bound_contextvars(run_id=run.run_id, thread_id=run.thread_id):
            finished = await _execute_attempt(state, run)
    if finished:
        await services.queue.dispatch_next(run.thread_id)


async def _execute_attempt(state: WorkerState, run: RunRecord) -> bool:
    """Run the claimed attempt to an outcome; True when the run finished (terminal)."""
    services = state.services
    run_id = run.run_id
    task = asyncio.current_task()
    assert task is not None
    attempt = state.attempts[run_id] = Attempt(run_id, task)
    keeper = asyncio.create_task(_keep_lease(services, run, attempt))
    fence = attempt_fence.set((run.run_id, run.attempt))
    writer = _Writer(services.events, run, state.metrics, services.tracer)
    finished = False
    try:
        # The lease is taken after the attempt is in `state.attempts`: a cancel published from
        # here on reaches it, and one requested earlier is seen by `start`.
        started = await services.lifecycle.start(
            run,
            retry_planner(services),
            lease_s=services.settings.lease_s,
            worker=state.worker_id,
        )
        if not started:
            raise asyncio.CancelledError
        logger.info("run started", graph=run.graph, attempt=run.attempt)
        finished = await _stream_graph(state, attempt, run, writer)
    except asyncio.CancelledError:
        task.uncancel()
        keeper.cancel()
        if attempt.phase is AttemptPhase.LOST:
            logger.warning("attempt abandoned: lease lost")
            record_outcome("lease_lost")
        elif attempt.phase is AttemptPhase.CANCELLING or await services.events.cancel_requested(
            run_id
        ):
            finished = await _finish(services, attempt, run, writer, RunStatus.CANCELLED)
        else:
            logger.info("worker stopping; handing the run back")
            record_outcome("handed_back")
            await hand_back(services, run)
            state.metrics.retried("worker_shutdown")
    except StreamTooLarge as exc:
        logger.warning("run failed: its stream reached a bound", error=exc.message)
        error = {"code": exc.code, "message": exc.message}
        finished = await _finish(services, attempt, run, writer, RunStatus.FAILED, error=error)
    except (Fenced, StreamGone) as exc:
        logger.warning("attempt fenced out; stopping without writing", error=str(exc))
        record_outcome("fenced")
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("attempt abandoned: a service failed", error=str(exc))
        record_outcome("abandoned", str(exc))
    except Exception as exc:
        logger.exception("run failed")
        trace.get_current_span().record_exception(exc)
        message = f"{type(exc).__name__}: {exc}"
        secret = services.settings.openai_api_key
        if secret:  # an upstream may echo the key back in its error text
            message = message.replace(secret, "***")
        error = {"code": "graph_error", "message": message[:1000]}
        finished = await _finish(services, attempt, run, writer, RunStatus.FAILED, error=error)
    finally:
        keeper.cancel()
        writer.abandon()
        attempt_fence.reset(fence)
        del state.attempts[run_id]
    return finished


def _steering_command(run: RunRecord) -> Command[Any] | None:
    """The LangGraph API's `command` with `update` and/or `goto` (checked at submit by
    server/langgraph/command.py: known state keys and nodes, messages with ids); it is the
    graph's input, with the run's resume value if it has one."""
    command = (run.kwargs or {}).get("command") or {}
    if command.get("update") is None and not command.get("goto"):
        return None
    update = command.get("update")
    if isinstance(update, list):
        update = [(key, value) for key, value in update]
    goto = [
        Send(g["node"], g.get("input")) if isinstance(g, dict) else g
        for g in command.get("goto") or []
    ]
    resume = run.resume.get("value") if run.resume is not None else None
    return Command(update=update, goto=goto, resume=resume)


async def _graph_input(graph: Pregel, run: RunRecord, config: dict[str, Any]) -> Any:
    """What to invoke the graph with, given what the checkpoint says this run already did.

    Returns `...` when the graph already ran to its end in an earlier attempt.
    """
    steering = _steering_command(run)
    if run.attempt == 1 and run.resume is None and steering is None:
        # The first attempt (claimed once: any later one is attempt 2+) has nothing saved yet;
        # skipping the read saves a checkpoint query on the way to the first token.
        return {"messages": input_messages(run)}
    state = await graph.aget_state(config)  # type: ignore[arg-type]
    started = (state.metadata or {}).get("run_id") == run.run_id
    if run.attempt > 1 or run.resume is not None:
        logger.info(
            "continuing run",
            attempt=run.attempt,
            checkpoint_of_this_run=started,
            next=list(state.next),
            interrupts=len(state.interrupts),
            checkpoint_metadata=state.metadata,
        )
    if steering is not None and not started:
        return steering
    if run.resume is not None and state.interrupts:
        return Command(resume=run.resume.get("value"))
    if started and state.next:
        return None  # continue from the last checkpoint (a retried attempt)
    if started and run.attempt > 1 and (state.metadata or {}).get("source") == "loop":
        return ...  # an earlier attempt ran the graph to its end
    if steering is not None:
        return ...  # an earlier attempt ran the command to the graph's end
    # Not started, or only the input was saved: (re)send the input. Its messages keep the ids
    # given at submit, so the checkpointer's reducer replaces rather than repeats them.
    return {"messages": input_messages(run)}


async def _stream_graph(
    state: WorkerState, attempt: Attempt, run: RunRecord, writer: _Writer
) -> bool:
    """Run the graph; True when the run finished (False when it is now interrupted)."""
    services = state.services
    graph = state.graphs.get(run.graph, services.checkpointer)
    configurable = state.graphs.caller_configurable(run.graph, run.config.get("configurable"))
    config: dict[str, Any] = {
        "configurable": {**configurable, "thread_id": run.thread_id},
        "metadata": {"run_id": run.run_id},
    }
    callbacks = graph_callbacks(services.tracer)  # a span per node and model call, if traced
    if callbacks:
        config["callbacks"] = callbacks
    context = RunContext(
        run_id=run.run_id,
        thread_id=run.thread_id,
        attempt=run.attempt,
        chat_model=make_chat_model(services.settings, configurable),
        ledger=state.ledger,
    )
    graph_input = await _graph_input(graph, run, config)
    if isinstance(graph_input, dict) and run.attempt == 1:
        # A later attempt's `retry` announcement already sent whatever of the run's messages
        # (its input among them) the stream did not have whole.
        for message in graph_input["messages"]:
            await writer.emit("message", MessageData(message=to_wire_message(message)))
    with_values = "values" in run.stream_modes
    if with_values and run.attempt > 1:
        # A LangGraph client holds text of the attempt that died: a fresh snapshot replaces it.
        saved = await graph.aget_state(config)  # type: ignore[arg-type]
        await writer.emit("values", ValuesData(values=state_to_json(saved.values)))
    if graph_input is not ...:
        translator = StreamTranslator(record_updates="updates" in run.stream_modes)
        modes: list[StreamMode] = [*STREAM_MODES, "values"] if with_values else STREAM_MODES
        stream = graph.astream(  # type: ignore[call-overload]
            graph_input, config, context=context, stream_mode=modes, durability=DURABILITY
        )
        async for mode, chunk in stream:
            for event, data in translator.translate(mode, chunk):
                await writer.emit(event, data)

    snapshot = await graph.aget_state(config)  # type: ignore[arg-type]
    if snapshot.interrupts and await services.events.cancel_requested(run.run_id):
        # cancelled while it ran
        return await _finish(services, attempt, run, writer, RunStatus.CANCELLED)
    if snapshot.interrupts:
        await writer.drain()  # the outcome's events are the stream's last
        attempt.phase = AttemptPhase.SETTLING
        first = snapshot.interrupts[0]
        record_outcome("interrupted")
        if await services.lifecycle.interrupt(run, first.value, first.id):
            writer.metrics.outcome(run.graph, RunStatus.INTERRUPTED)
        return False
    messages = snapshot.values.get("messages") or []
    last = messages[-1] if messages else None
    output = to_wire_message(last) if isinstance(last, AIMessage) else None
    return await _finish(services, attempt, run, writer, RunStatus.SUCCEEDED, output=output)


async def _finish(
    services: Services,
    attempt: Attempt,
    run: RunRecord,
    writer: _Writer,
    status: RunStatus,
    *,
    output: WireMessage | None = None,
    error: dict[str, str] | None = None,
) -> bool:
    try:
        # an outcome in Postgres implies every event before it is in the stream
        await writer.drain()
    except StreamTooLarge as exc:
        # The stream reached its bound as the run was ending: a success becomes a failure
        # (the caller's handler), but a cancel stays a cancel and a failure keeps its error;
        # the stream holds every event that fit, and the outcome's events are never refused.
        if status is RunStatus.SUCCEEDED:
            raise
        logger.warning("the run's stream reached a bound as it ended", error=exc.message)
    attempt.phase = AttemptPhase.SETTLING  # from here on only the outcome's events are written
    record_outcome(status.value, error["message"] if error else None)
    finished = await services.lifecycle.finish(run, status, output=output, error=error)
    if finished:
        writer.metrics.outcome(run.graph, status)
    return finished
