"""`cluster`: runstream on a local three-master Redis Cluster, against one Redis (issue 12).

A private cluster is started for the scenario (bench/redis_cluster.py: three `redis-server`
masters on loopback, nothing saved) and runstream is given one node's URL, as a deployment is
configured; it finds the other nodes itself. The baseline is the invocation's Redis, in the same
run: each of the two gets a namespace with one server and one worker (`--concurrency C`), both
up at once, and each measurement runs on one Redis and then on the cluster, with the helpers of
the scenarios it repeats:

- first token (`first_token`): sequential runs, submit → first `token` event at the client,
  in rounds that alternate between the two;
- fan-out (`fanout`): R runs x V viewers at fanout's offered load, events/s delivered, XADD →
  receipt latency and the server's CPU per delivered event;
- concurrent runs (`concurrent_runs`): C runs of 100 tokens at 20 ms submitted together, token
  events/s over first submit → last run terminal, and created→finished / model time.

Every figure's baseline is the one-Redis figure of this run (ratio = cluster / one Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.api import TERMINAL_STATUSES, Api, words
from bench.context import BenchContext
from bench.launcher import Process, Server
from bench.processes import Namespace, Services
from bench.redis_cluster import LocalRedisCluster
from bench.report import Target, summary

from . import concurrent_runs, fanout
from .first_token import first_token_times

NAME = "cluster"
NEEDS: tuple[str, ...] = ()
BACKENDS = ("one Redis", "cluster")
ROUNDS = 4  # of first-token runs


@dataclass
class Backend:
    namespace: Namespace
    server: Server
    worker: Process


async def run(ctx: BenchContext) -> None:
    runs, viewers, tokens = ctx.size(10, 10), ctx.size(100, 20), ctx.size(200, 100)
    concurrency = ctx.size(200, 50)
    async with contextlib.AsyncExitStack() as stack:
        started = time.monotonic()
        local = await asyncio.to_thread(LocalRedisCluster, "rs-bench-redis-cluster-")
        stack.callback(local.stop)  # last: the namespace is dropped from the cluster first
        ctx.note(NAME, cluster_start_s=time.monotonic() - started)
        services = {
            "one Redis": ctx.services,
            "cluster": Services(local.url, ctx.services.database_url),
        }
        backends: dict[str, Backend] = {}
        for label in BACKENDS:
            tag = f"{NAME}_{label.split()[-1].lower()}"  # cluster_redis, cluster_cluster
            namespace, processes = await stack.enter_async_context(
                ctx.cluster(tag, services[label])
            )
            server = await processes.server()
            worker = await processes.ready_worker(concurrency=concurrency)
            backends[label] = Backend(namespace, server, worker)

        await first_token(ctx, backends, ctx.size(60, 20))
        await fan_out(ctx, backends, runs, viewers, tokens)
        await concurrent(ctx, backends, concurrency)


def compare(
    ctx: BenchContext,
    name: str,
    values: Mapping[str, float | None],
    unit: str,
    *,
    targets: list[Target] | None = None,
    stats: dict[str, float] | None = None,
    notes: str = "",
) -> None:
    """One row: the cluster's figure, with one Redis's as its baseline."""
    ctx.figure(
        NAME,
        name,
        values["cluster"],
        unit,
        baseline=values["one Redis"],
        baseline_label="one Redis",
        targets=targets,
        stats=stats,
        notes=notes,
    )


def compare_stats(
    ctx: BenchContext,
    name: str,
    summaries: Mapping[str, Mapping[str, float]],
    unit: str,
    stats: tuple[str, ...] = ("median", "p99"),
) -> None:
    """A row per statistic of each side's summary; `name` has a `{stat}` to fill."""
    for stat in stats:
        compare(
            ctx,
            name.format(stat=stat),
            {label: summary.get(stat) for label, summary in summaries.items()},
            unit,
            stats=dict(summaries["cluster"]),
        )


