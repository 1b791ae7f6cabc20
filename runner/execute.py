"""The job: execute one attempt of a run and write its events, to terminal or interrupt.

An attempt holds a lease on the run (renewed from a thread, `stream_store.leases`) and every
write it makes is
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
from langgraph.types import Durability, StreamMode
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from redis.exceptions import RedisError

from project.auth_user import AuthUser
from project.configurable import REQUEST_KEYS
from project.graph_context import RunContext, graph_context, takes_run_context
from stream_store.assistant_ids import run_assistant_id
from stream_store.checkpoints import FreshThread, attempt_fence, fresh_thread
from stream_store.errors import Fenced, StoreUnavailable, StreamGone, StreamTooLarge
from stream_store.messages import state_to_json, to_wire_message
from stream_store.run_records import RunRecord
from stream_store.services import Services
from stream_store.settings import Settings
from stream_store.store import OwnerStore, StoreCaps
from stream_store.tracing import (
    context_of,
    record_outcome,
    run_attributes,
    span_context_of,
    traceparent_of,
)
from wire.events import MessageData, RunStatus, ValuesData, WireMessage

from .attempt_spans import graph_callbacks
from .attempt_writer import AttemptWriter
from .graph_events import EVENTS_MODE, stream_with_events
from .graph_input import graph_input
from .recovery import hand_back, retry_planner
from .run_scope import RunScope, running
from .state import Attempt, AttemptPhase, WorkerState
from .step_parts import STEP_MODES
from .translate import StreamTranslator

__all__ = ["execute_run"]

logger = structlog.get_logger()

STREAM_MODES: list[StreamMode] = ["messages", "updates", "custom"]  # + "values" if asked
# A subgraph's parts a LangGraph run with `stream_subgraphs` records, as its modes ask
NESTED_MODES = frozenset({"values", "updates", "custom"})

# Checkpoints are written while the next step runs, not before it, which keeps two Postgres
# writes off the way to the first token. The stream ends only after every write has landed, so
# the outcome recorded after it always has its checkpoint; a crash mid-run may lose the latest
# step's checkpoint, and the retry runs that step again (write tools stay at most once by the
# ledger).
DURABILITY: Durability = "async"

# Failures of the services rather than of the graph: the attempt is abandoned, its lease runs
# out, and the reaper gives the run to a new attempt.
INFRASTRUCTURE_ERRORS = (StoreUnavailable, RedisError, psycopg.OperationalError)


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
        with structlog.contextvars.bound_contextvars(
            run_id=run.run_id, thread_id=run.thread_id, x_trace_id=run.x_trace_id
        ):
            finished = await _execute_attempt(state, run)
    if finished:
        await services.queue.dispatch_next(run.thread_id)


async def _execute_attempt(state: WorkerState, run: RunRecord) -> bool:
    """Run the claimed attempt to an outcome; True when the run finished (terminal)."""
    services = state.services
    task = asyncio.current_task()
    assert task is not None
    attempt = state.attempts[run.run_id] = Attempt(run.run_id, task)
    fence = attempt_fence.set((run.run_id, run.attempt))
    # the graph's first read of a thread the claim found without checkpoints is free
    fresh = fresh_thread.set(
        FreshThread(run.thread_id) if run.thread_has_checkpoints is False else None
    )
    writer = AttemptWriter(services.events, run, state.metrics, services.tracer)
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
        state.leases.hold(run.run_id, run.attempt, lambda: _lose(attempt))
        logger.info("run started", graph=run.graph, attempt=run.attempt)
        return await _stream_graph(state, attempt, run, writer)
    except asyncio.CancelledError:
        task.uncancel()
        state.leases.release(run.run_id)
        return await _stop(state, attempt, run, writer)
    except StreamTooLarge as exc:
        logger.warning("run failed: its stream reached a bound", error=exc.message)
        error = {"code": exc.code, "message": exc.message}
        return await _finish(services, attempt, run, writer, RunStatus.FAILED, error=error)
    except (Fenced, StreamGone) as exc:
        logger.warning("attempt fenced out; stopping without writing", error=str(exc))
        record_outcome("fenced")
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("attempt abandoned: a service failed", error=str(exc))
        record_outcome("abandoned", str(exc))
    except Exception as exc:
        logger.exception("run failed")
        trace.get_current_span().record_exception(exc)
        error = {"code": "graph_error", "message": _graph_error(exc, services.settings)}
        return await _finish(services, attempt, run, writer, RunStatus.FAILED, error=error)
    finally:
        state.leases.release(run.run_id)
        writer.abandon()
        attempt_fence.reset(fence)
        fresh_thread.reset(fresh)
        del state.attempts[run.run_id]
    return False


def _lose(attempt: Attempt) -> None:
    """The lease keeper saw the lease refused (`stream_store.leases`)."""
    if attempt.lose():
        logger.warning("lease lost; stopping this attempt", run_id=attempt.run_id)
    # else settling: the outcome's events are exempt from the lease


async def _stop(
    state: WorkerState, attempt: Attempt, run: RunRecord, writer: AttemptWriter
) -> bool:
    """The attempt's task was cancelled: its lease was lost, the run was cancelled, or the
    worker is stopping (then the run goes back to the queue). True when the run finished."""
    services = state.services
    if attempt.phase is AttemptPhase.LOST:
        logger.warning("attempt abandoned: lease lost")
        record_outcome("lease_lost")
        return False
    if attempt.phase is AttemptPhase.CANCELLING or await services.events.cancel_requested(
        run.run_id
    ):
        return await _finish(services, attempt, run, writer, RunStatus.CANCELLED)
    logger.info("worker stopping; handing the run back")
    record_outcome("handed_back")
    await hand_back(services, run)
    state.metrics.retried("worker_shutdown")
    return False


def _graph_error(exc: Exception, settings: Settings) -> str:
    """The error message a failed run records: the exception, without the API key that an
    upstream may echo back in its error text, cut to 1000 characters."""
    message = f"{type(exc).__name__}: {exc}"
    if settings.openai_api_key:
        message = message.replace(settings.openai_api_key, "***")
    return message[:1000]


def _resume_mark(run: RunRecord) -> dict[str, str]:
    """The id of the answer a `/v1` resume gave the run, while it has one."""
    resume_id = (run.resume or {}).get("id")
    return {"resume_id": resume_id} if resume_id else {}


def _server_configurable(run: RunRecord) -> dict[str, Any]:
    """What LangGraph's server adds to a run's `configurable` (langgraph_runtime_inmem's
    `Runs.put`, langgraph_api's `models/run.py`), after the caller's keys: a caller cannot set
    these (they are reserved, `project.configurable`), but `user_id`, which LangGraph takes
    from the caller's (or the assistant's) `configurable` first, else the signed-in identity.
    LangGraph reads `assistant_id` and `graph_id` into `runtime.server_info`, and
    `langgraph_auth_user` into its `user`: the user a project's auth signed in, recorded with
    the run at submit (server/access.py), or the run's owner alone. The request's keys
    (`REQUEST_KEYS`), recorded at submit by LangGraph's routes, are the same for every
    attempt."""
    configurable = run.config.get("configurable") or {}
    recorded = configurable.get("langgraph_auth_user")
    user = (
        AuthUser(recorded)
        if isinstance(recorded, dict) and recorded.get("identity") == run.owner
        else AuthUser.of(run.owner, [])
    )
    return {
        "thread_id": run.thread_id,
        "run_id": run.run_id,
        "assistant_id": run_assistant_id(run),
        "graph_id": run.graph,
        "langgraph_auth_user_id": run.owner,
        "langgraph_auth_user": user,
        "langgraph_auth_permissions": user.permissions,
        **{key: configurable[key] for key in REQUEST_KEYS if key in configurable},
        "user_id": configurable.get("user_id") or run.owner,
    }


async def _stream_graph(
    state: WorkerState, attempt: Attempt, run: RunRecord, writer: AttemptWriter
) -> bool:
    """Run the graph; True when the run finished (False when it is now interrupted)."""
    services = state.services
    configurable = state.graphs.caller_configurable(run.graph, run.config.get("configurable"))
    config: dict[str, Any] = {
        "configurable": {**configurable, **_server_configurable(run)},
        # in every checkpoint the attempt saves (runner/graph_input.py reads them back)
        "metadata": {"run_id": run.run_id, **_resume_mark(run)},
    }
    # `get_store()` in a node is LangGraph's store as the run's owner sees it (~10 us a copy),
    # its puts within the owner's caps as the store routes' are
    store = OwnerStore(services.store, run.owner, StoreCaps.of(services.settings))
    built = state.graphs.graph_for_run(
        run.graph,
        config,  # type: ignore[arg-type]
        services.checkpointer,
        store,
    )
    async with built as graph:
        return await _stream_built(state, run, writer, attempt, graph, config, configurable)


async def _stream_built(
    state: WorkerState,
    run: RunRecord,
    writer: AttemptWriter,
    attempt: Attempt,
    graph: Pregel,
    config: dict[str, Any],
    configurable: dict[str, Any],
) -> bool:
    """`_stream_graph` once the graph is built."""
    services = state.services
    callbacks = graph_callbacks(services.tracer)  # a span per node and model call, if traced
    if callbacks:
        config["callbacks"] = callbacks
    context = _graph_context(run, graph)
    # `config` is the thread's latest checkpoint, where the run's outcome is read; `call.config`
    # is where the graph starts (a fork's checkpoint, until the run saved one of its own)
    call = await graph_input(graph, run, config)
    invoke_with = call.input
    if isinstance(invoke_with, dict) and run.attempt == 1:
        # A later attempt's `retry` announcement already sent whatever of the run's messages
        # (its input among them) the stream did not have whole.
        for message in invoke_with.get("messages", []):
            await writer.emit("message", MessageData(message=to_wire_message(message)))
    with_values = "values" in run.stream_modes
    if with_values and run.attempt > 1:
        # A LangGraph client holds text of the attempt that died: a fresh snapshot replaces it.
        saved = await graph.aget_state(call.config)  # type: ignore[arg-type]
        await writer.emit("values", ValuesData(values=state_to_json(saved.values)))
    if invoke_with is not ...:
        subgraphs = bool(run.kwargs.get("stream_subgraphs"))
        # LangGraph's `debug`, `tasks` and `checkpoints` modes, only for a run that asks
        step_modes = [m for m in run.stream_modes if m in STEP_MODES]
        nested = (
            (frozenset(run.kwargs.get("stream_mode") or ()) & NESTED_MODES) | set(step_modes)
            if subgraphs
            else frozenset()
        )
        translator = StreamTranslator(
            record_updates="updates" in run.stream_modes,
            nested_modes=nested,
            task_metadata=_task_metadata(run),
        )
        modes: list[StreamMode] = [*STREAM_MODES, "values"] if with_values else STREAM_MODES
        modes = [*modes, *step_modes]  # type: ignore[list-item]
        options: dict[str, Any] = {
            "context": context,
            "stream_mode": modes,
            "durability": DURABILITY,
            "interrupt_before": run.kwargs.get("interrupt_before"),
            "interrupt_after": run.kwargs.get("interrupt_after"),
            "subgraphs": subgraphs,
        }
        if EVENTS_MODE in run.stream_modes:  # LangGraph's `events` mode: every callback event
            stream = stream_with_events(
                graph,
                invoke_with,
                call.config,
                run_id=run.run_id,
                graph_name=run.graph,
                attempt=run.attempt,
                metadata=run.metadata,
                **options,
            )
        else:
            stream = graph.astream(invoke_with, call.config, **options)  # type: ignore[call-overload]
        # the run-scoped API of any graph's nodes (`runner.run_scope`): set here only
        with running(RunScope.of(run, services, configurable)):
            async for item in stream:
                namespace, mode, chunk = item if subgraphs else ((), *item)
                for event, data in translator.translate_nested(namespace, mode, chunk):
                    await writer.emit(event, data)
    return await _settle(services, attempt, run, writer, graph, config)


def _task_metadata(run: RunRecord) -> dict[str, Any]:
    """What a task's `metadata` starts with in `tasks` and `debug` parts: the run's graph,
    assistant, metadata and attempt, as LangGraph's server puts them in the run's config."""
    return {
        "graph_id": run.graph,
        "assistant_id": run_assistant_id(run),
        **run.metadata,
        "run_attempt": run.attempt,
    }


def _graph_context(run: RunRecord, graph: Pregel) -> Any:
    """The graph's `runtime.context`: runstream's `RunContext` for a graph that asks for it
    (the built-ins), else the run's context (the assistant's under the run's, recorded at
    submit) built into the graph's own `context_schema` (`project.graph_context`)."""
    schema = graph.context_schema
    if takes_run_context(schema):
        return RunContext(run_id=run.run_id, thread_id=run.thread_id, attempt=run.attempt)
    return graph_context(schema, run.kwargs.get("context") or {})


