"""A LangGraph run request as a runstream run, checked as `/v1` checks its own, and submitted.

The run is a runstream run (the same records, stream, workers and lifecycle as `/v1`) whose
request also asks the worker for LangGraph's `values` and `updates` events.

A request's `checkpoint` (or `checkpoint_id`) is where the run starts: a checkpoint of its
thread, which the run forks the thread's history from (runner/graph_input.py). It is checked
here, before anything is recorded: the thread must have it (404), a stateless run cannot have
one (422), and a resume takes the thread's latest checkpoint only (the one it waits at).
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from server import inputs
from server.access.assistants import run_assistant
from server.access.new_runs import new_run
from server.access.run_context import check_context
from server.access.runs import prepare_run, record_run
from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.resources import Resources
from stream_store.assistant_records import AssistantRecord
from stream_store.errors import Conflict, NotFound, StoreError
from stream_store.limits import BATCH_MAX_RUNS
from stream_store.run_records import RunRecord
from stream_store.run_submit import Created, NewRun

from .command import checked_command
from .conversions import stream_modes
from .request_keys import CRON, RequestStamp
from .run_input import checked_input
from .state_writes import checked_checkpoint_id
from .views import assistant_of, registered_graph
from .webhooks import checked_webhook
from .wire import RunCreate

__all__ = [
    "assistant_configurable",
    "check_run",
    "checked_run",
    "submit",
    "submit_batch",
    "submit_scheduled",
    "unprocessable",
]

# what the worker records beyond runstream's events (`events`: it streams the run with them)
RECORDED_MODES = ("values", "updates", "events", "debug", "tasks", "checkpoints")


def unprocessable(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


async def _command(
    resources: Resources, body: RunCreate, graph: str, thread_id: str | None
) -> dict[str, Any]:
    """The request's checked `command` (none: `{}`)."""
    if not body.command:
        return {}
    command = checked_command(
        body.command,
        await resources.graph_for_reading(graph),
        resources.settings.max_resume_bytes,
    )
    if "resume" in command and thread_id is None:
        raise ApiError(400, "invalid_request", "You must provide a thread_id when resuming.")
    steers = "update" in command or "goto" in command  # the command is the graph's input
    if steers and body.input:
        raise unprocessable(
            "give input or command.update/command.goto, not both: the command is the input"
        )
    return command


def _fork_point(body: RunCreate, thread_id: str | None) -> dict[str, str] | None:
    """The checkpoint the run starts from (`checkpoint`, else `checkpoint_id`), as the worker
    takes it: `{"checkpoint_id", "checkpoint_ns"}`; None: the thread's latest."""
    checkpoint = body.checkpoint or {}
    raw_id = checkpoint.get("checkpoint_id") or body.checkpoint_id
    if raw_id is None:
        return None
    if thread_id is None:
        raise unprocessable("a checkpoint is a thread's: a stateless run cannot start from one")
    if not isinstance(raw_id, str):
        raise unprocessable("checkpoint.checkpoint_id must be a string")
    if checkpoint.get("checkpoint_ns") not in (None, ""):
        raise unprocessable("checkpoint.checkpoint_ns: only the graph's own checkpoints ('')")
    if checkpoint.get("thread_id") not in (None, thread_id):
        raise unprocessable("checkpoint.thread_id names another thread than the run's")
    return {"checkpoint_id": checked_checkpoint_id(raw_id), "checkpoint_ns": ""}


async def _checkpoint(
    resources: Resources, thread_id: str, checkpoint_id: str | None = None
) -> CheckpointTuple | None:
    """The thread's checkpoint `checkpoint_id` of its root graph; its latest without one."""
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return await resources.checkpointer.aget_tuple({"configurable": configurable})


async def _graph_input(
    resources: Resources,
    body: RunCreate,
    graph: str,
    command: dict[str, Any],
    forks: bool,
    thread_id: str | None,
) -> dict[str, Any]:
    """The request's `input`, checked against the graph's input schema (run_input.py). None
    with a command, with a checkpoint (LangGraph's input `None`: re-run from there), or on a
    thread that has one (go on from its latest, past a breakpoint: runner/graph_input.py)."""
    needs_input = not command and not forks
    if needs_input and body.input is None and thread_id is not None:
        needs_input = await _checkpoint(resources, thread_id) is None
    return checked_input(
        body.input,
        await resources.graph_for_reading(graph),
        resources.settings,
        needs_input=needs_input,
    )