async def first_token(ctx: BenchContext, backends: dict[str, Backend], n: int) -> None:
    """`n` runs on each, in `ROUNDS` rounds that alternate which goes first: whichever is
    measured first is otherwise a few % slower (warm-up, drift of the machine's load)."""
    totals: dict[str, list[float]] = {label: [] for label in backends}
    post_ms: dict[str, list[float]] = {label: [] for label in backends}
    labels = list(backends)
    for i in range(ROUNDS):
        for label in labels if i % 2 == 0 else labels[::-1]:
            times, accepted = await first_token_times(backends[label].server.url, n // ROUNDS)
            totals[label] += times
            post_ms[label] += accepted
    stats = {label: summary(values) for label, values in totals.items()}
    posts = {label: summary(values) for label, values in post_ms.items()}
    compare_stats(ctx, "submit → first token, {stat}", stats, "ms")
    compare(
        ctx,
        "POST /v1/runs → 202, median",
        {label: s["median"] for label, s in posts.items()},
        "ms",
        stats=posts["cluster"],
    )
    ctx.note(NAME, first_token={"runs": n, "ms": stats, "post_ms": posts})


async def fan_out(
    ctx: BenchContext, backends: dict[str, Backend], runs: int, viewers: int, tokens: int
) -> None:
    delay_ms = max(2, round(runs * viewers * 1000 / fanout.OFFERED_PER_S))
    rounds: dict[str, fanout.FanoutRound] = {}
    for label, backend in backends.items():
        rounds[label] = await fanout.fanout_round(
            ctx,
            backend.namespace,
            [backend.server],
            [backend.worker],
            runs=runs,
            viewers_per_run=viewers,
            tokens=tokens,
            delay_ms=delay_ms,
        )
    shape = f"{runs}x{viewers}"
    complete = {label: 100 * r.complete / r.viewers for label, r in rounds.items()}
    compare(ctx, f"{shape}: viewers complete", complete, "%", targets=[Target(">=", 100)])
    compare(
        ctx,
        f"{shape}: events/s delivered",
        {label: r.rate for label, r in rounds.items()},
        "/s",
        notes=f"offered {rounds['cluster'].offered:,.0f}/s",
    )
    latencies = {label: r.latency for label, r in rounds.items()}
    compare_stats(ctx, shape + ": XADD→receipt {stat}", latencies, "ms", ("p50", "p99"))
    compare(
        ctx,
        f"{shape}: server CPU per delivered event",
        {label: 1e6 * r.server_cpu_s / max(1, r.live_events) for label, r in rounds.items()},
        "µs",
    )
    ctx.note(
        NAME,
        fanout={"tokens_per_run": tokens, **{k: r.details() for k, r in rounds.items()}},
    )


async def concurrent(ctx: BenchContext, backends: dict[str, Backend], concurrency: int) -> None:
    tokens, delay_ms = concurrent_runs.TOKENS, concurrent_runs.DELAY_MS
    model_s = (tokens - 1) * delay_ms / 1000
    text = words(tokens)
    rounds: dict[str, concurrent_runs.ConcurrentRound] = {}
    for label, backend in backends.items():
        async with Api(backend.server.url, connections=20) as api:
            await api.wait_status(
                (await api.submit("warm up", delay_ms=0))["run_id"], TERMINAL_STATUSES
            )
            rounds[label] = await concurrent_runs.concurrent_round(
                api, backend.namespace, backend.worker, concurrency, text
            )
    label = f"{concurrency} runs"
    compare(
        ctx,
        f"{label}: token events/s",
        {k: concurrency * tokens / r.wall_s for k, r in rounds.items()},
        "/s",
        notes=f"first submit → last run terminal; model time {model_s:.2f} s",
    )
    ratios = {k: summary(r.ratios(model_s)[0]) for k, r in rounds.items()}
    compare_stats(ctx, label + ": created→finished / model time, {stat}", ratios, "x")
    compare(
        ctx,
        f"{label}: succeeded",
        {k: len(r.runs) - len(r.failed) for k, r in rounds.items()},
        "",
        targets=[Target(">=", concurrency)],
    )
    details: dict[str, Any] = {
        k: {
            "wall_s": r.wall_s,
            "submit_s": r.submit_s,
            "worker_cpu_cores": r.worker_cpu_s / r.wall_s,
            "created_to_finished_ratio": ratios[k],
            "failed": r.failed[:20],
        }
        for k, r in rounds.items()
    }
    ctx.note(NAME, concurrent_runs={"concurrency": concurrency, **details})