async def _settle(
    services: Services,
    attempt: Attempt,
    run: RunRecord,
    writer: AttemptWriter,
    graph: Pregel,
    config: dict[str, Any],
) -> bool:
    """Record what the graph's stream ended in: an interrupt (False), or the run's outcome
    (True): cancelled if a cancel came while it stopped at an interrupt, else succeeded (at its
    end, or at a breakpoint)."""
    snapshot = await graph.aget_state(config)  # type: ignore[arg-type]
    if snapshot.interrupts and await services.events.cancel_requested(run.run_id):
        # cancelled while it ran
        return await _finish(services, attempt, run, writer, RunStatus.CANCELLED)
    if snapshot.interrupts:
        await writer.drain()  # the outcome's events are the stream's last
        attempt.phase = AttemptPhase.SETTLING
        first = snapshot.interrupts[0]
        record_outcome(RunStatus.INTERRUPTED)
        if await services.lifecycle.interrupt(run, first.value, first.id):
            writer.metrics.outcome(run.graph, RunStatus.INTERRUPTED)
        return False
    if snapshot.next:  # stopped at a breakpoint: done, and the thread waits (LangGraph's way)
        await services.run_records.note_breakpoint(run.run_id)
    messages = snapshot.values.get("messages") or []
    last = messages[-1] if messages else None
    output = to_wire_message(last) if isinstance(last, AIMessage) else None
    return await _finish(services, attempt, run, writer, RunStatus.SUCCEEDED, output=output)


async def _finish(
    services: Services,
    attempt: Attempt,
    run: RunRecord,
    writer: AttemptWriter,
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