def assistant_configurable(assistant: AssistantRecord) -> dict[str, Any]:
    """What an assistant puts in its runs' `configurable`: its config's, then its context."""
    return {**(assistant.config.get("configurable") or {}), **assistant.context}


async def _new_run(
    resources: Resources,
    caller: Caller,
    body: RunCreate,
    thread_id: str | None,
    assistant: AssistantRecord,
) -> NewRun:
    """The runstream run a LangGraph request asks for, of `assistant` (the one
    `body.assistant_id` names): its graph, and its configurable under the run's own."""
    graph = registered_graph(resources, assistant)
    try:
        modes = stream_modes(body.stream_mode)
    except ValueError as exc:
        raise unprocessable(str(exc)) from None
    command = await _command(resources, body, graph, thread_id)
    checkpoint = _fork_point(body, thread_id)
    graph_input = await _graph_input(
        resources, body, graph, command, checkpoint is not None, thread_id
    )
    run_configurable = (body.config or {}).get("configurable") or {}
    configurable = {
        **assistant_configurable(assistant),
        **run_configurable,
        **(body.context or {}),
    }
    # As LangGraph's server keeps them: the run's configurable is its context too (a key the
    # context schema does not name is dropped as the context is built, project/graph_context.py)
    context = {**assistant.context, **run_configurable, **(body.context or {})}
    kwargs = {
        "input": body.input,
        "command": command or None,
        "checkpoint": checkpoint,  # where the run starts; None: the thread's latest checkpoint
        "config": body.config or {},
        "context": context,  # what the graph's `runtime.context` is built from (runner/execute.py)
        "stream_mode": modes,
        "on_disconnect": body.on_disconnect,
        "resumable": True,  # every runstream run is
        # breakpoints: the run stops there, succeeded, its thread `interrupted` (runner/execute.py)
        "interrupt_before": body.interrupt_before,
        "interrupt_after": body.interrupt_after,
        # subgraphs' values, updates and custom parts, named `mode|namespace` (runner/translate.py)
        "stream_subgraphs": body.stream_subgraphs,
    }
    if assistant.owner is not None:  # a created assistant: its id is the run's (`run_view`)
        kwargs["assistant_id"] = assistant.assistant_id
    if body.webhook is not None:  # checked by the submit (`checked_webhook`)
        kwargs["webhook"] = body.webhook  # the worker POSTs the run there when it ends
    new = new_run(
        resources,
        caller.owner,
        graph=graph,
        input=graph_input,
        config={"configurable": configurable},
        metadata=body.metadata or {},
        thread_id=thread_id,
        multitask=body.multitask_strategy,
        stream_modes=[m for m in modes if m in RECORDED_MODES],
        kwargs=kwargs,
        resume={"value": command["resume"]} if "resume" in command else None,
        supersede_interrupted=True,
        create_thread=body.if_not_exists == "create",
        thread_metadata={"graph_id": graph, "assistant_id": assistant.assistant_id},
    )
    await check_context(resources, graph, context)
    return new


def _create_run_value(body: RunCreate, assistant: AssistantRecord) -> dict[str, Any]:
    """What LangGraph shows a `threads.create_run` handler of the request (`RunsCreate`)."""
    return {
        "assistant_id": assistant.assistant_id,
        "multitask_strategy": body.multitask_strategy,
        "if_not_exists": body.if_not_exists,
        "kwargs": {"input": body.input, "config": body.config or {}, "context": body.context},
    }


async def _check_fork_point(resources: Resources, caller: Caller, new: NewRun) -> None:
    """The run's checkpoint is one of its thread's (404 otherwise, recording nothing). A resume
    answers the interrupt the thread waits at, at its latest checkpoint: it takes that one
    (then runs as without it) and no other (422)."""
    checkpoint = new.kwargs.get("checkpoint")
    if checkpoint is None or new.thread_id is None:
        return
    thread_id, checkpoint_id = new.thread_id, checkpoint["checkpoint_id"]
    if await resources.thread_records.get_thread(thread_id, caller.owner) is None:
        raise NotFound("Thread or assistant not found.")
    if await _checkpoint(resources, thread_id, checkpoint_id) is None:
        raise NotFound(f"thread {thread_id} has no checkpoint {checkpoint_id}")
    if new.resume is None:
        return
    head = await _checkpoint(resources, thread_id)
    if head is None or head.config["configurable"]["checkpoint_id"] != checkpoint_id:
        raise unprocessable(
            "command.resume answers the thread's interrupt at its latest checkpoint: give that"
            " checkpoint, or none (resuming from an earlier checkpoint is not supported)"
        )
    new.kwargs = {**new.kwargs, "checkpoint": None}


