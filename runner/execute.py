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
from langgraph.types import Command, Durability, StreamMode
from redis.exceptions import RedisError

from stream_store.checkpoints import attempt_fence
from stream_store.errors import Fenced, StoreUnavailable, StreamGone, StreamTooLarge
from stream_store.events import MessageData, RunStatus, ValuesData, WireMessage, encode_data
from stream_store.log import EventLog
from stream_store.messages import input_messages, state_to_json, to_wire_message
from stream_store.records import RunRecord
from stream_store.services import Services

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

    def __init__(self, events: EventLog, run: RunRecord) -> None:
        self.events = events
        self.run = run
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
        task, self._flushing = self._flushing, None
        if task is not None and not task.done():
            task.cancel()
        elif task is not None and not task.cancelled():
            task.exception()  # retrieved: already reported through `drain` or not needed

    async def _flush(self) -> None:
        while self._pending:
            batch = self._pending[:MAX_BATCH_EVENTS]
            del self._pending[:MAX_BATCH_EVENTS]
            await self.events.append_batch(self.run.run_id, self.run.attempt, batch)

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


async def execute_run(ctx: dict[str, Any], run_id: str) -> None:
    """The arq job: claim the run, stream its graph into its event log, record the outcome."""
    state = WorkerState.of(ctx)
    services = state.services
    run = await services.lifecycle.claim(run_id, services.settings.lease_s)
    if run is None:
        return
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
    writer = _Writer(services.events, run)
    finished = False
    try:
        if await services.events.cancel_requested(run_id):
            raise asyncio.CancelledError
        await services.lifecycle.start(run, retry_planner(services))
        logger.info("run started", graph=run.graph, attempt=run.attempt)
        finished = await _stream_graph(state, attempt, run, writer)
    except asyncio.CancelledError:
        task.uncancel()
        keeper.cancel()
        if attempt.phase is AttemptPhase.LOST:
            logger.warning("attempt abandoned: lease lost")
        elif attempt.phase is AttemptPhase.CANCELLING or await services.events.cancel_requested(
            run_id
        ):
            finished = await _finish(services, attempt, run, writer, RunStatus.CANCELLED)
        else:
            logger.info("worker stopping; handing the run back")
            await hand_back(services, run)
    except StreamTooLarge as exc:
        logger.warning("run failed: its stream reached a bound", error=exc.message)
        error = {"code": exc.code, "message": exc.message}
        finished = await _finish(services, attempt, run, writer, RunStatus.FAILED, error=error)
    except (Fenced, StreamGone) as exc:
        logger.warning("attempt fenced out; stopping without writing", error=str(exc))
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("attempt abandoned: a service failed", error=str(exc))
    except Exception as exc:
        logger.exception("run failed")
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


async def _graph_input(graph: Pregel, run: RunRecord, config: dict[str, Any]) -> Any:
    """What to invoke the graph with, given what the checkpoint says this run already did.

    Returns `...` when the graph already ran to its end in an earlier attempt.
    """
    if run.attempt == 1 and run.resume is None:
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
    if run.resume is not None and state.interrupts:
        return Command(resume=run.resume.get("value"))
    if started and state.next:
        return None  # continue from the last checkpoint (a retried attempt)
    if started and run.attempt > 1 and (state.metadata or {}).get("source") == "loop":
        return ...  # an earlier attempt ran the graph to its end
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
        await services.lifecycle.interrupt(run, first.value, first.id)
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
    await writer.drain()  # an outcome in Postgres implies every event before it is in the stream
    attempt.phase = AttemptPhase.SETTLING  # from here on only the outcome's events are written
    return await services.lifecycle.finish(run, status, output=output, error=error)
