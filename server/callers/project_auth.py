"""A LangGraph project's own auth (`auth.path` in langgraph.json): a `langgraph_sdk.Auth`.

Its `authenticate` handler turns each request into a user, whose identity is the owner of
everything the request makes and reads (so users never see each other's data); its
`@auth.on...` handlers then decide, per resource and action, as LangGraph's server runs them
(`langgraph_api/auth/custom.py` `handle_event`, `_get_handler`): the most specific handler only
(resource and action, then resource, then action, then `@auth.on`), None or True allows, False
refuses (403 `Forbidden`), an `AssertionError` refuses with its message (403), an
`Auth.exceptions.HTTPException` answers its status, detail and headers, and a dict is a
metadata filter the resource must match (stream_store/metadata_filters.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import anyio.to_thread
import structlog
from langgraph_sdk import Auth
from litestar import Request
from starlette.datastructures import QueryParams
from starlette.requests import Request as StarletteRequest

from project.auth_user import AuthUser
from project.graph_loading import import_source
from project.langgraph_json import GraphSource, ProjectError
from server.errors import ApiError

from .auth import Caller

__all__ = ["ProjectAuth"]

logger = structlog.get_logger()

# What `authenticate` may ask for by name (LangGraph's SUPPORTED_PARAMETERS, but `body`, which
# its server never fills either).
_AUTHENTICATE_PARAMS = frozenset(
    {
        "request",
        "path",
        "method",
        "path_params",
        "query_params",
        "headers",
        "authorization",
        "scope",
        "scopes",
        "user",
    }
)


def _refusal(exc: Auth.exceptions.HTTPException) -> ApiError:
    code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(exc.status_code, "refused")
    return ApiError(exc.status_code, code, str(exc.detail), exc.headers)


class ProjectAuth:
    """The project's `Auth`: authenticates requests (as `SignIn`) and authorizes what its
    callers do (as their `ResourceRules`)."""

    description = "the project's auth (auth.path)"

    def __init__(self, auth: Auth, source: GraphSource) -> None:
        handler = auth._authenticate_handler
        if handler is None:
            raise ProjectError(
                source.origin,
                source.key,
                f"{source.where}:{source.attr} has no @auth.authenticate handler",
            )
        try:
            params = inspect.signature(handler).parameters.values()
        except (TypeError, ValueError) as exc:
            raise ProjectError(source.origin, source.key, f"authenticate: {exc}") from None
        unsupported = [
            p.name for p in params if p.name not in _AUTHENTICATE_PARAMS and p.default is p.empty
        ]
        if unsupported:
            raise ProjectError(
                source.origin,
                source.key,
                f"authenticate takes {unsupported}, which are not among the parameters it may"
                f" ask for: {', '.join(sorted(_AUTHENTICATE_PARAMS))}",
            )
        self._auth = auth
        self._authenticate: Callable[..., Any] = handler
        self._params = frozenset(p.name for p in params) & _AUTHENTICATE_PARAMS

    @classmethod
    def load(cls, source: GraphSource) -> ProjectAuth:
        """Import the `Auth` that `auth.path` names.

        Raises:
            ProjectError: it does not import, or is not an `Auth` with an authenticate handler.
        """
        module = import_source(source)
        value = module.__dict__.get(source.attr)
        if value is None:
            raise ProjectError(source.origin, source.key, f"{source.where} has no {source.attr!r}")
        if not isinstance(value, Auth):
            raise ProjectError(
                source.origin,
                source.key,
                f"{source.where}:{source.attr} is a {type(value).__name__}, not a"
                " langgraph_sdk.Auth",
            )
        return cls(value, source)

    # -- authentication ----------------------------------------------------------------------

    def _arguments(self, request: Request[Any, Any, Any]) -> dict[str, Any]:
        """What `authenticate` asked for, as LangGraph's `_extract_arguments_from_scope`."""
        scope: Any = request.scope
        available: dict[str, Callable[[], Any]] = {
            "request": lambda: StarletteRequest(scope),
            "path": lambda: scope["path"],
            "method": lambda: scope["method"],
            "path_params": lambda: dict(request.path_params),
            "query_params": lambda: QueryParams(scope.get("query_string") or b""),
            "headers": lambda: dict(scope.get("headers") or []),
            "authorization": lambda: request.headers.get("authorization"),
            "scope": lambda: scope,
            "scopes": lambda: [],
            "user": lambda: None,
        }
        return {name: available[name]() for name in self._params}

    async def caller(self, request: Request[Any, Any, Any]) -> Caller:
        """The caller `authenticate` names.

        Raises:
            ApiError: it refused (its 401 or 403 and detail), it raised a ValueError or returned
                no identity (400, as LangGraph answers), or anything else (500, logged).
            Unauthorized: the identity is refused (`Caller.signed_in`).
        """
        kwargs = self._arguments(request)
        try:
            if inspect.iscoroutinefunction(self._authenticate):
                returned = await self._authenticate(**kwargs)
            else:
                returned = await anyio.to_thread.run_sync(lambda: self._authenticate(**kwargs))
            user = AuthUser.of(*_user_and_permissions(returned))
        except Auth.exceptions.HTTPException as exc:
            if exc.status_code in (401, 403):
                raise _refusal(exc) from None
            logger.error(
                "authenticate raised an HTTPException that is not a 401 or 403",
                status=exc.status_code,
            )
            raise
        except ValueError as exc:
            # Not `invalid_request`, which the LangGraph routes answer 422 (a body they refuse):
            # LangGraph answers 400 on every route (docs/langgraph.md, "Auth").
            raise ApiError(400, "invalid_credentials", str(exc)) from None
        return Caller.signed_in(user.identity, user=user, rules=self)

    # -- authorization -----------------------------------------------------------------------

    def _handler(self, resource: str, action: str) -> Callable[..., Any] | None:
        """The one handler for (resource, action): LangGraph's `_get_handler` order."""
        handlers = self._auth._handlers
        for key in ((resource, action), (resource, "*"), ("*", action), ("*", "*")):
            if key in handlers:
                return handlers[key][-1]
        return self._auth._global_handlers[-1] if self._auth._global_handlers else None

    async def authorize(
        self, caller: Caller, resource: str, action: str, value: dict[str, Any]
    ) -> dict[str, Any] | None:
        handler = self._handler(resource, action)
        if handler is None or caller.user is None:
            return None
        context = Auth.types.AuthContext(
            user=caller.user,  # a BaseUser by its attributes (a Protocol)
            permissions=caller.user.permissions,
            resource=resource,  # type: ignore[arg-type]
            action=action,  # type: ignore[arg-type]
        )
        try:
            result = await handler(ctx=context, value=value)
        except Auth.exceptions.HTTPException as exc:
            raise _refusal(exc) from None
        except AssertionError as exc:
            raise ApiError(403, "forbidden", str(exc)) from None
        if result is None or result is True:
            return None
        if result is False:
            raise ApiError(403, "forbidden", "Forbidden")
        if not isinstance(result, dict):
            logger.error(
                "an auth handler returned neither a filter, None nor a bool",
                resource=resource,
                action=action,
                returned=type(result).__name__,
            )
            raise ApiError(
                500,
                "internal",
                "Auth handler returned invalid result. Expected filter dict, None, or boolean."
                f" Got {type(result)} instead.",
            )
        return result


def _user_and_permissions(returned: Any) -> tuple[Any, Sequence[str]]:
    """LangGraph's `_normalize_auth_response`: (permissions, user), or a user with its own
    `permissions` (attribute or key), or a user without any."""
    if isinstance(returned, tuple):
        if len(returned) != 2:
            raise ValueError(
                f"Expected a tuple with two elements (permissions, user), got {len(returned)}"
            )
        permissions, user = returned
        return user, list(permissions)
    if hasattr(returned, "permissions"):
        return returned, list(returned.permissions)
    if isinstance(returned, dict) and "permissions" in returned:
        return returned, list(returned["permissions"])
    return returned, []
