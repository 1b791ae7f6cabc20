"""The Litestar application: routes, dependencies, error mapping, lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog
from litestar import Litestar, Request
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController

from stream_store.settings import Settings

from .auth import Caller, caller_from_request
from .errors import EXCEPTION_HANDLERS
from .health import healthz, readyz
from .page import index, page_assets
from .resources import Resources, open_resources
from .runs import RunsController
from .threads import ThreadsController

__all__ = ["create_app"]

logger = structlog.get_logger()


class _Metrics(PrometheusController):
    path = "/metrics"
    include_in_schema = False


def create_app(settings: Settings) -> Litestar:
    """An app whose connections open when it starts and close when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_resources(settings) as resources:
            app.state.resources = resources
            logger.info(
                "server ready",
                model=settings.model,
                auth="api keys" if settings.auth_enabled else "none (loopback only)",
            )
            yield

    def provide_resources(request: Request[Any, Any, Any]) -> Resources:
        return request.app.state.resources

    def provide_caller(request: Request[Any, Any, Any]) -> Caller:
        return caller_from_request(request, request.app.state.resources.settings)

    async def clear_log_context(_: Request[Any, Any, Any]) -> None:
        structlog.contextvars.clear_contextvars()

    prometheus = PrometheusConfig(app_name="runstream", group_path=True)
    return Litestar(
        route_handlers=[
            RunsController,
            ThreadsController,
            healthz,
            readyz,
            _Metrics,
            index,
            page_assets(),
        ],
        dependencies={
            "resources": Provide(provide_resources, sync_to_thread=False),
            "caller": Provide(provide_caller, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=[lifespan],
        before_request=clear_log_context,
        middleware=[prometheus.middleware],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="runstream",
            version="0.1.0",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
        ),
        logging_config=None,
    )
