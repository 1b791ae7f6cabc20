"""Deployment-wide gauges read from Postgres and Redis when Prometheus scrapes a server.

Runs by status, the queue, the live workers, Redis's memory and the evaluations graphs recorded
(runner/evaluations.py) are facts of the deployment, not of one process, so they are read from
storage rather than counted. A scrape cannot hammer
the stores: one read serves every scrape for `MAX_AGE_S` (concurrent scrapes share it), the
read is bounded in time (`TIMEOUT_S`, also as Postgres's `statement_timeout`), and every query
is bounded in size: active runs via their partial index, the oldest `QUEUE_SAMPLE` queue
entries, one `INFO memory`. Every server reports the same figures; dashboards take `max`.

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
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.asyncio import Redis
from redis.exceptions import RedisError

from .connections import PgPool
from .errors import StoreError
from .keys import KeySpace
from .limits import EVALUATION_KINDS_PER_GRAPH_IN_METRICS
from .metrics import ACTIVE_STATUSES, OTHER_GRAPH, GraphLabels
from .workers import WorkerRegistry

__all__ = ["DeploymentGauges", "DeploymentSnapshot"]

logger = structlog.get_logger()

MAX_AGE_S = 1.0  # one storage read per this interval, however many scrapes
TIMEOUT_S = 2.0  # a read slower than this gives up (the snapshot's gauges are left out)
QUEUE_SAMPLE = 2000  # the oldest queue entries checked for a worker holding them

_ACTIVE_RUNS_SQL = (
    "SELECT graph, status, count(*) AS runs FROM runstream_runs"
    " WHERE status IN ('queued', 'running', 'interrupted') GROUP BY graph, status"
)

# The thresholds of the evaluations' score distribution (`le`: scores at most this; every
# score is at most 1, which the count is).
SCORE_THRESHOLDS = (0.25, 0.5, 0.75, 0.9)
# Every evaluation held, by graph and kind: one pass over the table per read, which deleting
# runs and threads (and their retention) keeps bounded.
_AT_MOST = ",".join(
    f" count(*) FILTER (WHERE score <= {t}) AS at_most_{i}" for i, t in enumerate(SCORE_THRESHOLDS)
)
_EVALUATIONS_SQL = (
    "SELECT graph, kind, count(*) AS evaluations, count(*) FILTER (WHERE NOT passed) AS failed,"
    f" sum(score) AS score_sum,{_AT_MOST} FROM runstream_evaluations GROUP BY graph, kind"
)


@dataclass
class EvaluationFigures:
    """The evaluations of one graph and kind."""

    evaluations: int = 0
    failed: int = 0  # recorded with `passed` false
    score_sum: float = 0.0
    at_most: list[int] = field(default_factory=lambda: [0] * len(SCORE_THRESHOLDS))

    def add(self, other: EvaluationFigures) -> None:
        self.evaluations += other.evaluations
        self.failed += other.failed
        self.score_sum += other.score_sum
        self.at_most = [a + b for a, b in zip(self.at_most, other.at_most, strict=True)]


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
    # (graph, kind) -> figures; per graph its most frequent kinds, the rest as kind `other`
    evaluations: dict[tuple[str, str], EvaluationFigures] = field(default_factory=dict)


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
            graded = await (await conn.execute(_EVALUATIONS_SQL)).fetchall()
        snapshot.evaluations = self._evaluation_figures(graded)
        for graph in self.graphs.values:
            for status in ACTIVE_STATUSES:
                snapshot.runs[graph, status.value] = 0
        for row in rows:
            key = (self.graphs(row["graph"]), row["status"])
            snapshot.runs[key] = snapshot.runs.get(key, 0) + row["runs"]

    def _evaluation_figures(
        self, rows: list[dict[str, Any]]
    ) -> dict[tuple[str, str], EvaluationFigures]:
        """The rows by graph label and kind, each graph's kinds past its
        `EVALUATION_KINDS_PER_GRAPH_IN_METRICS` most frequent merged into `other`."""
        by_graph: dict[str, dict[str, EvaluationFigures]] = {}
        for row in rows:
            figures = EvaluationFigures(
                evaluations=row["evaluations"],
                failed=row["failed"],
                score_sum=float(row["score_sum"]),
                at_most=[row[f"at_most_{i}"] for i in range(len(SCORE_THRESHOLDS))],
            )
            kinds = by_graph.setdefault(self.graphs(row["graph"]), {})
            kinds.setdefault(row["kind"], EvaluationFigures()).add(figures)
        found: dict[tuple[str, str], EvaluationFigures] = {}
        for graph, kinds in by_graph.items():
            ranked = sorted(kinds.items(), key=lambda item: (-item[1].evaluations, item[0]))
            for rank, (kind, figures) in enumerate(ranked):
                label = kind if rank < EVALUATION_KINDS_PER_GRAPH_IN_METRICS else OTHER_GRAPH
                found.setdefault((graph, label), EvaluationFigures()).add(figures)
        return found

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
        yield from _evaluation_gauges(snapshot.evaluations)


def _evaluation_gauges(found: dict[tuple[str, str], EvaluationFigures]) -> Iterable[Metric]:
    """The evaluations held in Postgres, by graph and kind (a series for each pair that has
    any): how many, how many failed, their scores' sum (the mean is sum / count) and how many
    scored at most each of `SCORE_THRESHOLDS`."""
    labels = ["graph", "kind"]
    count = GaugeMetricFamily(
        "runstream_evaluations", "Evaluations graphs recorded, held in Postgres", labels=labels
    )
    failed = GaugeMetricFamily(
        "runstream_evaluations_failed", "Of those, the ones recorded as not passed", labels=labels
    )
    score_sum = GaugeMetricFamily(
        "runstream_evaluation_score_sum",
        "The sum of those evaluations' scores (0 to 1 each): divided by the count, their mean",
        labels=labels,
    )
    at_most = GaugeMetricFamily(
        "runstream_evaluation_scores_at_most",
        "Of those evaluations, how many scored at most `le`",
        labels=[*labels, "le"],
    )
    for (graph, kind), figures in sorted(found.items()):
        count.add_metric([graph, kind], figures.evaluations)
        failed.add_metric([graph, kind], figures.failed)
        score_sum.add_metric([graph, kind], figures.score_sum)
        for threshold, scored in zip(SCORE_THRESHOLDS, figures.at_most, strict=True):
            at_most.add_metric([graph, kind, str(threshold)], scored)
    yield from (count, failed, score_sum, at_most)
