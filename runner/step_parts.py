"""LangGraph's `debug`, `tasks` and `checkpoints` stream parts, as LangGraph's server sends
them (langgraph_api/stream.py and serde.py, observed on `langgraph dev`, langgraph-api 0.16.7).

The graph makes these parts itself (`graph.astream(stream_mode=[...])`); what the server adds,
and what is kept here, is:
- a `debug` checkpoint's payload also carries `checkpoint` and `parent_checkpoint` (the two
  configs as LangGraph's checkpoint objects), and each of its tasks with a subgraph's config
  for `state` has it as `checkpoint` instead;
- a task's `metadata` (a `tasks` part, or a `debug` part of type `task`) starts with the run's
  metadata, its graph, assistant and attempt, as the run's config carries them there;
- an exception (a failed task's `error`) is `{"error": <type>, "message": <text>}`, the text
  kept for the exception types LangGraph's server shows and replaced otherwise.

Only runs that ask for one of the modes stream them: each step's checkpoint holds the whole
state, which other runs never encode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from langgraph.errors import EmptyInputError, GraphBubbleUp, InvalidUpdateError, TaskNotFound
from pydantic import BaseModel

__all__ = ["STEP_MODES", "step_part"]

STEP_MODES = frozenset({"debug", "tasks", "checkpoints"})

# the exceptions whose text LangGraph's server shows (langgraph_api/serde.py `default`)
_SHOWN_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    RuntimeError,
    RecursionError,
    TimeoutError,
    InvalidUpdateError,
    GraphBubbleUp,
    EmptyInputError,
    TaskNotFound,
)
_HIDDEN_ERROR = "An internal error occurred"
_RUNSTREAM_METADATA = frozenset({"resume_id"})  # runstream's own, in its runs' config metadata


def step_part(mode: str, chunk: Any, task_metadata: Mapping[str, Any]) -> Any:
    """One part of mode `mode` (one of `STEP_MODES`) as JSON values, as LangGraph's server
    sends it; `task_metadata` is what a task's `metadata` starts with."""
    if mode == "debug":
        kind = chunk.get("type")
        payload = chunk.get("payload")
        if kind == "checkpoint" and payload:
            payload = _debug_checkpoint(payload)
        elif kind == "task" and payload:
            payload = _task(payload, task_metadata)
        chunk = {**chunk, "payload": payload}
    elif mode == "tasks" and "input" in chunk:  # a task starting (a result has no `input`)
        chunk = _task(chunk, task_metadata)
    return msgspec.to_builtins(chunk, enc_hook=_encode)


def _task(payload: Mapping[str, Any], task_metadata: Mapping[str, Any]) -> dict[str, Any]:
    own = {k: v for k, v in (payload.get("metadata") or {}).items() if k not in _RUNSTREAM_METADATA}
    return {**payload, "metadata": {**task_metadata, **own}}


def _debug_checkpoint(payload: Mapping[str, Any]) -> dict[str, Any]:
    """langgraph_api's `_preprocess_debug_checkpoint`."""
    return {
        **payload,
        "checkpoint": _checkpoint_of(payload.get("config")),
        "parent_checkpoint": _checkpoint_of(payload.get("parent_config")),
        "tasks": [_debug_task(task) for task in payload.get("tasks") or ()],
    }


def _debug_task(task: Mapping[str, Any]) -> dict[str, Any]:
    state = task.get("state")
    if not isinstance(state, Mapping) or not state.get("configurable"):
        return dict(task)
    shown = {k: v for k, v in task.items() if k != "state"}
    return {**shown, "checkpoint": state["configurable"]}


def _checkpoint_of(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """langgraph_api's `runnable_config_to_checkpoint`: a config's checkpoint, or None."""
    configurable = (config or {}).get("configurable") or {}
    if not configurable.get("thread_id") or not configurable.get("checkpoint_id"):
        return None
    checkpoint = {
        "checkpoint_id": configurable["checkpoint_id"],
        "thread_id": configurable["thread_id"],
    }
    if "checkpoint_ns" in configurable:
        checkpoint["checkpoint_ns"] = configurable["checkpoint_ns"] or ""
    if "checkpoint_map" in configurable:
        checkpoint["checkpoint_map"] = configurable["checkpoint_map"]
    return checkpoint


def _encode(value: Any) -> Any:
    if isinstance(value, BaseException):
        shown = isinstance(value, _SHOWN_ERRORS)
        return {"error": type(value).__name__, "message": str(value) if shown else _HIDDEN_ERROR}
    if isinstance(value, BaseModel):  # LangChain's messages among them
        return value.model_dump(mode="json")
    dump = getattr(value, "model_dump", None)  # runstream's `AuthUser`, as LangGraph's users
    if callable(dump) and not isinstance(value, type):
        return dump()
    if isinstance(value, Mapping):
        return dict(value)
    return repr(value)  # anything else a graph keeps in its state: shown, never fatal
