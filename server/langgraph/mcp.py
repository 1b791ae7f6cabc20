"""LangGraph's MCP endpoint, `/mcp`, as `langgraph-api` serves it (`langgraph_api/api/mcp/`):
each assistant the caller can see is a tool; calling one runs it on a new thread and answers
its outcome.

The transport is MCP's streamable HTTP in its JSON-response form, as LangGraph's: one JSON-RPC
request a POST, answered with one JSON object; a notification or a response is taken with 202;
GET is 405 (no stream the server opens) and DELETE 404 (no sessions). A tool call is an
ordinary run of the caller's (recorded, queued, resumable, counted against their submits) and
reaches its assistant through the one door (`server.access`), as `POST /runs/wait` does; an
error of sign-in or of the door keeps its HTTP status rather than becoming a JSON-RPC error.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any

import msgspec
import structlog
from litestar import Request, Response, delete, get, post

from server.callers.auth import Caller
from server.callers.budgets import QUERY
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.assistant_records import AssistantRecord
from stream_store.errors import StoreUnavailable

from .assistants import search_assistants
from .follow import StreamCut, outcome_at_end
from .graph_schemas import graph_schemas
from .request_keys import RequestStamp
from .submit import submit
from .views import registered_graph
from .wire import AssistantSearch, RunCreate

__all__ = ["mcp_delete", "mcp_get", "mcp_post"]

logger = structlog.get_logger()

# the MCP protocol versions LangGraph's endpoint speaks, the latest its answer to any other
PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
LATEST_PROTOCOL_VERSION = "2025-11-25"
PAGE_SIZE = 100  # tools a `tools/list` page holds
MAX_TOOLS = 1000  # assistants a `tools/call` looks its tool up among, as LangGraph's

INVALID_PARAMS = -32602  # JSON-RPC's error codes
METHOD_NOT_FOUND = -32601

_NOT_A_NAME = re.compile(r"[^a-zA-Z0-9_\-.]")
_MESSAGE_TYPES = frozenset(
    f"{kind}{chunk}"
    for kind in ("AI", "Human", "Chat", "System", "Function", "Tool")
    for chunk in ("Message", "MessageChunk")
)
_MESSAGE_PARTS = frozenset(
    {
        "ToolCall",
        "ToolCallChunk",
        "InvalidToolCall",
        "UsageMetadata",
        "InputTokenDetails",
        "OutputTokenDetails",
    }
)
_TOOL_HINTS = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": False,
    "openWorldHint": True,
}


def tool_name(assistant_name: str) -> str:
    """An assistant's name as an MCP tool name (`^[a-zA-Z0-9_\\-.]{1,128}$`): blanks become
    one underscore, other characters outside the set are dropped."""
    return _NOT_A_NAME.sub("", re.sub(r"\s+", "_", assistant_name.strip()))[:128]


def _refers_to_messages(prop: dict[str, Any]) -> bool:
    items = prop.get("items", {}) if prop.get("type") == "array" else {}
    return any(
        str(option.get("$ref", "")).removeprefix("#/$defs/") in _MESSAGE_TYPES
        for option in items.get("oneOf") or items.get("anyOf") or []
    )


def tool_input_schema(input_schema: dict[str, Any]) -> dict[str, Any]:
    """The graph's input schema as a tool's: a list of LangChain messages becomes one string,
    the user's message (LangGraph's `simplify_mcp_schema_inplace`), and the schema is an
    object, as MCP requires."""
    schema = dict(input_schema)
    defs = dict(schema.get("$defs") or {})
    if defs.keys() & _MESSAGE_TYPES:
        for name in _MESSAGE_TYPES | _MESSAGE_PARTS:
            defs.pop(name, None)
        if defs:
            schema["$defs"] = defs
        else:
            schema.pop("$defs", None)
        schema["properties"] = {
            key: (
                {
                    "type": "string",
                    "title": prop.get("title", key),
                    "description": "The user message to send to the agent.",
                }
                if _refers_to_messages(prop)
                else prop
            )
            for key, prop in (schema.get("properties") or {}).items()
        }
    schema.setdefault("type", "object")
    return schema


def _http_error(message: str) -> Response[bytes]:
    return Response(
        msgspec.json.encode({"error": message}), status_code=400, media_type="application/json"
    )


def _result(request_id: Any, answer: dict[str, Any]) -> Response[bytes]:
    return Response(
        msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, **answer}),
        status_code=200,
        media_type="application/json",
    )


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


async def _tools(resources: Resources, assistants: list[AssistantRecord]) -> list[dict[str, Any]]:
    """One tool per assistant, by normalised name (a later one of the same name is left out,
    as LangGraph leaves it); an assistant whose graph's input schema cannot be made is left
    out too."""
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for assistant in assistants:
        name = tool_name(assistant.name or "")
        if name in seen:
            logger.warning("mcp_duplicate_tool_name", assistant_id=assistant.assistant_id)
            continue
        seen.add(name)
        try:
            graph = await resources.graph_for_reading(registered_graph(resources, assistant))
            schema = graph_schemas(graph).get("input_schema")
        except Exception as exc:  # a graph that cannot say its schema is no tool, as LangGraph
            logger.warning(
                "mcp_tool_schema_failed", assistant_id=assistant.assistant_id, error=str(exc)
            )
            continue
        if schema is None:
            continue
        tools.append(
            {
                "name": name,
                "title": assistant.name,
                "description": assistant.description
                or f"Tool based on the {assistant.name} assistant",
                "inputSchema": tool_input_schema(schema),
                "annotations": _TOOL_HINTS,
            }
        )
    return tools


async def _list_tools(
    resources: Resources, caller: Caller, params: dict[str, Any]
) -> dict[str, Any]:
    try:
        cursor = max(0, int(params.get("cursor", 0)))
    except (TypeError, ValueError):
        cursor = 0  # LangGraph reads an unreadable cursor as the first page
    page = AssistantSearch(limit=PAGE_SIZE, offset=cursor)
    assistants = await search_assistants(resources, caller, page, limit=PAGE_SIZE)
    result: dict[str, Any] = {"tools": await _tools(resources, assistants)}
    if len(assistants) == PAGE_SIZE:
        result["nextCursor"] = cursor + PAGE_SIZE
    return {"result": result}


async def _call_tool(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    params: dict[str, Any],
    stamp: RequestStamp,
) -> dict[str, Any]:
    name = params.get("name")
    if not name:
        return _error(INVALID_PARAMS, f"Unknown tool: {name}")
    everyone = await search_assistants(
        resources, caller, AssistantSearch(limit=MAX_TOOLS), limit=MAX_TOOLS
    )
    matching = [a for a in everyone if tool_name(a.name or "") == name]
    if not matching:
        return _error(INVALID_PARAMS, f"Unknown tool: {name}")
    if len(matching) > 1:
        return _error(INVALID_PARAMS, "Multiple tools found with the same name.")
    arguments = params.get("arguments")
    context = params.get("context")
    try:
        body = msgspec.convert(
            {
                "assistant_id": matching[0].assistant_id,
                "input": arguments if isinstance(arguments, dict) else {},
                **({"context": context} if context is not None else {}),
            },
            RunCreate,
        )
    except msgspec.ValidationError as exc:
        return _error(INVALID_PARAMS, f"Invalid tool call: {exc}")
    run = await submit(resources, quotas, caller, body, None, stamp)
    try:
        outcome = await outcome_at_end(resources, run)
    except StreamCut:
        raise StoreUnavailable(f"run {run.run_id}'s stream was cut before its end") from None
    if "__error__" in outcome:
        text = outcome["__error__"]["error"]
        return {"result": {"isError": True, "content": [{"type": "text", "text": text}]}}
    # LangGraph answers the outcome as Python's repr of it, which a model reads well enough
    return {"result": {"content": [{"type": "text", "text": repr(outcome)}]}}


def _initialize(params: dict[str, Any]) -> dict[str, Any]:
    requested = params.get("protocolVersion", LATEST_PROTOCOL_VERSION)
    return {
        "result": {
            "protocolVersion": requested
            if requested in PROTOCOL_VERSIONS
            else LATEST_PROTOCOL_VERSION,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "runstream", "version": version("runstream")},
        }
    }


@post(
    "/mcp",
    status_code=200,
    tags=["langgraph"],
    summary="MCP over streamable HTTP: the caller's assistants as tools",
    dependencies=QUERY,
)
async def mcp_post(
    request: Request[Any, Any, Any],
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    stamp: RequestStamp,
) -> Response[bytes]:
    try:
        message = msgspec.json.decode(await request.body())
    except msgspec.DecodeError:
        return _http_error("Invalid JSON")
    accept = request.headers.get("accept", "")
    if "application/json" not in accept and "text/event-stream" not in accept:
        return _http_error("Accept header must include application/json or text/event-stream")
    if not isinstance(message, dict):
        return _http_error("Invalid message format.")
    if message.get("jsonrpc") != "2.0":
        return _http_error("Invalid JSON-RPC message. Missing or invalid jsonrpc version.")
    request_id, method = message.get("id"), message.get("method")
    if request_id is None:
        if method:
            return Response(b"", status_code=202)  # a notification
        return _http_error(
            "Invalid message format. A message is to be either a JSON-RPC request, response,"
            " or notification."
        )
    if not method:
        return Response(b"", status_code=202)  # a response to nothing the server asked
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if method == "initialize":
        answer = _initialize(params)
    elif method == "ping":
        answer = {"result": {}}
    elif method == "tools/list":
        answer = await _list_tools(resources, caller, params)
    elif method == "tools/call":
        answer = await _call_tool(resources, quotas, caller, params, stamp)
    else:
        answer = _error(METHOD_NOT_FOUND, f"Method not found: {method}")
    return _result(request_id, answer)


@get("/mcp", status_code=405, tags=["langgraph"], include_in_schema=False)
async def mcp_get(caller: Caller) -> Response[bytes]:
    """No stream the server opens: 405, as LangGraph's."""
    return Response(b"", status_code=405)


@delete("/mcp", status_code=404, tags=["langgraph"], include_in_schema=False)
async def mcp_delete(caller: Caller) -> Response[bytes]:
    """No sessions to end: 404, as LangGraph's."""
    return Response(b"", status_code=404)
