"""LangGraph's `events` stream mode: a run that asks for it is streamed with
`astream_events(version="v2")`, as LangGraph's server streams such runs
(langgraph_api/stream.py), and each callback event is recorded whole.

Only those runs pay for it: the events are every node's and model's start, stream and end,
each with its inputs and outputs, which a run without the mode never builds.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from langgraph.pregel import Pregel

__all__ = ["EVENTS_MODE", "stream_with_events"]

EVENTS_MODE = "events"

_HIDDEN = "langsmith:hidden"  # events LangGraph's server does not send


async def stream_with_events(
    graph: Pregel,
    graph_input: Any,
    config: dict[str, Any],
    *,
    run_id: str,
    graph_name: str,
    attempt: int,
    metadata: dict[str, Any],
    subgraphs: bool,
    **kwargs: Any,
) -> AsyncIterator[Any]:
    """The items `graph.astream(graph_input, config, subgraphs=subgraphs, **kwargs)` would
    yield, with each other callback event between them as an `events` part
    (`("events", event)`, or `((), "events", event)` with `subgraphs`).

    The graph's own run is the run's id on its first attempt (the root events' `run_id`, as
    LangGraph's server has it), a fresh one on a retry. Its `on_chain_stream` events carry the
    stream's parts, which are yielded as `astream` yields them, not as events. A graph left
    with LangChain's default name is named by its registered name, as LangGraph's server
    renames it (the root events' `name`). Each event's `metadata` starts with the run's
    `metadata` and `run_attempt`, as there (LangChain adds the configurable's `run_id`,
    `thread_id`, `graph_id`, `assistant_id`), without writing them into the checkpoints.
    """
    config = {**config}
    shared = {**metadata, "run_attempt": attempt}
    if attempt == 1:
        config["run_id"] = uuid.UUID(run_id)
    if graph.name == "LangGraph":
        config["run_name"] = graph_name
    root: str | None = None
    async for event in graph.astream_events(  # type: ignore[call-overload]
        graph_input, config, version="v2", subgraphs=subgraphs, **kwargs
    ):
        if root is None:
            root = event["run_id"]  # the first event is the graph's own `on_chain_start`
        if _HIDDEN in (event.get("tags") or ()):
            continue
        if event["event"] == "on_chain_stream" and event["run_id"] == root:
            yield event["data"]["chunk"]
        else:
            event["metadata"] = {**shared, **event.get("metadata", {})}
            yield ((), EVENTS_MODE, event) if subgraphs else (EVENTS_MODE, event)
