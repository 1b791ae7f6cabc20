"""Which assistant a run was made with, as an id: read by the LangGraph API's views and by the
worker, which hands it to the graph (`config["configurable"]["assistant_id"]`)."""

from __future__ import annotations

import uuid

from .run_records import RunRecord

__all__ = ["assistant_id_for", "run_assistant_id"]

_ASSISTANT_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


def assistant_id_for(graph: str) -> str:
    """The id LangGraph gives a graph's system assistant, so ids match a stock server's."""
    return str(uuid.uuid5(_ASSISTANT_NAMESPACE, graph))


def run_assistant_id(run: RunRecord) -> str:
    """The assistant a run was made with: a created one's id, kept in its LangGraph fields
    (`kwargs`), or its graph's own (runs of `/v1`, and of a graph's assistant)."""
    named = run.kwargs.get("assistant_id")
    return named if isinstance(named, str) else assistant_id_for(run.graph)
