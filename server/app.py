"""The Litestar application: routes, dependencies, error mapping, lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from litestar import Litestar, Request
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.plugins.opentelemetry import OpenTelemetryConfig
from litestar.plugins.prometheus import PrometheusConfig
from litestar.types import ASGIApp
from opentelemetry.trace import TracerProvider

from project.langgraph_json import HttpSettings, Project
from runner.graph_registry import GraphRegistry
from server.callers.auth import Caller
from server.callers.quotas import CallerQuotas, open_caller_quotas
from server.langgraph.api import langgraph_router
from server.langgraph.cron_scheduler import running_scheduler
from server.streaming.event_stream import with_server_send
from server.v1.runs import RunsController
from server.v1.threads import ThreadsController
from stream_store.settings import Settings
from stream_store.tracing import make_tracer

from .api_docs import (
    DOCS_PATH,
    ClosedBodiesJsonRenderPlugin,
    OfflineSwaggerRenderPlugin,
    langgraph_docs,
    langgraph_openapi,
)
from .browser_guard import BrowserGuard, browser_guard
from .cors import CorsPolicy, cors_policy
from .custom_routes import CustomRoutes, load_custom_app
from .errors import EXCEPTION_HANDLERS
from .header_limit import bounded_head
from .health import healthz, readyz
from .metrics_endpoint import metrics
from .page import index, page_assets
from .raw_input import ApiRequest, refuse_nul_in_url
from .request_ids import add_request_id_header, bind_request_id
from .resources import Resources, open_resources
from .security_headers import add_security_headers
from .trace_ids import add_trace_id_header, bind_trace_id

__all__ = ["create_app", "project_http", "serving"]

logger = structlog.get_logger()


def _traced(tracer_provider: TracerProvider | None) -> list[Any]:
    """The OpenTelemetry ASGI middleware (Litestar's plugin): each request's server span,
    continuing the client's `traceparent`; nothing when traces are off."""
    if tracer_provider is None:
        return []
    config = OpenTelemetryConfig(
        tracer_provider=tracer_provider,
        exclude=["^/healthz", "^/readyz", "^/metrics"],
        exclude_spans=["receive", "send"],  # not a span per SSE write
    )
    return [config.middleware]


def _lifespan(
    tracer_provider: TracerProvider | None, graphs: GraphRegistry
) -> Callable[[Litestar], AbstractAsyncContextManager[None]]:
    """Open the app's connections (`Resources`, `CallerQuotas`) with `app.state.settings` and
    start its cron scheduler when it starts, stop and close them when it stops; the providers
    below read the connections from `app.state`."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings: Settings = app.state.settings
        async with (
            open_resources(
                settings, tracer=make_tracer(tracer_provider), graphs=graphs
            ) as resources,
            open_caller_quotas(resources.redis, settings) as quotas,
            running_scheduler(resources, quotas, settings.cron_interval_s),
        ):
            app.state.resources = resources
            app.state.quotas = quotas
            logger.info("server ready", model=settings.model, auth=resources.sign_in.description)
            yield

    return lifespan


# The three dependencies form one chain (resources, then quotas, then the caller), although the
# caller needs only the settings: Litestar resolves a handler's independent dependencies in an
# anyio task group, about 90 µs of CPU on every request (issue 12's profile), and a chain one
# after another.


# Event streams are left out of the plugin's request metrics: a stream's "duration" is how long
# someone watched, which would swamp the answers' latency histogram, and the plugin's work per
# request and per write was a tenth of an attach's CPU. `runstream_sse_*` counts them instead.
EVENT_STREAM_PATHS = [
    r"^/v1/runs/[^/]+/events$",
    r"^/threads/[^/]+/runs/[^/]+/stream$",
    r"^/threads/[^/]+/stream$",
]


def _provide_resources(request: Request[Any, Any, Any]) -> Resources:
    return request.app.state.resources


def _provide_quotas(request: Request[Any, Any, Any], resources: Resources) -> CallerQuotas:
    return request.app.state.quotas


async def _provide_caller(request: Request[Any, Any, Any], quotas: CallerQuotas) -> Caller:
    """The caller; a route with a budget has its own, which counts it
    (`server/callers/budgets.py`)."""
    resources: Resources = request.app.state.resources
    return await resources.sign_in.caller(request)


async def _before_request(request: Request[Any, Any, Any]) -> None:
    """A fresh log context with the request id, then the URL's NUL check. Not a guard:
    Litestar copies the route handler for every guard call, on every request."""
    await bind_request_id(request)
    await bind_trace_id(request)  # after the request id's fresh log context
    refuse_nul_in_url(request.scope["path"], request.scope["query_string"])


def create_app(
    settings: Settings,
    *,
    tracer_provider: TracerProvider | None = None,
    graphs: GraphRegistry | None = None,
) -> Litestar:
    """An app whose connections open when it starts and close when it stops.

    `graphs`: the process's graphs and project, loaded already (`runstream serve` reads the
    project once and loads them before it listens, to refuse a bad project with one line);
    None: loaded from `settings` here (the tests' apps), the project read once.

    `tracer_provider` (stream_store/tracing.py) turns traces on; its owner shuts it down.

    The lifespan opens the connections `app.state.settings` names (these `settings`): a test
    process builds an app once and starts it again with another test's schema, key prefix and
    database (tests/conftest.py `AppShelf`), as the routes depend on none of them.

    The project's `http` (project/langgraph_json.py) is served from `graphs.project`: its CORS
    policy, and its custom app, imported now so that a bad one refuses the start. `serving(app)` is
    what to run.

    Raises:
        ProjectError: the project's `http.app` cannot be served.
    """
    if graphs is None:
        graphs = GraphRegistry.from_settings(settings)
    http, custom_app = project_http(graphs.project)
    cors = cors_policy(settings, http.cors)
    guard = BrowserGuard.from_settings(
        settings,
        None if cors is None else cors.listed_origins,
        project_auth=graphs.auth is not None,  # the project's own `auth`
        cors_any_origin=cors is not None and cors.any_origin,
    )
    _warn_of_open_cors(guard, cors)
    custom = None
    if custom_app is not None:
        custom = CustomRoutes(
            app=custom_app,
            settings=settings,
            guard=guard,
            cors=cors,
            with_auth=http.enable_custom_route_auth,
        )
    lifespans: list[Any] = [_lifespan(tracer_provider, graphs)]
    if custom is not None:
        lifespans.append(custom.lifespan)  # inside runstream's, as on LangGraph's server
    prometheus = PrometheusConfig(app_name="runstream", group_path=True, exclude=EVENT_STREAM_PATHS)
    app = Litestar(
        route_handlers=[
            RunsController,
            ThreadsController,
            langgraph_router(mcp=not http.disable_mcp, a2a=not http.disable_a2a),
            healthz,
            readyz,
            metrics,
            index,
            page_assets(),
            langgraph_docs,
            langgraph_openapi,
        ],
        dependencies={
            "resources": Provide(_provide_resources, sync_to_thread=False),
            "caller": Provide(_provide_caller),
            "quotas": Provide(_provide_quotas, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespans,
        before_request=_before_request,
        before_send=[add_security_headers, add_request_id_header, add_trace_id_header],
        request_class=ApiRequest,  # JSON depth and NUL checks before decoding
        # refusals go first
        middleware=[browser_guard(guard), prometheus.middleware, *_traced(tracer_provider)],
        request_max_body_size=settings.max_body_bytes,
        cors_config=None if cors is None else cors.litestar_config(),
        openapi_config=OpenAPIConfig(
            title="runstream",
            version="0.1.0",
            path=DOCS_PATH,
            render_plugins=[OfflineSwaggerRenderPlugin(), ClosedBodiesJsonRenderPlugin()],
        ),
        logging_config=None,
    )
    app.state.settings = settings
    app.state.custom_routes = custom
    app.state.max_header_bytes = settings.max_header_bytes
    return app


def _warn_of_open_cors(guard: BrowserGuard, cors: CorsPolicy | None) -> None:
    """At start: a CORS policy open to any origin on a server without a sign-in."""
    if cors is None or not cors.any_origin or not guard.check_host:  # check_host: no sign-in
        return
    if guard.check_read_origins:
        logger.warning(
            "http.cors lets in any origin (* or a regex) and nobody signs in: reads from"
            " origins it does not list are refused (403); list them in http.cors.allow_origins,"
            " or set RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN=true to let any web page read"
        )
    else:
        logger.warning(
            "http.cors lets in any origin (* or a regex) and nobody signs in, and"
            " RUNSTREAM_CORS_ANY_ORIGIN_WITHOUT_SIGN_IN is set: any web page the user opens can"
            " read every thread"
        )


def serving(app: Litestar) -> ASGIApp:
    """The ASGI app a server runs: the project's custom routes in front of runstream's
    (server/custom_routes.py), each request's scope holding the server's `send`, and a head
    over `RUNSTREAM_MAX_HEADER_BYTES` refused before either (server/header_limit.py)."""
    custom: CustomRoutes | None = app.state.custom_routes
    routes = with_server_send(app if custom is None else custom.in_front_of(app))
    return bounded_head(routes, app.state.max_header_bytes)


def project_http(project: Project | None) -> tuple[HttpSettings, Any]:
    """The project's `http`, and its custom app imported (None without `http.app`); its env
    and import paths are in place already (`GraphRegistry.for_project` put them there). A
    module is imported once per process, so `serve` calls this before it starts children, to
    refuse a bad app in one line.

    Raises:
        ProjectError: the project's `http.app` cannot be served.
    """
    if project is None:
        return HttpSettings(), None
    if project.http.app is None:
        return project.http, None
    return project.http, load_custom_app(project.http.app)
