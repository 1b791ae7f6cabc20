"""runstream's Prometheus metrics: every `runstream_*` family, declared in one place.

Each process creates its metrics at start-up (`ServerMetrics` in the server's lifespan,
`WorkerMetrics` in the worker's start-up) on a `CollectorRegistry` of its own and passes them
down; nothing registers in prometheus_client's global registry, so several servers or workers
in one process (the tests) never collide. Exposition is per process: Prometheus adds the
`instance` label, so no metric carries a worker id.

Labels are bounded: `graph` is one of the registered graph names or `other`, `status` a
`RunStatus`, `reason` one of a fixed few. docs/operations.md lists every metric.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Literal, get_args

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .connections import PgPool
from .run_status import TERMINAL, RunStatus

__all__ = [
    "OTHER_GRAPH",
    "FanoutMetrics",
    "GraphLabels",
    "LoopHistogram",
    "PoolCollector",
    "ServerMetrics",
    "WebhookOutcome",
    "WorkerMetrics",
]

OTHER_GRAPH = "other"  # runs of a graph this process does not have registered
# How an attempt ends: the run is over, or waits at an interrupt.
OUTCOME_STATUSES = sorted(TERMINAL | {RunStatus.INTERRUPTED})
RETRY_REASONS = ("lease_expired", "worker_gone", "worker_shutdown")
# How a webhook delivery attempt ends (runner/webhooks.py): a 2xx; no 2xx, another to come; no
# 2xx and none to come (gave up); not sent at all (the URL policy, or webhooks disabled).
WebhookOutcome = Literal["delivered", "retrying", "failed", "refused"]

# Submit to first token: a queue wait plus a model's first response, seconds to minutes.
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
# Append to delivery: one Redis read and one write to the client, normally milliseconds.
DELIVERY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# One webhook POST: a receiver's answer, milliseconds to its 30 s timeout.
WEBHOOK_POST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A run's end to its webhook's 2xx: the workers' 1 s poll, then retries for about a minute.
WEBHOOK_DELIVERY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class GraphLabels:
    """The `graph` label's values: the registered graphs, and `other` for anything else.

    A run's graph name comes from storage, where an old deployment's graphs may linger; mapping
    unknown names to one value keeps the label's cardinality that of the configuration.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(sorted(set(names)))
        self._known = frozenset(self.names)

    def __call__(self, graph: str) -> str:
        return graph if graph in self._known else OTHER_GRAPH

    @property
    def values(self) -> tuple[str, ...]:
        return (*self.names, OTHER_GRAPH)


# The pool's figures: metric family, name, help text, and its key in `get_stats()` (the one in
# milliseconds is reported in seconds).
_POOL_FIGURES: tuple[tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str, str], ...] = (
    (
        GaugeMetricFamily,
        "runstream_pg_pool_connections",
        "Connections the Postgres pool holds now",
        "pool_size",
    ),
    (
        GaugeMetricFamily,
        "runstream_pg_pool_connections_max",
        "The Postgres pool's size limit",
        "pool_max",
    ),
    (
        GaugeMetricFamily,
        "runstream_pg_pool_connections_idle",
        "Connections in the Postgres pool that no task holds",
        "pool_available",
    ),
    (
        GaugeMetricFamily,
        "runstream_pg_pool_requests_waiting",
        "Tasks waiting for a Postgres connection now",
        "requests_waiting",
    ),
    (
        CounterMetricFamily,
        "runstream_pg_pool_waits",
        "Connection requests that had to wait for a free connection",
        "requests_queued",
    ),
    (
        CounterMetricFamily,
        "runstream_pg_pool_wait_seconds",
        "Time connection requests spent waiting for a free connection",
        "requests_wait_ms",
    ),
    (
        CounterMetricFamily,
        "runstream_pg_pool_request_errors",
        "Connection requests that failed while waiting: timed out (10 s) or were cancelled",
        "requests_errors",
    ),
)


class PoolCollector(Collector):
    """A Postgres pool's figures, read from `get_stats()` at scrape time.

    `get_stats()` only copies counters the pool keeps anyway (a dict copy, atomic under the
    GIL), so the worker's exposition thread may call it too.
    """

    def __init__(self, pool: PgPool) -> None:
        self.pool = pool

    def collect(self) -> Iterable[Metric]:
        stats = self.pool.get_stats()
        for family, name, text, key in _POOL_FIGURES:
            value = stats.get(key, 0)
            yield family(name, text, value=value / 1000 if key.endswith("_ms") else value)


