"""A new run as both dialects record it: the rules on a run's input that `/v1/runs`
(server/v1/runs.py) and LangGraph's run routes (server/langgraph/submit.py) share, in one place.

Each dialect reads its own request into a graph, an input, a config and metadata; `new_run`
checks what the operator bounds and the graph allows, names the run, and caps the owner's
active runs the same way for both.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from server import inputs
from server.resources import Resources
from stream_store.run_submit import TITLE_CHARS, NewRun

__all__ = ["new_run", "title", "with_message_id"]


def with_message_id(message: dict[str, Any]) -> dict[str, Any]:
    """Give an input message an id now (its own if it has one), so that every attempt of the
    run names it the same: a retry's events and checkpoints then refer to the same message."""
    message["id"] = message.get("id") or str(uuid.uuid4())
    return message


def title(run_input: Mapping[str, Any]) -> str | None:
    """The run's title: the start of its input's first user message, if it has one."""
    messages = run_input.get("messages")
    first_user = next(
        (
            m.get("content")
            for m in (messages if isinstance(messages, list) else [])
            if isinstance(m, dict) and m.get("role") == "user"
        ),
        None,
    )
    return first_user[:TITLE_CHARS] if isinstance(first_user, str) and first_user else None


def new_run(
    resources: Resources,
    owner: str,
    *,
    graph: str,
    input: dict[str, Any],
    config: dict[str, Any],
    metadata: dict[str, Any],
    **fields: Any,
) -> NewRun:
    """The run to record for `owner`, once its `configurable` is one `graph` takes (400) and its
    metadata within the operator's bounds (413); `fields`: the rest of `NewRun` a dialect sets
    (thread, multitask strategy, LangGraph's kwargs ...)."""
    inputs.configurable(config.get("configurable") or {}, resources.graphs, graph)
    inputs.metadata(metadata, resources.settings)
    return NewRun(
        owner=owner,
        graph=graph,
        input=input,
        config=config,
        metadata=metadata,
        title=title(input),
        max_active_runs=resources.settings.max_active_runs,
        **fields,
    )
