"""LangGraph's assistant routes, and the server's own `/ok` and `/info`.

Every registered graph is an assistant of its own (LangGraph's id for it, `uuid5` of the graph
name; the name is accepted too), which every caller sees and none can change. A caller creates
assistants of its own (`POST /assistants`): a graph with a saved `config`, `context`,
`metadata`, name and description, versioned (each update is a new version, and any version
can be made the active one again). A run made with one takes its graph and its configurable
(`submit.py`). Another caller's assistant is 404 on every route, as an unknown one.
Stored in `stream_store/assistant_records.py`; docs/langgraph.md, "Assistants".

One route for each of the SDK's eleven assistant calls, each with its checks; `/ok` and `/info`
beside them.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from importlib.metadata import version
from typing import Annotated, Any

import msgspec
import structlog
from litestar import Controller, Response, delete, get, patch, post
from litestar.params import Body, Parameter

from server import inputs
from server.access.assistants import (
    allowed_assistant,
    assistant_listing_filters,
    new_assistant_filters,
    record_assistant,
)
from server.access.run_context import check_context_with, context_schema
from server.callers.auth import Caller
from server.callers.budgets import QUERY, WRITE
from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.resources import Resources
from stream_store.assistant_records import AssistantFields, AssistantRecord
from stream_store.errors import Conflict, NotFound
from stream_store.limits import (
    ASSISTANT_CONFIG_MAX_BYTES,
    ASSISTANT_DESCRIPTION_MAX_CHARS,
    ASSISTANT_NAME_MAX_CHARS,
)
from stream_store.metadata_filters import matches
from stream_store.run_status import WORKING
from stream_store.thread_deletion import delete_assistant

from .graph_schemas import graph_schemas, subgraph_schemas
from .submit import unprocessable
from .views import (
    assistant_of,
    assistant_view,
    graph_assistant,
    registered_graph,
    version_view,
)
from .wire import (
    Assistant,
    AssistantCount,
    AssistantCreate,
    AssistantLatest,
    AssistantPatch,
    AssistantSearch,
    AssistantVersion,
    AssistantVersions,
)

__all__ = [
    "AssistantsController",
    "info",
    "ok",
    "owned_assistant",
    "search_assistants",
]

logger = structlog.get_logger()

XRAY_DEPTH = re.compile(r"[0-9]{1,3}")  # `re`'s [0-9] is ASCII only, unlike \d


def _graph_assistants(resources: Resources) -> list[AssistantRecord]:
    return [graph_assistant(name, resources.started_at) for name in resources.graphs.names()]


async def search_assistants(
    resources: Resources, caller: Caller, body: AssistantSearch, *, limit: int
) -> list[AssistantRecord]:
    """The graphs' assistants and the caller's that `body` asks for (at most `limit`), once the
    project's `assistants.search` handler allowed it and with its filter applied: what
    `POST /assistants/search` lists, and `/mcp` offers as tools."""
    filters = await assistant_listing_filters(
        caller,
        {
            "graph_id": body.graph_id,
            "metadata": body.metadata or {},
            "limit": body.limit,
            "offset": body.offset,
        },
    )
    return await resources.searched_assistants(caller.owner).search_assistants(
        caller.owner,
        _graph_assistants(resources),
        graph=body.graph_id,
        name=body.name,
        metadata=body.metadata or {},
        auth_filters=filters,
        limit=limit,
        offset=body.offset,
        sort_by=body.sort_by or "created_at",
        descending=(body.sort_order or "desc") == "desc",
    )


def _read_only(assistant: AssistantRecord) -> Conflict:
    return Conflict(
        f"assistant {assistant.assistant_id} is graph {assistant.graph!r}'s own assistant,"
        " shared by every caller, and cannot be changed or deleted: create an assistant of the"
        " graph with POST /assistants (assistants.create) and change that one",
        code="assistant_read_only",
    )


async def owned_assistant(
    resources: Resources,
    caller: Caller,
    assistant_id: str,
    action: str,
    value: dict[str, Any] | None = None,
) -> AssistantRecord:
    """The caller's created assistant `assistant_id` names, to change or delete (404 as for
    any unknown one; 409 for a graph's own, which is everyone's), as the project's handler
    allows `action` on it. Reading one, a graph's own included, is `allowed_assistant`'s."""
    assistant = await allowed_assistant(resources, caller, assistant_id, action, value)
    if assistant.owner is None:
        raise _read_only(assistant)
    return assistant


def _graph(resources: Resources, graph_id: str) -> str:
    """A registered graph's name (404 otherwise, as LangGraph answers)."""
    if graph_id not in resources.graphs:
        known = ", ".join(resources.graphs.names())
        raise NotFound(f"graph {graph_id[:100]!r} not found; registered graphs: {known}")
    return graph_id


