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

from server.errors import EXCEPTION_HANDLERS
from server.inputs import InvalidId

from .assistants import AssistantsController, info, ok
from .bulk_cancel import BulkCancelController
from .crons import CronsController, create_for_thread
from .mcp import mcp_delete, mcp_get, mcp_post
from .not_served import not_served_router
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
            status, detail = 422, f"Invalid {exc.kind} ID: must be a UUID"
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


def langgraph_router(*, mcp: bool = True) -> Router:
    """LangGraph's routes; `/mcp` unless the project's `http.disable_mcp` turns it off."""
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
            not_served_router(),
        ],
        exception_handlers={
            kind: _in_langgraph_shape(handler) for kind, handler in EXCEPTION_HANDLERS.items()
        },
    )
