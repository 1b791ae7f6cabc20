"""runstream's records as LangGraph's objects: assistants, threads, runs and thread states.

Reading a thread's state needs its graph (LangGraph works out `next` and the pending tasks
from the graph's structure), so this is the one place the server loads graphs for reading.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
from langgraph.pregel import Pregel
from langgraph.types import Interrupt, PregelTask, StateSnapshot

from server.access.assistants import assistant_of, graph_assistant, graph_of_assistant
from server.resources import Resources
from stream_store.assistant_records import AssistantRecord
from stream_store.assistant_records import AssistantVersion as StoredVersion
from stream_store.checkpoints import checkpoint_before_runs
from stream_store.errors import NotFound
from stream_store.messages import state_to_json
from stream_store.run_records import RunRecord
from stream_store.thread_records import ThreadRecord
from wire.events import RunStatus

from .conversions import run_assistant_id
from .statuses import run_status, thread_status
from .wire import (
    Assistant,
    AssistantVersion,
    Checkpoint,
    MultitaskStrategy,
    Run,
    Thread,
    ThreadState,
)

__all__ = [
    "assistant_of",
    "assistant_view",
    "graph_assistant",
    "graph_name",
    "graph_of_assistant",
    "graph_of_thread",
    "interrupt_view",
    "registered_graph",
    "run_view",
    "state_at",
    "state_history",
    "streamed_interrupt",
    "thread_state",
    "thread_view",
    "version_view",
]


def registered_graph(resources: Resources, assistant: AssistantRecord) -> str:
    """The assistant's graph, which must still be registered (an operator may have removed it
    since the assistant was made).

    Raises:
        NotFound: it is not.
    """
    if assistant.graph not in resources.graphs:
        raise NotFound(
            f"assistant {assistant.assistant_id}'s graph {assistant.graph!r} is not registered"
        )
    return assistant.graph


def assistant_view(record: AssistantRecord) -> Assistant:
    return msgspec.convert(record, Assistant, from_attributes=True)


def version_view(record: StoredVersion) -> AssistantVersion:
    """A saved version, or an assistant as its active one (`AssistantRecord` is one)."""
    return msgspec.convert(record, AssistantVersion, from_attributes=True)


# A run's own field (`assistant_id`) and runstream's notes on it (`RunRecords.ask_rollback`,
# `note_breakpoint`), kept in its kwargs but not what the caller sent.
_NOT_KWARGS = frozenset({"assistant_id", "rollback", "breakpoint"})


def run_view(run: RunRecord) -> Run:
    kwargs = run.kwargs or {}
    if "input" not in kwargs and "command" not in kwargs:  # a `/v1` run's: its request's
        shown = {"input": run.input, "config": run.config, "stream_mode": ["values"]}
        kwargs = {**shown, **kwargs}
    kwargs = {k: v for k, v in kwargs.items() if k not in _NOT_KWARGS}
    return Run(
        run_id=run.run_id,
        thread_id=run.thread_id,
        assistant_id=run_assistant_id(run),
        created_at=run.created_at,
        updated_at=run.finished_at or run.started_at or run.created_at,
        status=run_status(run.status),
        metadata=run.metadata,
        kwargs=kwargs,
        multitask_strategy=cast(MultitaskStrategy, run.multitask),
    )


async def _latest_run(resources: Resources, thread: ThreadRecord) -> RunRecord | None:
    runs = await resources.run_records.thread_runs(thread.thread_id, thread.owner)
    return runs[-1] if runs else None


def _config(
    thread_id: str, checkpoint_id: str | None = None, where: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A read's config: the thread's root namespace, or `where` (a subgraph's `checkpoint_ns`
    and `checkpoint_map`, as a task's `checkpoint` names them)."""
    configurable = {"thread_id": thread_id, "checkpoint_ns": "", **(where or {})}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def graph_name(thread: ThreadRecord, latest: RunRecord | None) -> str | None:
    """The graph that reads the thread's checkpoints: its latest run's, or for a thread no run
    wrote (a copy), the `graph_id` in its metadata, which LangGraph keeps there too."""
    if latest is not None:
        return latest.graph
    named = thread.metadata.get("graph_id")
    return named if isinstance(named, str) else None