class FanoutMetrics:
    """What the server's stream follower and its viewers record."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.viewers_cut_off = Counter(
            "runstream_viewers_cut_off",
            "Viewers whose client stopped reading and whose connection was closed",
            registry=registry,
        )
        self.delivery_seconds = LoopHistogram(
            "runstream_event_delivery_seconds",
            "From an event's append to Redis (its stream id's ms) to its live write to a viewer",
            DELIVERY_BUCKETS,
        )
        registry.register(self.delivery_seconds)

    def delivered(self, appended_ms: int) -> None:
        """A live write whose oldest event was appended at `appended_ms` (Redis's clock, the ms
        part of its id) reached the client. Once per write: the event's parsed id, not its
        text (parsing it again was half of this call's cost)."""
        self.delivery_seconds.observe(max(0.0, time.time() - appended_ms / 1000))


class LoopHistogram(Collector):
    """A histogram observed only from the event loop's thread: a bucket count and a sum, no
    lock. prometheus_client's `Histogram` takes a lock per observation, and the delivery
    histogram is observed once per write to every viewer (a microsecond each, a tenth of a
    write's cost to the server)."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # bounds are inclusive
        self.sum += value

    def collect(self) -> Iterable[Metric]:
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        bounds = (*map(floatToGoString, self.bounds), "+Inf")
        for bound, count in zip(bounds, self.counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=buckets, sum_value=self.sum
        )


class ServerMetrics:
    """The server process's metrics (the storage-wide gauges are added by the server)."""

    def __init__(self, graphs: GraphLabels) -> None:
        self.registry = CollectorRegistry()
        self.graphs = graphs
        self.fanout = FanoutMetrics(self.registry)
        self.sse_connections = Gauge(
            "runstream_sse_connections",
            "Event streams (SSE responses) this server has open",
            registry=self.registry,
        )
        self.runs_followed = Gauge(
            "runstream_sse_runs_followed",
            "Runs this server's stream follower reads live for its viewers",
            registry=self.registry,
        )

    def follow(self, viewers: Callable[[], int], runs: Callable[[], int]) -> None:
        """Read the open streams from the follower at scrape time."""
        self.sse_connections.set_function(viewers)
        self.runs_followed.set_function(runs)

    def watch_pool(self, pool: PgPool) -> None:
        self.registry.register(PoolCollector(pool))

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)


class WorkerMetrics:
    """The worker process's metrics, served on `RUNSTREAM_WORKER_METRICS_PORT`."""

    def __init__(self, graphs: GraphLabels, *, concurrency: int) -> None:
        self.registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            # the server gets these from the global registry it also exposes; a worker has
            # only its own, so it takes the same collectors (they hold no state of their own)
            self.registry.register(collector)
        self.graphs = graphs
        self.active_runs = Gauge(
            "runstream_worker_active_runs",
            "Attempts this worker is executing now",
            registry=self.registry,
        )
        Gauge(
            "runstream_worker_concurrency",
            "Attempts this worker executes at once at most (RUNSTREAM_WORKER_CONCURRENCY)",
            registry=self.registry,
        ).set(concurrency)
        self.attempts = Counter(
            "runstream_attempts",
            "Attempts this worker claimed (a run's first, or a retry)",
            ["graph"],
            registry=self.registry,
        )
        self.retries = Counter(
            "runstream_retries",
            "Attempts taken back from a worker and re-queued (or failed attempts_exhausted)",
            ["reason"],
            registry=self.registry,
        )
        self.outcomes = Counter(
            "runstream_run_outcomes",
            "Outcomes this worker's attempts recorded, by graph and status",
            ["graph", "status"],
            registry=self.registry,
        )
        self.first_token_seconds = Histogram(
            "runstream_first_token_seconds",
            "From a run's submit (created_at) to its first token in the stream; first attempts",
            ["graph"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.stream_bytes = Counter(
            "runstream_stream_bytes_appended",
            "Bytes of event names and data this worker appended to run streams",
            registry=self.registry,
        )
        self.webhook_attempts = Counter(
            "runstream_webhook_attempts",
            "Webhook delivery attempts this worker recorded, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        self.webhook_post_seconds = Histogram(
            "runstream_webhook_post_seconds",
            "Webhook POSTs this worker sent: from the connect to the receiver's answer or error",
            buckets=WEBHOOK_POST_BUCKETS,
            registry=self.registry,
        )
        self.webhook_delivery_seconds = Histogram(
            "runstream_webhook_delivery_seconds",
            "From a run's end (its delivery recorded) to the 2xx that delivered its webhook",
            buckets=WEBHOOK_DELIVERY_BUCKETS,
            registry=self.registry,
        )
        for outcome in get_args(WebhookOutcome):
            self.webhook_attempts.labels(outcome=outcome)
        for graph in graphs.values:  # every series exists from the start, at zero
            self.attempts.labels(graph=graph)
            self.first_token_seconds.labels(graph=graph)
            for status in OUTCOME_STATUSES:
                self.outcomes.labels(graph=graph, status=status.value)
        for reason in RETRY_REASONS:
            self.retries.labels(reason=reason)

    def track_attempts(self, active: Callable[[], int]) -> None:
        self.active_runs.set_function(active)

    def watch_pool(self, pool: PgPool) -> None:
        self.registry.register(PoolCollector(pool))

    def attempt_started(self, graph: str) -> None:
        self.attempts.labels(graph=self.graphs(graph)).inc()

    def retried(self, reason: str) -> None:
        self.retries.labels(reason=reason).inc()

    def outcome(self, graph: str, status: RunStatus) -> None:
        self.outcomes.labels(graph=self.graphs(graph), status=status.value).inc()

    def first_token(self, graph: str, created_at: datetime) -> None:
        waited = max(0.0, time.time() - created_at.timestamp())
        self.first_token_seconds.labels(graph=self.graphs(graph)).observe(waited)

    def webhook_attempt(self, outcome: WebhookOutcome) -> None:
        self.webhook_attempts.labels(outcome=outcome).inc()

    def webhook_posted(self, seconds: float) -> None:
        self.webhook_post_seconds.observe(seconds)

    def webhook_delivered(self, recorded_at: datetime) -> None:
        """A delivery recorded at `recorded_at` (the run's end, Postgres's clock) got its 2xx."""
        self.webhook_delivery_seconds.observe(max(0.0, time.time() - recorded_at.timestamp()))

    def appended(self, batch: Sequence[tuple[str, bytes]]) -> None:
        self.stream_bytes.inc(sum(len(event) + len(data) for event, data in batch))
