"""LangGraph routes runstream does not serve, answered 404 `not_served` with a `detail` that
says so and what to use instead.

Without these a LangGraph client calling them would get a bare 404 or 405, which reads like
"no such thread" or a client bug. Each family names why it is missing (docs/langgraph.md,
"Not served"). Not 501: runstream's 5xx answers are two fixed sentences (docs/security.md).
They are left out of the OpenAPI schema, which lists what is served. Authentication still
runs first: an unauthenticated call is 401 as elsewhere.
"""

from __future__ import annotations

from typing import Any

from litestar import HttpMethod, Router, route

from server.callers.auth import Caller
from server.errors import ApiError

__all__ = ["not_served_router"]

_WHY = {
    "thread_stream": (
        "LangGraph's thread streaming protocol (POST /threads/{thread_id}/commands,"
        " /threads/{thread_id}/stream/...) is not served: follow the thread with"
        " GET /threads/{thread_id}/stream, or a run with"
        " GET /threads/{thread_id}/runs/{run_id}/stream"
    ),
    "bulk_state": "bulk state updates are not served: use POST /threads/{thread_id}/state",
}


def _refuse(family: str) -> Any:
    raise ApiError(404, "not_served", _WHY[family])


def _handler(path: str | list[str], family: str, methods: list[HttpMethod]) -> Any:
    async def handle(caller: Caller) -> None:
        _refuse(family)

    handle.__name__ = f"not_served_{family}"
    return route(path, http_method=methods, include_in_schema=False, status_code=404)(handle)


def not_served_router() -> Router:
    handlers = [
        _handler(
            "/threads/{thread_id:str}/stream/{rest:path}",
            "thread_stream",
            [HttpMethod.GET],
        ),
        _handler("/threads/{thread_id:str}/commands", "thread_stream", [HttpMethod.POST]),
        _handler("/threads/{thread_id:str}/state/bulk", "bulk_state", [HttpMethod.POST]),
    ]
    return Router(path="/", route_handlers=handlers)