async def _graph_of(
    resources: Resources, thread: ThreadRecord, latest: RunRecord | None
) -> Pregel | None:
    name = graph_name(thread, latest)
    if name is None or name not in resources.graphs:
        return None
    return await resources.graph_for_reading(name)


async def graph_of_thread(resources: Resources, thread: ThreadRecord) -> Pregel | None:
    return await _graph_of(resources, thread, await _latest_run(resources, thread))


def _checkpoint(config: Any, thread_id: str) -> Checkpoint | None:
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("checkpoint_id"):
        return None
    return Checkpoint(
        checkpoint_id=configurable["checkpoint_id"],
        thread_id=thread_id,
        checkpoint_ns=configurable.get("checkpoint_ns", ""),
        checkpoint_map=configurable.get("checkpoint_map"),  # a subgraph's: its parents' ids
    )


def interrupt_view(interrupt: Interrupt) -> dict[str, Any]:
    """An interrupt as LangGraph's server shows it read from a thread (`state.py`'s
    `patch_interrupt`): `{"id", "value"}`, and its `response_schema` only when the graph gave
    one. (Its live stream shows the `Interrupt` whole: `streamed_interrupt`.)"""
    shown = {"id": interrupt.id, "value": state_to_json(interrupt.value)}
    if interrupt.response_schema is not None:
        shown["response_schema"] = state_to_json(interrupt.response_schema)
    return shown


def streamed_interrupt(shown: dict[str, Any]) -> dict[str, Any]:
    """An `interrupt_view` as LangGraph's stream serialises the `Interrupt` itself (`values`,
    `updates` and `wait`'s answer): `{"value", "id", "response_schema"}`, null when none."""
    return {
        "value": shown["value"],
        "id": shown["id"],
        "response_schema": shown.get("response_schema"),
    }


def _interrupts(snapshot: StateSnapshot) -> list[dict[str, Any]]:
    return [interrupt_view(i) for i in snapshot.interrupts]


# What of a pending subgraph task's config LangGraph shows as the task's `checkpoint`
_TASK_CHECKPOINT_KEYS = ("thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint_map")


def _task(task: PregelTask, thread_id: str) -> dict[str, Any]:
    """A pending task as LangGraph's server shows it. A subgraph's task holds its state: read
    with `subgraphs`, the subgraph's snapshot (`state`); else where to read it (`checkpoint`:
    the thread and the subgraph's namespace, no checkpoint id)."""
    nested = task.state
    checkpoint = None
    if nested is not None and not isinstance(nested, StateSnapshot):
        configurable = nested.get("configurable") or {}
        checkpoint = {k: configurable[k] for k in _TASK_CHECKPOINT_KEYS if k in configurable}
    return {
        "id": task.id,
        "name": task.name,
        "path": list(task.path),
        "error": repr(task.error) if task.error else None,
        "interrupts": [interrupt_view(i) for i in task.interrupts],
        "checkpoint": state_to_json(checkpoint),
        "state": _state(nested, thread_id) if isinstance(nested, StateSnapshot) else None,
        "result": state_to_json(task.result) if task.result is not None else None,
    }


def _state(snapshot: StateSnapshot, thread_id: str) -> ThreadState:
    checkpoint = _checkpoint(snapshot.config, thread_id)
    parent = _checkpoint(snapshot.parent_config, thread_id)
    return ThreadState(
        values=state_to_json(snapshot.values),
        next=list(snapshot.next),
        tasks=[_task(task, thread_id) for task in snapshot.tasks],
        metadata=state_to_json(snapshot.metadata) if snapshot.metadata else None,
        created_at=snapshot.created_at,
        checkpoint=checkpoint,
        parent_checkpoint=parent,
        interrupts=_interrupts(snapshot),
        checkpoint_id=checkpoint.checkpoint_id if checkpoint else None,
        parent_checkpoint_id=parent.checkpoint_id if parent else None,
    )


def _empty_state() -> ThreadState:
    return ThreadState(
        values={},
        next=[],
        tasks=[],
        metadata=None,
        created_at=None,
        checkpoint=None,
        parent_checkpoint=None,
        interrupts=[],
        checkpoint_id=None,
        parent_checkpoint_id=None,
    )


