"""The LangGraph Agent Server API, served beside `/v1` at LangGraph's own paths.

Errors keep LangGraph's shape, `{"detail": message}` (the SDKs read `detail`), with runstream's
`code` and `request_id` beside it; a body that fails validation is 422, as LangGraph answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from litestar import Request, Response, Router

from server.errors import EXCEPTION_HANDLERS

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


def _in_langgraph_shape(handler: Handler) -> Handler:
    def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        response = handler(request, exc)
        error = (
            (response.content or {}).get("error") if isinstance(response.content, dict) else None
        )
        if not isinstance(error, dict):
            return response
        status = response.status_code
        if status == 400 and error.get("code") == "invalid_request":
            status = 422
        content = {
            "detail": error["message"],
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
