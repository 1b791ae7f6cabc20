"""A run's context checked against its graph's `context_schema` at submit (422), so a context
the graph cannot take is refused before anything is recorded rather than failing the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runner.graph_context import ContextRefused, graph_context, takes_run_context

from ..errors import ApiError
from ..resources import Resources

__all__ = ["check_context"]


async def check_context(resources: Resources, graph: str, context: Mapping[str, Any]) -> None:
    """422 `invalid_request` when graph `graph`'s `context_schema` refuses `context` (the
    assistant's context updated by the run's). A graph on runstream's `RunContext` (the
    built-ins) takes no context of the run's: its keys reach it through `configurable`."""
    pregel = await resources.graph_for_reading(graph)
    if takes_run_context(pregel.context_schema):
        return
    try:
        graph_context(pregel.context_schema, context)
    except ContextRefused as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
