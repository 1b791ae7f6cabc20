"""The LangGraph Agent Server API, served beside `/v1` at LangGraph's own paths.

Errors keep LangGraph's shape, `{"detail": message}` (the SDKs read `detail`), with runstream's
`code` and `request_id` beside it, and LangGraph's status where `/v1`'s differs (observed on
`langgraph dev`, langgraph-api 0.16.7; docs/langgraph.md): a body that fails validation and a
malformed id are 422 (with LangGraph's "Invalid thread ID: must be a UUID"), a state update of
a thread no run named a graph for is 400.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from litestar import Request, Response, Router
from litestar.di import Provide

from server.errors import EXCEPTION_HANDLERS
from server.inputs import InvalidId

from .a2a import A2A_ROUTES
from .assistants import AssistantsController, info, ok
from .bulk_cancel import BulkCancelController
from .crons import CronsController, create_for_thread
from .mcp import mcp_delete, mcp_get, mcp_post
from .not_served import not_served_router
from .request_keys import request_stamp
from .runs import RunsController, StatelessRunsController
from .store import StoreController
from .threads import ThreadsController

__all__ = ["langgraph_router"]

Handler = Callable[[Request[Any, Any, Any], Exception], Response[Any]]

# (runstream's status, code) -> LangGraph's status
_LANGGRAPH_STATUS: dict[tuple[int, str], int] = {
    (400, "invalid_request"): 422,
    (409, "thread_has_no_graph"): 400,
}


# LangGraph's routes that answer a malformed thread id otherwise than 422 "Invalid thread ID:
# must be a UUID" (observed on `langgraph dev`, langgraph-api 0.16.7): copy, stream and wait
# convert it with Python's `UUID()` unchecked, whose `ValueError` becomes a 400 of its message;
# a background run's create checks it with a shorter message.
_UNCHECKED_UUID = (400, "badly formed hexadecimal UUID string")
_MALFORMED_THREAD_ID: dict[tuple[str, str], tuple[int, str]] = {
    ("POST", "/threads/{thread_id}/copy"): _UNCHECKED_UUID,
    ("POST", "/threads/{thread_id}/runs/stream"): _UNCHECKED_UUID,
    ("POST", "/threads/{thread_id}/runs/wait"): _UNCHECKED_UUID,
    ("POST", "/threads/{thread_id}/runs"): (422, "Invalid thread ID"),
}


def _malformed_id_answer(request: Request[Any, Any, Any], exc: InvalidId) -> tuple[int, str]:
    """LangGraph's status and `detail` for a malformed id on the route `request` took."""
    route = (request.method, str(request.scope.get("path_template", "")).rstrip("/"))
    if exc.kind == "thread" and route in _MALFORMED_THREAD_ID:
        return _MALFORMED_THREAD_ID[route]
    return 422, f"Invalid {exc.kind} ID: must be a UUID"


def _in_langgraph_shape(handler: Handler) -> Handler:
    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        response = handler(request, exc)
        error = (
            (response.content or {}).get("error") if isinstance(response.content, dict) else None
        )
        if not isinstance(error, dict):
            return response
        status = response.status_code or 500
        status = _LANGGRAPH_STATUS.get((status, error["code"]), status)
        detail = error["message"]
        if isinstance(exc, InvalidId):  # a thread's, run's or cron's id
            status, detail = _malformed_id_answer(request, exc)
        content = {
            "detail": detail,
            "code": error["code"],
            "request_id": error["request_id"],
        }
        return Response(
            msgspec.json.encode(content),
            status_code=status,
            headers=dict(response.headers),
            media_type="application/json",
        )

    return handle


def langgraph_router(*, mcp: bool = True, a2a: bool = True) -> Router:
    """LangGraph's routes; `/mcp` and `/a2a` (with its agent cards) unless the project's
    `http.disable_mcp` and `http.disable_a2a` turn them off."""
    return Router(
        path="/",
        route_handlers=[
            AssistantsController,
            ThreadsController,
            RunsController,
            BulkCancelController,
            StatelessRunsController,
            CronsController,
            create_for_thread,
            StoreController,
            info,
            ok,
            *((mcp_post, mcp_get, mcp_delete) if mcp else ()),
            *(A2A_ROUTES if a2a else ()),
            not_served_router(),
        ],
        exception_handlers={
            kind: _in_langgraph_shape(handler) for kind, handler in EXCEPTION_HANDLERS.items()
        },
        # what a route that makes runs records of its request (request_keys.py)
        dependencies={"stamp": Provide(request_stamp)},
    )
