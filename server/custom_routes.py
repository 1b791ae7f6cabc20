"""A project's own HTTP routes (`http.app` in its langgraph.json), served beside runstream's.

LangGraph's server puts the custom app's routes in front of its own (`langgraph_api/server.py`):
Starlette's router takes the first route matching both path and method, the custom app's
first, so a custom route shadows a built-in one of the same path and method, and a built-in
route still answers the methods the custom one lacks. runstream decides the same way, in front
of its Litestar app: a request one of the custom app's routes matches fully (path and method,
Starlette's public `BaseRoute.matches`) goes to the custom app, every other one to runstream;
`/ok`, the health check, cannot be shadowed (LangGraph's `unshadowable_meta_routes`).
Mounting the app inside Litestar (`asgi(..., is_mount=True)`) would not do: Litestar's router
prefers its own routes to a mount, hands a mounted app a rewritten path, and answers 404 or 405
for a path of its own before any middleware could step aside.

On its way to the custom app a request passes:

- CORS: Starlette's `CORSMiddleware`, as on LangGraph's server, with the server's one policy
  (server/cors.py), so preflights of custom routes are answered as runstream's are;
- the browser guard's Host and Origin checks (server/browser_guard.py), not its JSON-body
  check: a custom route may take a form;
- with `http.enable_custom_route_auth`, runstream's authentication (`authenticate`, the one
  seam custom auth plugs into): without valid credentials a 401, as on runstream's routes.

The custom app's answers are its own: runstream adds no security headers, request id or
metrics to them. Its lifespan runs inside runstream's (server/app.py), once per server process.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from litestar import Litestar, Request
from litestar.datastructures import Headers
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    HTTPScope,
    Receive,
    Scope,
    Send,
)

from project.graph_loading import import_source
from project.langgraph_json import GraphSource, ProjectError
from server.callers.auth import SignIn
from server.errors import Unauthorized
from stream_store.settings import Settings

from .browser_guard import BrowserGuard
from .cors import CorsPolicy
from .errors import ApiError

__all__ = ["UNSHADOWABLE_PATHS", "CustomRoutes", "authenticate", "load_custom_app"]

UNSHADOWABLE_PATHS = frozenset({"/ok"})


def load_custom_app(source: GraphSource) -> Any:
    """Import `http.app` and check it is a Starlette (or FastAPI) app, as LangGraph requires.

    Raises:
        ProjectError: it does not import, is missing, or is not a Starlette app.
    """
    module = import_source(source)
    where = f"{source.where}:{source.attr}"
    try:
        app = module.__dict__[source.attr]
    except KeyError:
        raise ProjectError(source.origin, source.key, f"{where} does not exist") from None
    try:
        from starlette.applications import Starlette
    except ImportError:
        raise ProjectError(source.origin, source.key, "needs Starlette installed") from None
    if not isinstance(app, Starlette):
        kind = type(app).__name__
        raise ProjectError(
            source.origin,
            source.key,
            f"{where} is a {kind}, not a Starlette or FastAPI app (LangGraph serves only those)",
        )
    return app


async def authenticate(scope: Scope, sign_in: SignIn) -> None:
    """The caller of a custom route, checked by the deployment's sign-in as runstream's routes
    check theirs (API keys, JWTs or the project's `authenticate`).

    Raises:
        Unauthorized: credentials are required and none valid were sent.
        ApiError: the project's `authenticate` refused the request.
    """
    await sign_in.caller(Request(scope))


@dataclass(frozen=True)
class CustomRoutes:
    """The custom app, and what runs before it (module doc)."""

    app: Any  # a starlette.applications.Starlette
    settings: Settings
    guard: BrowserGuard
    cors: CorsPolicy | None
    with_auth: bool

    def lifespan(self, _: object) -> AbstractAsyncContextManager[None]:
        """The custom app's lifespan (its `lifespan=` or startup/shutdown handlers)."""
        context: Callable[[Any], AbstractAsyncContextManager[Any]] = (
            self.app.router.lifespan_context
        )

        @asynccontextmanager
        async def running() -> AsyncIterator[None]:
            async with context(self.app):
                yield

        return running()

    def claims(self, scope: Scope) -> bool:
        """Whether one of the custom app's routes matches the request's path and method; for
        a CORS preflight, its path (the preflight asks for another method, and CORS answers
        it before any route on LangGraph's server)."""
        from starlette.routing import Match

        if scope["path"] in UNSHADOWABLE_PATHS:
            return False
        wanted = Match.PARTIAL if _is_preflight(scope) else Match.FULL
        return any(route.matches(scope)[0].value >= wanted.value for route in self.app.routes)

    def in_front_of(self, runstream: Litestar) -> ASGIApp:
        """One ASGI app: the custom routes where they match, runstream everywhere else."""
        custom = self._checked(self.app, lambda: runstream.state.resources.sign_in)
        if self.cors is not None:
            custom = self.cors.starlette_middleware(custom)
        claims = self.claims

        async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] in ("http", "websocket") and claims(scope):
                await custom(scope, receive, send)
            else:
                await runstream(scope, receive, send)

        return dispatch

    def _checked(self, app: ASGIApp, sign_in: Callable[[], SignIn]) -> ASGIApp:
        """`sign_in`: the deployment's, once runstream's lifespan opened its resources."""
        guard, with_auth = self.guard, self.with_auth

        async def checked(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                method = cast("HTTPScope", scope)["method"]
                try:
                    guard.check(method, Headers.from_scope(scope), json_bodies=False)
                    if with_auth:
                        await authenticate(scope, sign_in())
                except ApiError as exc:
                    await _refuse(send, exc.status, exc.code, exc.message)
                    return
                except Unauthorized as exc:
                    await _refuse(send, 401, "unauthorized", str(exc), bearer=True)
                    return
            await app(scope, receive, send)

        return checked


def _is_preflight(scope: Scope) -> bool:
    if scope["type"] != "http" or cast("HTTPScope", scope)["method"] != "OPTIONS":
        return False
    names = {name for name, _ in scope["headers"]}
    return b"origin" in names and b"access-control-request-method" in names


async def _refuse(
    send: Send, status: int, code: str, message: str, *, bearer: bool = False
) -> None:
    """runstream's error answer (server/errors.py), for a request refused before the app."""
    body = json.dumps({"error": {"code": code, "message": message, "request_id": None}}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if bearer:
        headers.append((b"www-authenticate", b"Bearer"))
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": status,
        "headers": headers,
    }
    await send(start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)
