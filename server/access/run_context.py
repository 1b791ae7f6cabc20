"""A run's context checked against its graph's `context_schema` at submit (422), so a context
the graph cannot take is refused before anything is recorded rather than failing the run. An
assistant's context is checked the same way when it is created or updated
(`server/langgraph/assistants.py`): on its own, the schema's defaults filling the rest, as a
run that gives no context of its own gets it (a required field it lacks excepted: its runs may
give it), so an assistant whose runs would be refused is refused rather than saved."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from project.graph_context import ContextRefused, graph_context, takes_run_context
from server.errors import ApiError
from server.resources import Resources

__all__ = ["check_context", "check_context_with", "context_schema"]


async def context_schema(resources: Resources, graph: str) -> Any:
    """Graph `graph`'s `context_schema` (None: it declares none)."""
    return (await resources.graph_for_reading(graph)).context_schema


def check_context_with(
    schema: Any, graph: str, context: Mapping[str, Any], *, partial: bool = False
) -> None:
    """422 `invalid_request` when `schema` (graph `graph`'s `context_schema`) refuses
    `context`, naming the field (`partial`: an assistant's context, which its runs may
    complete with a required field, `project.graph_context`). A graph on runstream's
    `RunContext` (the built-ins) takes no context: its keys reach it through `configurable`,
    where the graph's keys are checked."""
    if takes_run_context(schema):
        return
    try:
        graph_context(schema, context, partial=partial)
    except ContextRefused as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None


async def check_context(resources: Resources, graph: str, context: Mapping[str, Any]) -> None:
    """`check_context_with` graph `graph`'s own schema: `context` is the assistant's context
    updated by the run's."""
    check_context_with(await context_schema(resources, graph), graph, context)