async def submit(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    body: RunCreate,
    thread_id: str | None,
    stamp: RequestStamp,
) -> RunRecord:
    """Check and record the run `body` asks for on `thread_id` (None: a new thread), with
    LangGraph's messages for a busy thread and a missing one; `stamp`: the request's."""
    if thread_id is not None:
        thread_id = inputs.object_id(thread_id, "thread")
    assistant = await run_assistant(resources, caller, body.assistant_id)
    new = await _new_run(resources, caller, body, thread_id, assistant)
    stamp.record(new)
    await prepare_run(resources, caller, new, _create_run_value(body, assistant))
    await _check_fork_point(resources, caller, new)
    await checked_webhook(resources, caller.owner, body.webhook)
    try:
        created = await record_run(resources, quotas, new, dialect="langgraph")
    except Conflict as exc:
        if exc.code == "thread_busy":
            raise Conflict(
                "Thread is already running a task. Wait for it to finish or choose a"
                " different multitask strategy.",
                code="thread_busy",
            ) from None
        raise
    except NotFound:
        raise NotFound("Thread or assistant not found.") from None
    return created.run


async def submit_batch(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    bodies: list[RunCreate],
    stamp: RequestStamp,
) -> list[RunRecord]:
    """Stateless runs, several in one request (`POST /runs/batch`). Every body is checked
    before any run is recorded, so bad input records nothing. A refusal while recording (429
    for the caller's limits, 503) stops the batch there: the runs before it stay recorded and
    the error names them."""
    if not 1 <= len(bodies) <= BATCH_MAX_RUNS:
        raise unprocessable(f"a batch holds 1 to {BATCH_MAX_RUNS} runs, not {len(bodies)}")
    news: list[NewRun] = []
    for body in bodies:
        assistant = await run_assistant(resources, caller, body.assistant_id)
        new = await _new_run(resources, caller, body, None, assistant)
        stamp.record(new)
        await prepare_run(resources, caller, new, _create_run_value(body, assistant))
        await checked_webhook(resources, caller.owner, body.webhook)
        news.append(new)
    runs: list[RunRecord] = []
    for new in news:
        try:
            runs.append((await record_run(resources, quotas, new, dialect="langgraph")).run)
        except StoreError as exc:
            if runs:
                recorded = ", ".join(run.run_id for run in runs)
                exc.message = (
                    f"{exc.message} (run {len(runs) + 1} of {len(news)}; recorded: {recorded})"
                )
            raise
    return runs


async def checked_run(
    resources: Resources, owner: str, body: RunCreate, thread_id: str | None
) -> AssistantRecord:
    """Check a run request as its submit will (422, 404 for an unknown assistant, 413),
    recording nothing: a cron's, when the cron is made. Answers its assistant."""
    assistant = await assistant_of(resources, owner, body.assistant_id)
    await check_run(resources, owner, body, thread_id, assistant)
    return assistant


async def check_run(
    resources: Resources,
    owner: str,
    body: RunCreate,
    thread_id: str | None,
    assistant: AssistantRecord,
) -> None:
    """`checked_run` with the assistant already read: no Postgres (a cron's change is checked
    inside the transaction that holds the cron's row)."""
    await _new_run(resources, Caller(owner), body, thread_id, assistant)


async def submit_scheduled(
    resources: Resources,
    quotas: CallerQuotas,
    owner: str,
    body: RunCreate,
    thread_id: str | None,
    idempotency_key: str,
) -> Created:
    """Record the run of one of a cron's slots, as `submit` records a request's: at most one
    run per `idempotency_key` (a second submit of the slot answers the first run)."""
    assistant = await assistant_of(resources, owner, body.assistant_id)
    new = await _new_run(resources, Caller(owner), body, thread_id, assistant)
    CRON.record(new)
    new.idempotency_key = idempotency_key
    return await record_run(resources, quotas, new, dialect="langgraph")
