"""`GET /metrics`: the Litestar plugin's HTTP metrics and runstream's own, in one exposition.

The plugin's middleware records into prometheus_client's global registry (its only choice),
runstream's metrics live in the server's own (`ServerMetrics.registry`); both are rendered
here, one after the other, which is valid Prometheus text since their names never overlap.
"""

from __future__ import annotations

import os

from litestar import get
from litestar.response import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from .resources import Resources

__all__ = ["metrics"]


def _http_registry() -> CollectorRegistry:
    """The plugin's metrics, merged across processes when prometheus_client's multiprocess
    mode is on (as the plugin's own endpoint does)."""
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    return registry


@get("/metrics", include_in_schema=False)
async def metrics(resources: Resources) -> Response[bytes]:
    await resources.deployment.refresh()  # cached and bounded: see stream_store.deployment_metrics
    body = generate_latest(_http_registry()) + generate_latest(resources.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