async def thread_state(
    resources: Resources, thread: ThreadRecord, subgraphs: bool = False
) -> ThreadState:
    """The thread's latest state; with `subgraphs`, each pending subgraph task's own state."""
    return await _current_state(thread, await graph_of_thread(resources, thread), subgraphs)


async def _current_state(
    thread: ThreadRecord, graph: Pregel | None, subgraphs: bool = False
) -> ThreadState:
    if graph is None:
        return _empty_state()
    config = _config(thread.thread_id)
    snapshot = await graph.aget_state(config, subgraphs=subgraphs)  # type: ignore[arg-type]
    if not snapshot.config.get("configurable", {}).get("checkpoint_id"):
        return _empty_state()
    return _state(snapshot, thread.thread_id)


async def state_at(
    resources: Resources,
    thread: ThreadRecord,
    checkpoint_id: str | None,
    where: dict[str, Any] | None = None,
    subgraphs: bool = False,
) -> ThreadState:
    """The thread's state at one of its checkpoints, in the root graph or (`where`: its
    `checkpoint_ns` and `checkpoint_map`) in a subgraph; without a checkpoint id, the
    subgraph's latest (empty, as LangGraph's, for a namespace the thread has no state in).

    Raises:
        NotFound: the thread has no such checkpoint.
    """
    graph = await graph_of_thread(resources, thread)
    if graph is not None:
        config = _config(thread.thread_id, checkpoint_id, where)
        snapshot = await graph.aget_state(config, subgraphs=subgraphs)  # type: ignore[arg-type]
        if snapshot.created_at is not None:
            return _state(snapshot, thread.thread_id)
    if checkpoint_id is None:
        return _empty_state()
    raise NotFound(f"thread {thread.thread_id} has no checkpoint {checkpoint_id}")


async def state_history(
    resources: Resources,
    thread: ThreadRecord,
    limit: int,
    before: str | None,
    where: dict[str, Any] | None = None,
) -> list[ThreadState]:
    """The thread's past states, newest first: the root graph's, or (`where`: a
    `checkpoint_ns`, and a `checkpoint_id` to start at) a subgraph's."""
    graph = await graph_of_thread(resources, thread)
    if graph is None:
        return []
    where = dict(where or {})
    checkpoint_id = where.pop("checkpoint_id", None)
    history = graph.aget_state_history(
        _config(thread.thread_id, checkpoint_id, where),  # type: ignore[arg-type]
        limit=limit,
        before=_config(thread.thread_id, before, where) if before else None,  # type: ignore[arg-type]
    )
    return [_state(snapshot, thread.thread_id) async for snapshot in history]


async def thread_view(resources: Resources, thread: ThreadRecord) -> Thread:
    """`thread` as LangGraph's API shows it (read with `latest_run=True`, for its status)."""
    runs = await resources.run_records.thread_runs(thread.thread_id, thread.owner)
    graph = await _graph_of(resources, thread, runs[-1] if runs else None)
    running = [r.run_id for r in runs if r.status == RunStatus.RUNNING]
    if running and graph is not None:
        # LangGraph's thread holds its values as its last run left them: a running run's
        # checkpoints show in its state and history, not here
        async with resources.pool.connection() as conn:
            before = await checkpoint_before_runs(conn, thread.thread_id, running)
        config = _config(thread.thread_id, before)
        snapshot = await graph.aget_state(config) if before else None  # type: ignore[arg-type]
        state = _state(snapshot, thread.thread_id) if snapshot else _empty_state()
    else:
        state = await _current_state(thread, graph)
    interrupts: dict[str, list[dict[str, Any]]] = {}
    for task in state.tasks:
        if task["interrupts"]:
            interrupts[task["id"]] = task["interrupts"]
    return Thread(
        thread_id=thread.thread_id,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        state_updated_at=thread.updated_at,
        metadata=thread.metadata,
        status=thread_status(thread),
        config={},
        values=state.values if state.checkpoint else None,
        interrupts=interrupts,
        error=None,
    )
