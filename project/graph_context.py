"""A graph's `runtime.context`: runstream's `RunContext`, or the run's context built into the
graph's own `context_schema`.

As LangGraph's server does (langgraph_api/stream.py `_filter_context_by_schema`, then
langgraph's `_coerce_context`): the assistant's context updated by the run's, its keys the
schema does not name dropped, then a dataclass or Pydantic schema built from it (its defaults
filling what was not given), a TypedDict or no schema given the dict itself. runstream checks
this at submit too (`server.langgraph.submit`), so a context the schema refuses is a 422 there,
never a run that fails.

The built-in graphs take runstream's `RunContext` instead (`runner.graphs`): a graph whose
`context_schema` is `RunContext` gets that, whatever the run's context (`takes_run_context`).
What a node does in its run (`once`, its model) is `runner.run_scope`'s, not the context's.
This module imports no LangChain, so the server checks a context at submit without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_type_hints, is_typeddict

from pydantic import BaseModel, ValidationError

from .errors import ProjectContractError

__all__ = ["ContextRefused", "RunContext", "graph_context", "takes_run_context"]


@dataclass
class RunContext:
    """What runstream hands every node of a run (LangGraph's `context`)."""

    run_id: str
    thread_id: str
    attempt: int


def takes_run_context(schema: Any) -> bool:
    """Whether a graph's `context_schema` is runstream's `RunContext` (the built-ins'): such a
    graph gets that, and no context of the run's."""
    return isinstance(schema, type) and issubclass(schema, RunContext)


class ContextRefused(ProjectContractError, ValueError):
    """A run's context that the graph's `context_schema` cannot take."""


def _is_model(schema: Any) -> bool:
    return isinstance(schema, type) and issubclass(schema, BaseModel)


def _fields(schema: type[Any]) -> set[str] | None:
    """The keys `schema` names; None: it takes any (no fields it declares can be found)."""
    if _is_model(schema):
        return set(schema.model_fields)
    if dataclasses.is_dataclass(schema):
        return {field.name for field in dataclasses.fields(schema)}
    if is_typeddict(schema):
        return set(get_type_hints(schema))
    return None


def graph_context(
    schema: type[Any] | None, values: Mapping[str, Any], *, partial: bool = False
) -> Any:
    """`values` (the assistant's context updated by the run's) as the graph's context.

    `partial`: `values` is an assistant's context, which its runs may complete: a required
    field it lacks is not refused (the rest is checked as far as the schema lets it be; a
    dataclass with a required field missing cannot be built, so is not checked).

    Raises:
        ContextRefused: the schema refuses it (a wrong type, a value out of its bounds, a
        required field missing), with the schema's own message, naming the field.
    """
    if schema is None:
        return dict(values)
    names = _fields(schema)
    taken = {k: v for k, v in values.items() if names is None or k in names}
    if not (dataclasses.is_dataclass(schema) or _is_model(schema)):
        return taken  # a TypedDict (or a schema LangGraph passes a dict to as it is)
    try:
        return schema(**taken)
    except ValidationError as exc:
        errors = [
            e for e in exc.errors(include_url=False) if not (partial and e["type"] == "missing")
        ]
        if not errors:
            return None
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in errors
        )
        raise ContextRefused(f"context does not fit {schema.__name__}: {problems}") from None
    except TypeError as exc:  # a dataclass's missing field
        if partial and _lacks_required(schema, taken):
            return None
        raise ContextRefused(f"context does not fit {schema.__name__}: {exc}") from None
    except ValueError as exc:  # the schema's own check
        raise ContextRefused(f"context does not fit {schema.__name__}: {exc}") from None


def _lacks_required(schema: Any, values: Mapping[str, Any]) -> bool:
    """Whether dataclass `schema` has a field without a default that `values` does not give."""
    return any(
        field.name not in values
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
        for field in dataclasses.fields(schema)
        if field.init
    )
