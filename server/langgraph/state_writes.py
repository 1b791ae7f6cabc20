"""Writes to a thread's state outside a run: `threads.update_state` and `threads.copy`.

Both go through the checkpointer, as LangGraph's server does: an update is the compiled
graph's `aupdate_state` (a new checkpoint, as if `as_node` had just run), a copy is a new
thread holding a copy of the checkpoints (not the runs). An update waits for no run: it is
refused (409) while one is queued or running, since the worker would write over it.

An update of a thread waiting at an interrupt is LangGraph's human in the loop: a resume
afterwards (a LangGraph run's `command`, or `/v1` resuming the waiting run) goes on from the
updated checkpoint (runner/graph_input.py). An update that leaves the graph nothing to run ends
the waiting run, as LangGraph's server then calls the thread idle.

Both are refused past the caller's checkpoint caps (`stream_store.checkpoint_quota`).
"""

from __future__ import annotations

import uuid
from typing import Any

import structlog
from langchain_core.runnables import RunnableConfig
from langgraph.constants import CONFIG_KEY_CHECKPOINTER
from langgraph.errors import InvalidUpdateError
from langgraph.pregel import Pregel

from server.access.threads import thread_not_found
from server.errors import ApiError
from server.resources import Resources
from stream_store.checkpoint_quota import CheckpointQuota
from stream_store.checkpoints import checkpointer_on
from stream_store.errors import Conflict, NotFound
from stream_store.settings import Settings
from stream_store.thread_records import ThreadRecord

from .command import checked_update
from .views import graph_name, graph_of_thread
from .wire import StateUpdate

__all__ = ["checked_checkpoint_id", "copy_thread", "update_state"]

logger = structlog.get_logger()


def checked_checkpoint_id(value: str) -> str:
    """A checkpoint id is a UUID (422 otherwise, as LangGraph answers)."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ApiError(422, "invalid_request", "Invalid checkpoint ID: must be a UUID") from None


def checkpoint_quota(settings: Settings) -> CheckpointQuota:
    """The caps on checkpoints a state write or a copy may add (docs/security.md)."""
    return CheckpointQuota(settings.max_thread_checkpoints, settings.max_checkpoint_bytes)


def _checked_values(values: dict[str, Any] | list[Any] | None, graph: Pregel) -> Any:
    """`update_state`'s `values` as the graph's `aupdate_state` takes them.

    A list is handed over whole, as LangGraph's server does (observed on `langgraph dev`,
    langgraph-api 0.16.7): it is the one update a node would return, not several updates. A
    graph whose state is one value (`StateGraph(Annotated[list, add])`, its root channel)
    takes it; a graph of state keys refuses it with nothing written, "Expected dict, got
    [...]" (LangGraph answers 400; here 422, as for any values the graph cannot take).
    """
    if isinstance(values, dict):
        return checked_update(values, graph, "values")
    if values is None or graph.channels.get("__root__") is not None:
        return values
    shown = repr(values)
    raise ApiError(
        422,
        "invalid_request",
        "values: the graph's state has keys, so an update is an object of them, not a list:"
        f" Expected dict, got {shown[:200]}{'...' if len(shown) > 200 else ''}",
    )


async def update_state(
    resources: Resources, thread: ThreadRecord, body: StateUpdate
) -> dict[str, Any]:
    """Write `body.values` as a new checkpoint of `thread`; LangGraph's answer, the checkpoint.

    Raises:
        Conflict: a run of the thread is queued or running, or no run ever named its graph.
        NotFound: `body.checkpoint` names no checkpoint of the thread.
        ApiError: 422 for values, a node or a checkpoint id the graph cannot take.
    """
    graph = await graph_of_thread(resources, thread)
    if graph is None:
        raise Conflict(
            f"Thread '{thread.thread_id}' has no assigned graph ID: run it once before"
            " updating its state",
            code="thread_has_no_graph",
        )
    values = _checked_values(body.values, graph)
    if body.as_node is not None and body.as_node not in graph.nodes:
        nodes = ", ".join(n for n in graph.nodes if not n.startswith("__"))
        raise ApiError(
            422,
            "invalid_request",
            f"as_node: the graph has no node {body.as_node!r}; it has {nodes}",
        )
    configurable: dict[str, Any] = {"thread_id": thread.thread_id, "checkpoint_ns": ""}
    raw_id = (body.checkpoint or {}).get("checkpoint_id") or body.checkpoint_id
    if raw_id is not None:
        if not isinstance(raw_id, str):
            raise ApiError(422, "invalid_request", "checkpoint.checkpoint_id must be a string")
        configurable["checkpoint_id"] = checked_checkpoint_id(raw_id)
    threads = resources.thread_records
    quota = checkpoint_quota(resources.settings)
    async with threads.hold_for_state_write(thread.thread_id, thread.owner, quota) as held:
        on_conn: RunnableConfig = {
            "configurable": {**configurable, CONFIG_KEY_CHECKPOINTER: checkpointer_on(held.conn)}
        }
        if raw_id is not None:
            snapshot = await graph.aget_state(on_conn)
            if snapshot.created_at is None:
                raise NotFound(f"thread {thread.thread_id} has no checkpoint {raw_id}")
        try:
            written = await graph.aupdate_state(on_conn, values, as_node=body.as_node)
        except (InvalidUpdateError, ValueError) as exc:  # e.g. an ambiguous node, a reducer's no
            raise ApiError(422, "invalid_request", str(exc).splitlines()[0][:300]) from None
    if held.interrupted:
        head = await graph.aget_state(written)
        if not head.next:
            await resources.lifecycle.end_interrupted(thread.thread_id)
    await resources.thread_records.update_thread_metadata(thread.thread_id, thread.owner, {})
    logger.info("thread state updated", thread_id=thread.thread_id, as_node=body.as_node)
    checkpoint = written["configurable"]
    return {
        "checkpoint": {
            "thread_id": thread.thread_id,
            "checkpoint_ns": checkpoint.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["checkpoint_id"],
            "checkpoint_map": checkpoint.get("checkpoint_map") or {},
        }
    }


async def copy_thread(resources: Resources, thread: ThreadRecord) -> ThreadRecord:
    """A new thread of the same owner with `thread`'s metadata and checkpoints; its metadata
    names the graph (`graph_id`), since no run of the copy does yet."""
    runs = await resources.run_records.thread_runs(thread.thread_id, thread.owner)
    name = graph_name(thread, runs[-1] if runs else None)
    metadata = {**thread.metadata, **({"graph_id": name} if name else {})}
    copied = await resources.thread_records.copy_thread(
        thread.thread_id, thread.owner, metadata, checkpoint_quota(resources.settings)
    )
    if copied is None:
        raise thread_not_found(thread.thread_id)  # deleted meanwhile
    logger.info("thread copied", thread_id=thread.thread_id, copy=copied.thread_id)
    return copied
