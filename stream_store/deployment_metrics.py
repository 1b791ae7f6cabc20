"""Deployment-wide gauges read from Postgres and Redis when Prometheus scrapes a server.

Runs by status, the queue, the live workers, Redis's memory, the evaluations graphs wrote
(their totals, stream_store/evaluations.py) and the webhook deliveries pending are facts of the
deployment, not of one process, so they are read from storage rather than counted. A scrape
cannot hammer the stores: one read serves every scrape for `MAX_AGE_S` (concurrent scrapes
share it), the read is bounded in time (`TIMEOUT_S`, also as Postgres's `statement_timeout`),
and every query is bounded in size: active runs and pending deliveries via their partial
indexes, the oldest `QUEUE_SAMPLE` queue entries, one `INFO memory`. Every server reports the
same figures; dashboards take `max`.

Collectors of prometheus_client are synchronous, so the server's `/metrics` handler awaits
`refresh()` first and the collector then reports the snapshot it left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import structlog
from arq.constants import in_progress_key_prefix
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from redis.asyncio import Redis
from redis.exceptions import RedisError

from .connections import PgPool
from .errors import StoreError
from .evaluations import SCORE_BUCKETS
from .keys import KeySpace
from .metrics import GraphLabels
from .run_status import ACTIVE, sql_list
from .workers import WorkerRegistry

__all__ = ["DeploymentGauges", "DeploymentSnapshot"]

logger = structlog.get_logger()

MAX_AGE_S = 1.0  # one storage read per this interval, however many scrapes
TIMEOUT_S = 2.0  # a read slower than this gives up (the snapshot's gauges are left out)
QUEUE_SAMPLE = 2000  # the oldest queue entries checked for a worker holding them

_ACTIVE_RUNS_SQL = (
    "SELECT graph, status, count(*) AS runs FROM runstream_runs"
    f" WHERE status IN {sql_list(ACTIVE)} GROUP BY graph, status"
)

# Through the partial index of pending deliveries: as many rows as are pending, bounded per
# caller by RUNSTREAM_MAX_PENDING_WEBHOOKS.
_PENDING_WEBHOOKS_SQL = "SELECT count(*) AS n FROM runstream_webhooks WHERE state = 'pending'"

# A row per graph and kind (a few per graph at most), kept as the evaluations are written.
_EVALUATION_TOTALS_SQL = (
    "SELECT graph, kind, evaluations, passed, failed, score_sum, at_most"
    " FROM runstream_evaluation_totals"
)


@dataclass
class EvaluationTotals:
    """The evaluations written of one graph and kind, ever (deletions take nothing away)."""

    evaluations: int = 0
    passed: int = 0
    failed: int = 0
    score_sum: float = 0.0
    at_most: list[int] = field(default_factory=lambda: [0] * len(SCORE_BUCKETS))

    def add(self, row: dict[str, Any]) -> None:
        self.evaluations += row["evaluations"]
        self.passed += row["passed"]
        self.failed += row["failed"]
        self.score_sum += row["score_sum"]
        self.at_most = [a + b for a, b in zip(self.at_most, row["at_most"], strict=True)]


@dataclass
class DeploymentSnapshot:
    runs: dict[tuple[str, str], int] = field(default_factory=dict)  # (graph, status) -> runs
    queue_jobs: int = 0
    queue_waiting: int = 0
    queue_oldest_waiting_s: float = 0.0
    workers_alive: int = 0
    workers_capacity: int = 0
    workers_busy: int = 0
    redis_used_bytes: int = 0
    redis_max_bytes: int = 0
    webhooks_pending: int = 0
    evaluations: dict[tuple[str, str], EvaluationTotals] = field(default_factory=dict)


# The snapshot's single-valued gauges: name, help text, and how each is read from a snapshot.
_SNAPSHOT_GAUGES: tuple[tuple[str, str, Callable[[DeploymentSnapshot], float]], ...] = (
    (
        "runstream_queue_jobs",
        "Jobs in the arq queue, including those a worker runs now",
        lambda snapshot: snapshot.queue_jobs,
    ),
    (
        "runstream_queue_waiting",
        "Jobs in the arq queue that no worker has picked yet",
        lambda snapshot: snapshot.queue_waiting,
    ),
    (
        "runstream_queue_oldest_waiting_seconds",
        "Age of the oldest job no worker has picked yet (0 when none waits)",
        lambda snapshot: snapshot.queue_oldest_waiting_s,
    ),
    (
        "runstream_workers_alive",
        "Workers whose heartbeat is current",
        lambda snapshot: snapshot.workers_alive,
    ),
    (
        "runstream_workers_capacity",
        "Attempts the live workers execute at once at most (sum of their concurrency)",
        lambda snapshot: snapshot.workers_capacity,
    ),
    (
        "runstream_workers_busy",
        "Attempts the live workers execute now, by their heartbeats",
        lambda snapshot: snapshot.workers_busy,
    ),
    (
        "runstream_redis_memory_used_bytes",
        "Redis used_memory: run streams and records are nearly all of it",
        lambda snapshot: snapshot.redis_used_bytes,
    ),
    (
        "runstream_redis_memory_max_bytes",
        "Redis maxmemory (0: no limit set)",
        lambda snapshot: snapshot.redis_max_bytes,
    ),
    (
        "runstream_webhooks_pending",
        "Webhook deliveries not settled yet (attempts to come, or one in flight), from Postgres",
        lambda snapshot: snapshot.webhooks_pending,
    ),
)


class DeploymentGauges(Collector):
    """The storage-read gauges of a server's `/metrics` (docs/operations.md)."""

    def __init__(
        self,
        pool: PgPool,
        redis: Redis,
        keys: KeySpace,
        graphs: GraphLabels,
        *,
        max_age_s: float = MAX_AGE_S,
    ) -> None:
        self.pool = pool
        self.max_age_s = max_age_s
        self.redis = redis
        self.keys = keys
        self.graphs = graphs
        self._snapshot: DeploymentSnapshot | None = None
        self._read_at = float("-inf")
        self._read_s = 0.0
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Read storage again unless the last read is recent; never raises."""
        async with self._lock:
            started = time.monotonic()
            if started - self._read_at < self.max_age_s:
                return
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    self._snapshot = await self._read()
            except (TimeoutError, StoreError, RedisError, psycopg.Error) as exc:  # pool's too
                logger.warning("metrics: reading storage failed", error=str(exc) or "timeout")
                self._snapshot = None
            self._read_at = time.monotonic()
            self._read_s = self._read_at - started

    async def _read(self) -> DeploymentSnapshot:
        snapshot = DeploymentSnapshot()
        await self._read_runs(snapshot)
        await self._read_queue(snapshot)
        beats = await WorkerRegistry(self.redis, self.keys).alive()
        snapshot.workers_alive = len(beats)
        snapshot.workers_capacity = sum(beat.concurrency for beat in beats)
        snapshot.workers_busy = sum(len(beat.run_ids) for beat in beats)
        memory = await self.redis.info("memory")
        snapshot.redis_used_bytes = int(memory.get("used_memory", 0))
        snapshot.redis_max_bytes = int(memory.get("maxmemory", 0))
        return snapshot

    async def _read_runs(self, snapshot: DeploymentSnapshot) -> None:
        async with self.pool.connection(timeout=TIMEOUT_S) as conn, conn.transaction():
            await conn.execute(f"SET LOCAL statement_timeout = {int(TIMEOUT_S * 1000)}")
            rows = await (await conn.execute(_ACTIVE_RUNS_SQL)).fetchall()
            totals = await (await conn.execute(_EVALUATION_TOTALS_SQL)).fetchall()
            [pending] = await (await conn.execute(_PENDING_WEBHOOKS_SQL)).fetchall()
        snapshot.webhooks_pending = pending["n"]
        for row in totals:
            key = (self.graphs(row["graph"]), row["kind"])
            snapshot.evaluations.setdefault(key, EvaluationTotals()).add(row)
        for graph in self.graphs.values:
            for status in sorted(ACTIVE):
                snapshot.runs[graph, status.value] = 0
        for row in rows:
            key = (self.graphs(row["graph"]), row["status"])
            snapshot.runs[key] = snapshot.runs.get(key, 0) + row["runs"]

    async def _read_queue(self, snapshot: DeploymentSnapshot) -> None:
        """arq keeps a job in its queue while a worker runs it (with an in-progress key), so
        the jobs waiting are those without that key. Exact while the queue holds at most
        `QUEUE_SAMPLE` jobs; beyond, jobs held by workers past the oldest sample count as
        waiting."""
        queue = self.keys.queue()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(queue)
            pipe.zrange(queue, 0, QUEUE_SAMPLE - 1, withscores=True)
            total, oldest = await pipe.execute()
        held: list[int] = []
        if oldest:
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id, _ in oldest:
                    pipe.exists(in_progress_key_prefix + job_id.decode())
                held = await pipe.execute()
        now_ms = time.time() * 1000
        waiting = [score for (_, score), busy in zip(oldest, held, strict=True) if not busy]
        due = [score for score in waiting if score <= now_ms]  # runstream defers no job
        snapshot.queue_jobs = total
        snapshot.queue_waiting = total - (len(oldest) - len(waiting))
        snapshot.queue_oldest_waiting_s = (now_ms - min(due)) / 1000 if due else 0.0

    def collect(self) -> Iterable[Metric]:
        """The gauges of the last read (prometheus_client calls this, synchronously)."""
        snapshot = self._snapshot
        yield GaugeMetricFamily(
            "runstream_storage_read_success",
            "1 when this server's last read of the deployment gauges from storage worked",
            value=0 if snapshot is None else 1,
        )
        yield GaugeMetricFamily(
            "runstream_storage_read_seconds",
            "How long this server's last read of the deployment gauges took",
            value=self._read_s,
        )
        if snapshot is None:
            return  # no stale figures: a failed read leaves the gauges out
        runs = GaugeMetricFamily(
            "runstream_runs",
            "Runs in each active status now (queued, running, interrupted), from Postgres",
            labels=["graph", "status"],
        )
        for (graph, status), count in sorted(snapshot.runs.items()):
            runs.add_metric([graph, status], count)
        yield runs
        for name, text, value in _SNAPSHOT_GAUGES:
            yield GaugeMetricFamily(name, text, value=value(snapshot))
        yield from _evaluation_metrics(snapshot.evaluations)


def _evaluation_metrics(totals: dict[tuple[str, str], EvaluationTotals]) -> Iterable[Metric]:
    """The evaluations written, by graph and kind: a count by whether they passed, and their
    scores' histogram (a series for each graph and kind that has any)."""
    written = CounterMetricFamily(
        "runstream_evaluations",
        "Evaluations graphs wrote (runner/evaluations.py), once per run and key, by whether they"
        " passed (none: not a pass/fail check); from Postgres",
        labels=["graph", "kind", "passed"],
    )
    scores = HistogramMetricFamily(
        "runstream_evaluation_score",
        "Scores (0 to 1) of the evaluations graphs wrote; from Postgres",
        labels=["graph", "kind"],
    )
    for (graph, kind), figures in sorted(totals.items()):
        none = figures.evaluations - figures.passed - figures.failed
        for passed, count in (("true", figures.passed), ("false", figures.failed), ("none", none)):
            written.add_metric([graph, kind, passed], count)
        buckets = [(str(b), n) for b, n in zip(SCORE_BUCKETS, figures.at_most, strict=True)]
        scores.add_metric(
            [graph, kind], [*buckets, ("+Inf", figures.evaluations)], sum_value=figures.score_sum
        )
    yield from (written, scores)
