"""A graph's JSON schemas (`GET /assistants/{id}/schemas`), and its subgraphs' by namespace
(`GET /assistants/{id}/subgraphs`), computed as LangGraph's server does
(langgraph_api/api/assistants.py `_graph_schemas`, `get_assistant_subgraphs`), so clients that
build forms from them (LangGraph Studio, agent-chat-ui) see the same shapes. A schema LangGraph
cannot compute is null, as there (e.g. the input schema of a `typing.TypedDict` state on
Python < 3.12). A state key is typed by LangChain's `create_model`, as there: pydantic's own
refuses the `__root__` field, which made every key `Any`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import structlog
from langchain_core.runnables.utils import create_model
from langgraph.pregel import Pregel
from pydantic import TypeAdapter

__all__ = ["graph_schemas", "subgraph_schemas"]

logger = structlog.get_logger()

# Keys of `configurable` that are LangGraph's own, not the graph's to show.
_EXCLUDED_CONFIG_KEYS = (
    "__pregel_checkpointer",
    "__pregel_store",
    "checkpoint_id",
    "checkpoint_ns",
    "thread_id",
)


def _state_jsonschema(graph: Pregel) -> dict[str, Any]:
    """Every state key the graph streams, typed by what its channel takes (Any otherwise)."""
    fields: dict[str, Any] = {}
    for key in graph.stream_channels_list:
        update_type = getattr(graph.channels[key], "UpdateType", Any)
        try:
            create_model(key, __root__=(update_type, None)).model_json_schema()
            fields[key] = (update_type, None)
        except Exception:
            fields[key] = (Any, None)
    return create_model(graph.get_name("State"), **fields).model_json_schema()


def _configurable_jsonschema(graph: Pregel) -> dict[str, Any]:
    """The `configurable` part of the graph's config schema only ({} when it has none)."""
    config_schema = graph.config_schema()  # deprecated, but LangGraph's server still reads it
    fields = getattr(config_schema, "model_fields", None)
    if fields is None or "configurable" not in fields:
        return {}
    configurable: Any = fields["configurable"].annotation
    schema: dict[str, Any] = TypeAdapter(configurable).json_schema()
    if schema:
        for key in _EXCLUDED_CONFIG_KEYS:
            schema.get("properties", {}).pop(key, None)
    config_type = getattr(graph, "config_type", None)
    if config_type is not None and hasattr(config_type, "__name__"):
        schema["title"] = config_type.__name__
    return schema


def _or_none(graph: Pregel, which: str, compute: Callable[[], Any]) -> Any:
    try:
        return compute()
    except Exception as exc:  # as LangGraph's server: logged, and the schema is null
        logger.warning("graph schema not computed", graph=graph.name, schema=which, error=str(exc))
        return None


def graph_schemas(graph: Pregel) -> dict[str, Any]:
    """`input_schema`, `output_schema`, `state_schema`, `config_schema`, `context_schema`."""
    return {
        "input_schema": _or_none(graph, "input", graph.get_input_jsonschema),
        "output_schema": _or_none(graph, "output", graph.get_output_jsonschema),
        "state_schema": _or_none(graph, "state", lambda: _state_jsonschema(graph)),
        "config_schema": _or_none(graph, "config", lambda: _configurable_jsonschema(graph)),
        "context_schema": _or_none(graph, "context", graph.get_context_jsonschema),
    }


async def subgraph_schemas(
    graph: Pregel, namespace: str | None, recurse: bool
) -> dict[str, dict[str, Any]]:
    """Each subgraph's schemas by its namespace (the node names down to it, joined by `|`):
    the graph's direct subgraphs, those under them too with `recurse`, only the one named
    `namespace` when given (LangGraph's `aget_subgraphs`; an unknown one gives `{}`).

    Raises:
        NotImplementedError: the graph cannot list its subgraphs.
    """
    return {
        name: graph_schemas(cast(Pregel, subgraph))  # (a local graph's are local graphs)
        async for name, subgraph in graph.aget_subgraphs(namespace=namespace, recurse=recurse)
    }