def _within(value: Any, what: str) -> None:
    size = len(msgspec.json.encode(value))
    if size > ASSISTANT_CONFIG_MAX_BYTES:
        raise ApiError(
            413,
            "input_too_large",
            f"{what} is {size} bytes as JSON; the limit is {ASSISTANT_CONFIG_MAX_BYTES}",
        )


def _text(value: str | None, what: str, limit: int) -> None:
    if value is not None and len(value) > limit:
        raise ApiError(
            413, "input_too_large", f"{what} is {len(value)} characters; the limit is {limit}"
        )


def _in_step(
    config: dict[str, Any], context: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`config` and `context` kept in step, as LangGraph keeps an assistant's: the context is
    `config.configurable`, and a context given alone becomes it."""
    configurable = config.get("configurable")
    if configurable is not None and not isinstance(configurable, dict):
        raise unprocessable("config.configurable must be an object")
    if configurable and context and configurable != context:
        raise unprocessable(
            "give config.configurable or context, not both (LangGraph keeps them as one)"
        )
    if configurable:
        return config, dict(configurable)
    if context:
        return {**config, "configurable": dict(context)}, context
    return config, {}


def _checked(
    resources: Resources,
    graph: str,
    config: dict[str, Any],
    context: dict[str, Any],
    schemas: dict[str, Any],
) -> None:
    """413 for a config or context too big; 422 for a configurable key the graph does not take
    (the rule of runs' `configurable`, docs/protocol.md section 3.1) or a context its
    `context_schema` refuses (`schemas`: the graphs' schemas by name, `run_context.py`)."""
    _within(config, "config")
    _within(context, "context")
    inputs.configurable(context, resources.graphs, graph)
    if graph not in schemas:  # moved to another graph meanwhile (an update under its lock)
        raise Conflict("the assistant changed meanwhile: try again", code="assistant_changed")
    check_context_with(schemas[graph], graph, context, partial=True)


async def _schemas(resources: Resources, graph: str) -> dict[str, Any]:
    """`graph`'s `context_schema`, by its name, for `_checked`."""
    return {graph: await context_schema(resources, graph)}


def _checked_text(name: str | None, description: str | None) -> None:
    _text(name, "name", ASSISTANT_NAME_MAX_CHARS)
    _text(description, "description", ASSISTANT_DESCRIPTION_MAX_CHARS)


def _change(
    resources: Resources, body: AssistantPatch, current: AssistantRecord, schemas: dict[str, Any]
) -> AssistantFields:
    """The next version of `current` that `body` asks for, checked (LangGraph's update: what
    is left out stays; `metadata` is merged in; a `config` replaces the config, keeping the
    context unless it brings a configurable)."""
    graph = _graph(resources, body.graph_id) if body.graph_id else current.graph
    if body.config:
        config = body.config
        kept = {} if body.config.get("configurable") else current.context
        context = body.context if body.context is not None else kept
    elif body.context is not None:
        config = {k: v for k, v in current.config.items() if k != "configurable"}
        context = body.context
    else:
        config, context = current.config, current.context
    config, context = _in_step(config, context)
    _checked(resources, graph, config, context, schemas)
    metadata = {**current.metadata, **(body.metadata or {})}
    inputs.metadata(metadata, resources.settings)
    return AssistantFields(
        assistant_id=current.assistant_id,
        graph=graph,
        name=body.name if body.name is not None else current.name,
        description=body.description if body.description is not None else current.description,
        config=config,
        context=context,
        metadata=metadata,
    )


def _xray_depth(xray: str | None) -> bool | int:
    """`?xray=`: true, false, or how many levels of subgraphs to draw, in ASCII digits
    (`str.isdigit` also takes `²` and `٣`, which `int` refuses or reads, and `int` refuses more
    than 4,300 digits: both were 500s)."""
    if xray is None:
        return False
    if xray.lower() in ("true", "false"):
        return xray.lower() == "true"
    if XRAY_DEPTH.fullmatch(xray):
        return int(xray)
    raise ApiError(
        422, "invalid_request", "xray must be true, false or a number of levels (0 to 999)"
    )


def _versions_of(assistant: AssistantRecord, body: AssistantVersions) -> list[AssistantVersion]:
    """A graph's own assistant has one version, itself."""
    if not (body.metadata or {}).items() <= assistant.metadata.items():
        return []
    return [version_view(assistant)][body.offset : body.offset + body.limit]


class AssistantsController(Controller):
    """The graphs' own assistants (every caller's), and the caller's created ones."""

    path = "/assistants"
    tags = ["langgraph"]

    @post("/", status_code=200, summary="Create an assistant of a graph")
    async def create(
        self, data: AssistantCreate, resources: Resources, quotas: CallerQuotas, caller: Caller
    ) -> Assistant:
        assistant_id = (
            inputs.object_id(data.assistant_id, "assistant")
            if data.assistant_id
            else str(uuid.uuid4())
        )
        graph = _graph(resources, data.graph_id)
        config, context = _in_step(data.config or {}, data.context or {})
        _checked(resources, graph, config, context, await _schemas(resources, graph))
        value: dict[str, Any] = {
            "assistant_id": assistant_id,
            "graph_id": graph,
            "config": config,
            "context": context,
            "metadata": dict(data.metadata or {}),
            "if_exists": data.if_exists,
            "name": data.name,
        }
        filters = await new_assistant_filters(caller, value)  # may stamp metadata
        metadata = value.get("metadata") or {}
        inputs.metadata(metadata, resources.settings)
        _checked_text(data.name, data.description)
        existing: AssistantRecord | None = None
        with contextlib.suppress(NotFound):
            existing = await assistant_of(resources, caller.owner, assistant_id)
        if existing is None:
            created = await record_assistant(
                resources,
                quotas,
                caller,
                AssistantFields(
                    assistant_id=assistant_id,
                    graph=graph,
                    name=data.name or "Untitled",
                    description=data.description,
                    config=config,
                    context=context,
                    metadata=metadata,
                ),
            )
            if created is not None:
                logger.info("assistant created", assistant_id=assistant_id, graph=graph)
                return assistant_view(created)
            with contextlib.suppress(NotFound):  # made meanwhile: by this caller, or another
                existing = await assistant_of(resources, caller.owner, assistant_id)
        if (
            existing is not None
            and data.if_exists == "do_nothing"
            and matches(existing.metadata, filters)
        ):
            return assistant_view(existing)
        raise Conflict(f"Assistant {assistant_id} already exists", code="assistant_exists")

    @post(
        "/search",
        status_code=200,
        summary="The graphs' assistants and the caller's",
        dependencies=QUERY,
    )
    async def search(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantSearch | None, Body()] = None,
    ) -> Response[list[dict[str, Any]]]:
        body = data or AssistantSearch()
        # one more than the page tells whether there is a next page
        found = await search_assistants(resources, caller, body, limit=body.limit + 1)
        views = [msgspec.to_builtins(assistant_view(a)) for a in found[: body.limit]]
        if body.select:
            views = [{k: v for k, v in view.items() if k in body.select} for view in views]
        headers = {}
        if len(found) > body.limit:
            headers["X-Pagination-Next"] = str(body.offset + body.limit)
        return Response(views, headers=headers)

    @post("/count", status_code=200, summary="How many assistants match", dependencies=QUERY)
    async def count(
        self,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantCount | None, Body()] = None,
    ) -> int:
        body = data or AssistantCount()
        filters = await assistant_listing_filters(
            caller, {"graph_id": body.graph_id, "metadata": body.metadata or {}}
        )
        return await resources.searched_assistants(caller.owner).count_assistants(
            caller.owner,
            _graph_assistants(resources),
            graph=body.graph_id,
            name=body.name,
            metadata=body.metadata or {},
            auth_filters=filters,
        )

    @get("/{assistant_id:str}/graph", summary="The assistant's graph: nodes and edges")
    async def graph(
        self,
        assistant_id: str,
        resources: Resources,
        caller: Caller,
        xray: Annotated[str | None, Parameter(required=False)] = None,
    ) -> dict[str, Any]:
        depth = _xray_depth(xray)
        assistant = await allowed_assistant(resources, caller, assistant_id)
        name = registered_graph(resources, assistant)
        graph = await resources.graph_for_reading(name)
        drawable = await graph.aget_graph(xray=depth)
        return drawable.to_json()

    @get("/{assistant_id:str}", summary="An assistant, by its id (or a graph's name)")
    async def read(self, assistant_id: str, resources: Resources, caller: Caller) -> Assistant:
        return assistant_view(await allowed_assistant(resources, caller, assistant_id))

    @patch(
        "/{assistant_id:str}",
        summary="Change an assistant: a new version, made active",
        dependencies=WRITE,
    )
    async def update(
        self,
        assistant_id: str,
        data: AssistantPatch,
        resources: Resources,
        caller: Caller,
    ) -> Assistant:
        value: dict[str, Any] = {
            "graph_id": data.graph_id,
            "config": data.config,
            "context": data.context,
            "metadata": dict(data.metadata) if data.metadata is not None else None,
            "name": data.name,
        }
        current = await owned_assistant(resources, caller, assistant_id, "update", value)
        if value.get("metadata") != data.metadata:  # stamped by the project's handler
            data = msgspec.structs.replace(data, metadata=value["metadata"])
        _checked_text(data.name, data.description)
        graph = _graph(resources, data.graph_id) if data.graph_id else current.graph
        schemas = await _schemas(resources, graph)
        _change(resources, data, current, schemas)  # checked before anything is locked
        updated = await resources.assistant_records.update_assistant(
            current.assistant_id,
            caller.owner,
            lambda now: _change(resources, data, now, schemas),
            max_versions=resources.settings.max_assistant_versions,
        )
        if updated is None:
            raise NotFound(f"assistant {assistant_id} not found")
        return assistant_view(updated)

    @delete(
        "/{assistant_id:str}", status_code=204, summary="Delete an assistant", dependencies=WRITE
    )
    async def remove(
        self,
        assistant_id: str,
        resources: Resources,
        caller: Caller,
        delete_threads: inputs.FlagQuery = None,
    ) -> None:
        """LangGraph's delete: the assistant's versions and crons go with it, then its queued
        and running runs are cancelled; its runs stay. `delete_threads=true`: the threads it
        ran on go too, with their runs and state, in the same transaction (409 with nothing
        changed while one of them has a queued or running run; an interrupted run is over, and
        goes with its thread)."""
        assistant = await owned_assistant(resources, caller, assistant_id, "delete")
        if not await delete_assistant(
            resources.assistant_records,
            resources.lifecycle,
            assistant.assistant_id,
            caller.owner,
            with_threads=inputs.flag(delete_threads, "delete_threads"),
        ):
            raise NotFound(f"assistant {assistant_id} not found")
        # After the delete: a run submitted meanwhile (its check saw the assistant) is
        # cancelled too.
        for run_id in await resources.assistant_records.active_runs(
            assistant.assistant_id, caller.owner
        ):
            run = await resources.run_records.get_run(run_id, caller.owner)
            if run is not None and run.status in WORKING:
                with contextlib.suppress(Conflict):  # it ended meanwhile
                    await resources.lifecycle.cancel(run)
        logger.info("assistant deleted", assistant_id=assistant.assistant_id)

    @post(
        "/{assistant_id:str}/versions",
        status_code=200,
        summary="An assistant's versions",
        dependencies=QUERY,
    )
    async def versions(
        self,
        assistant_id: str,
        resources: Resources,
        caller: Caller,
        data: Annotated[AssistantVersions | None, Body()] = None,
    ) -> list[AssistantVersion]:
        body = data or AssistantVersions()
        assistant = await allowed_assistant(resources, caller, assistant_id)
        if assistant.owner is None:
            return _versions_of(assistant, body)
        found = await resources.assistant_records.versions(
            assistant.assistant_id,
            caller.owner,
            metadata=body.metadata or {},
            limit=body.limit,
            offset=body.offset,
        )
        if found is None:
            raise NotFound(f"assistant {assistant_id} not found")
        return [version_view(v) for v in found]

    @post(
        "/{assistant_id:str}/latest",
        status_code=200,
        summary="Make a version the active one",
        dependencies=WRITE,
    )
    async def set_latest(
        self, assistant_id: str, data: AssistantLatest, resources: Resources, caller: Caller
    ) -> Assistant:
        assistant = await owned_assistant(
            resources, caller, assistant_id, "update", {"version": data.version}
        )
        updated, has_version = await resources.assistant_records.set_latest(
            assistant.assistant_id, caller.owner, data.version
        )
        if updated is None:
            raise NotFound(f"assistant {assistant_id} not found")
        if not has_version:
            raise NotFound(f"Version {data.version} not found for assistant {assistant_id}")
        return assistant_view(updated)

    @get("/{assistant_id:str}/schemas", summary="The assistant's graph's JSON schemas")
    async def schemas(
        self, assistant_id: str, resources: Resources, caller: Caller
    ) -> dict[str, Any]:
        assistant = await allowed_assistant(resources, caller, assistant_id)
        name = registered_graph(resources, assistant)
        graph = await resources.graph_for_reading(name)
        return {"graph_id": name, **graph_schemas(graph)}

    @get(
        ["/{assistant_id:str}/subgraphs", "/{assistant_id:str}/subgraphs/{namespace:str}"],
        summary="The assistant's graph's subgraphs' JSON schemas, by namespace",
    )
    async def subgraphs(
        self,
        assistant_id: str,
        resources: Resources,
        caller: Caller,
        namespace: str | None = None,
        recurse: inputs.FlagQuery = None,
    ) -> dict[str, Any]:
        deep = inputs.flag(recurse, "recurse")
        assistant = await allowed_assistant(resources, caller, assistant_id)
        name = registered_graph(resources, assistant)
        graph = await resources.graph_for_reading(name)
        try:
            return await subgraph_schemas(graph, namespace, deep)
        except NotImplementedError:  # as LangGraph's server answers
            raise ApiError(
                422, "invalid_request", "The graph does not support visualization"
            ) from None


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
