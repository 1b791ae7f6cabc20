"""LangGraph's assistant routes (one assistant per registered graph) and the server's own:
`/ok` and `/info`."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.params import Body, Parameter

from ..auth import Caller
from ..errors import ApiError
from ..resources import Resources
from .views import assistant, graph_of_assistant
from .wire import Assistant, AssistantCount, AssistantSearch

__all__ = ["AssistantsController", "info", "ok"]


def _assistants(resources: Resources, query: AssistantSearch | AssistantCount) -> list[Assistant]:
    """The assistants (one per graph) that match a search's graph id, name and metadata."""
    found = [assistant(name, resources.started_at) for name in resources.graphs.names()]
    return [
        a
        for a in found
        if query.graph_id in (None, a.graph_id)
        and query.name in (None, a.name)
        and (query.metadata or {}).items() <= a.metadata.items()
    ]


class AssistantsController(Controller):
    """Each registered graph is an assistant, with LangGraph's id for it."""

    path = "/assistants"
    tags = ["langgraph"]

    @post("/search", status_code=200, summary="The assistants (one per graph)")
    async def search(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantSearch | None, Body()] = None,
    ) -> list[Assistant]:
        body = data or AssistantSearch()
        return _assistants(resources, body)[body.offset : body.offset + body.limit]

    @post("/count", status_code=200, summary="How many assistants match")
    async def count(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantCount | None, Body()] = None,
    ) -> int:
        return len(_assistants(resources, data or AssistantCount()))

    @get("/{assistant_id:str}/graph", summary="The assistant's graph: nodes and edges")
    async def graph(
        self,
        assistant_id: str,
        resources: Resources,
        caller: Caller,
        xray: Annotated[str | None, Parameter(required=False)] = None,
    ) -> dict[str, Any]:
        name = graph_of_assistant(resources, assistant_id)
        depth: bool | int = False
        if xray is not None:
            if xray.lower() in ("true", "false"):
                depth = xray.lower() == "true"
            elif xray.isdigit():
                depth = int(xray)
            else:
                raise ApiError(422, "invalid_request", "xray must be true, false or a number")
        drawable = await resources.graphs.get(name, resources.checkpointer).aget_graph(xray=depth)
        return drawable.to_json()

    @get("/{assistant_id:str}", summary="An assistant, by its id or its graph's name")
    async def read(self, assistant_id: str, resources: Resources, caller: Caller) -> Assistant:
        return assistant(graph_of_assistant(resources, assistant_id), resources.started_at)

    @get("/{assistant_id:str}/schemas", summary="The assistant's graph's JSON schemas")
    async def schemas(
        self, assistant_id: str, resources: Resources, caller: Caller
    ) -> dict[str, Any]:
        name = graph_of_assistant(resources, assistant_id)
        graph = resources.graphs.get(name, resources.checkpointer)
        return {
            "graph_id": name,
            "input_schema": graph.get_input_jsonschema(),
            "output_schema": graph.get_output_jsonschema(),
            "state_schema": graph.get_input_jsonschema(),
            "config_schema": None,
            "context_schema": None,
        }


@get("/ok", tags=["langgraph"], summary="LangGraph's liveness answer")
async def ok() -> dict[str, bool]:
    return {"ok": True}


@get("/info", tags=["langgraph"], summary="Server information, as LangGraph gives it")
async def info() -> dict[str, Any]:
    return {
        "version": version("runstream"),
        "flags": {"assistants": True, "crons": True, "langsmith": False},
        "host": {"kind": "runstream", "project_id": None, "revision_id": None},
    }
