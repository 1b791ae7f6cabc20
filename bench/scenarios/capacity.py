"""`capacity`: the CPU each tier spends per unit of work, and so what one core of it carries.

docs/scaling.md sizes deployments from these figures. CPU time per unit, unlike latency, holds
up on a shared machine: it is the work done, not the wait.

- Runs (no viewers): one server and one worker (`--concurrency 100`) take a batch of short runs
  (`SHORT_TOKENS` tokens) and then a batch of long ones (`LONG_TOKENS`), fake model delay 0.
  For the worker, Redis and Postgres, the CPU of the two batches gives a cost per run and a
  cost per token (two equations, two unknowns); Postgres also gives its transactions per run.
- Fan-out: one server, `FAN_RUNS` runs x `FAN_VIEWERS` viewers each (the `fanout` scenario's
  round), once with short runs and once with long ones: for the server and Redis, a cost per
  viewer (attach, keep-alive) and a cost per delivered event.

CPU is read from /proc for the server and worker processes and for Postgres (the postmaster,
its live children, and what its exited children used), and from `INFO cpu` for Redis. Run it
on services of its own (`./scripts/bench --only capacity` with no service URLs starts embedded
ones): a Redis or Postgres shared with other work counts that work too. Postgres must be on
this machine for its CPU to be read; otherwise its figures are left out.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import psycopg

from bench.api import Api, words
from bench.context import BenchContext
from bench.launcher import cpu_seconds
from bench.processes import Namespace

from .concurrent_runs import wait_settled
from .fanout import FanoutRound, fanout_round

NAME = "capacity"
NEEDS: tuple[str, ...] = ()
SHORT_TOKENS = 10
LONG_TOKENS = 400
# The fan-out rounds have the shape docs/scaling.md sizes for: 20 viewers per run.
FAN_RUNS = 50
FAN_VIEWERS = 20
FAN_TOKENS = (20, 200)
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    """Cumulative CPU seconds of each tier, and Postgres's transaction count, at one moment."""

    server: float
    worker: float
    redis: float
    postgres: float | None
    transactions: int

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.server - other.server,
            self.worker - other.worker,
            self.redis - other.redis,
            None
            if self.postgres is None or other.postgres is None
            else self.postgres - other.postgres,
            self.transactions - other.transactions,
        )


def _postgres_cpu(postmaster: int) -> float:
    """The postmaster's own CPU, what its reaped children used, and its live children's."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone since listdir
            continue
        pid, ppid = int(entry), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / _CLOCK_TICKS


def _postmaster_pid(data_dir: str) -> int | None:
    """The first line of `postmaster.pid`; None when Postgres is elsewhere or unreadable."""
    try:
        with open(os.path.join(data_dir, "postmaster.pid")) as pidfile:
            return int(pidfile.readline())
    except (OSError, ValueError):
        return None


class Meter:
    """Reads `Usage` for one server, one worker, and the namespace's Redis and Postgres."""

    def __init__(self, namespace: Namespace, server_pid: int, worker_pid: int) -> None:
        self.namespace = namespace
        self.server_pid = server_pid
        self.worker_pid = worker_pid
        self.postmaster: int | None = None

    async def find_postmaster(self) -> None:
        """The postmaster's pid from its data directory, when that is readable here."""
        async with await psycopg.AsyncConnection.connect(
            self.namespace.services.database_url, autocommit=True
        ) as conn:
            row = await (await conn.execute("SHOW data_directory")).fetchone()
        self.postmaster = _postmaster_pid(str(row[0]) if row else "")

    async def read(self) -> Usage:
        redis = self.namespace.redis()
        try:
            cpu = await redis.info("cpu")
        finally:
            await redis.aclose()
        async with await psycopg.AsyncConnection.connect(
            self.namespace.services.database_url, autocommit=True
        ) as conn:
            # Statistics reach pg_stat_database up to a second late (PG 15+).
            await asyncio.sleep(1.2)
            row = await (
                await conn.execute(
                    "SELECT xact_commit + xact_rollback FROM pg_stat_database"
                    " WHERE datname = current_database()"
                )
            ).fetchone()
        return Usage(
            server=cpu_seconds(self.server_pid),
            worker=cpu_seconds(self.worker_pid),
            redis=float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            postgres=None if self.postmaster is None else _postgres_cpu(self.postmaster),
            transactions=int(row[0]) if row else 0,
        )


async def _batch(api: Api, namespace: Namespace, runs: int, tokens: int) -> None:
    limit = asyncio.Semaphore(20)
    text = words(tokens)

    async def submit() -> str:
        async with limit:
            return str((await api.submit(text, delay_ms=0))["run_id"])

    run_ids = await asyncio.gather(*(submit() for _ in range(runs)))
    await wait_settled(namespace, run_ids, timeout_s=600)


def _per_run_and_token(
    short: float, long: float, short_runs: int, long_runs: int
) -> tuple[float, float]:
    """Solve short = r*short_runs + t*short_tokens, long = r*long_runs + t*long_tokens."""
    a, b = short_runs, short_runs * SHORT_TOKENS
    c, d = long_runs, long_runs * LONG_TOKENS
    det = a * d - b * c
    per_token = (a * long - c * short) / det
    per_run = (short - b * per_token) / a
    return per_run, per_token


def _per_viewer_and_delivery(
    few: FanoutRound, many: FanoutRound, few_cpu: float, many_cpu: float
) -> tuple[float, float]:
    """Solve cpu = v*viewers + d*deliveries over two rounds of the same viewers."""
    a, b = few.viewers, few.result.events
    c, d = many.viewers, many.result.events
    det = a * d - b * c
    per_delivery = (a * many_cpu - c * few_cpu) / det
    return (few_cpu - b * per_delivery) / a, per_delivery


async def run(ctx: BenchContext) -> None:
    short_runs, long_runs = ctx.size(400, 60), ctx.size(60, 10)
    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server()
        worker = await cluster.ready_worker(concurrency=100)
        meter = Meter(namespace, server.process.pid, worker.pid)
        await meter.find_postmaster()
        async with Api(server.url, connections=20) as api:
            await _batch(api, namespace, 5, SHORT_TOKENS)  # warm up
            start = await meter.read()
            began = time.monotonic()
            await _batch(api, namespace, short_runs, SHORT_TOKENS)
            short_s = time.monotonic() - began
            middle = await meter.read()
            began = time.monotonic()
            await _batch(api, namespace, long_runs, LONG_TOKENS)
            long_s = time.monotonic() - began
            end = await meter.read()
        short, long = middle - start, end - middle

        rounds = []
        for tokens in FAN_TOKENS:
            before = await meter.read()
            fan = await fanout_round(
                ctx,
                namespace,
                [server],
                [worker],
                runs=ctx.size(FAN_RUNS, 10),
                viewers_per_run=FAN_VIEWERS,
                tokens=ctx.size(tokens, tokens // 4),
                delay_ms=20,
            )
            rounds.append((fan, await meter.read() - before))

    tiers: dict[str, tuple[float, float]] = {
        "worker": (short.worker, long.worker),
        "Redis": (short.redis, long.redis),
        "server": (short.server, long.server),
    }
    if short.postgres is not None and long.postgres is not None:
        tiers["Postgres"] = (short.postgres, long.postgres)
    costs = {
        tier: _per_run_and_token(s, lg, short_runs, long_runs) for tier, (s, lg) in tiers.items()
    }
    for tier, (per_run, per_token) in costs.items():
        ctx.figure(NAME, f"{tier}: CPU per run (beyond its tokens)", per_run * 1000, "ms")
        ctx.figure(NAME, f"{tier}: CPU per token event", per_token * 1e6, "µs")
    worker_run, worker_token = costs["worker"]
    ctx.figure(
        NAME,
        "worker: token events/s per core",
        1 / worker_token,
        "/s",
        notes="runs of many tokens; a run's own cost comes on top",
    )
    ctx.figure(
        NAME,
        f"worker: {SHORT_TOKENS}-token runs/s per core",
        1 / (worker_run + SHORT_TOKENS * worker_token),
        "/s",
    )
    if "Postgres" in costs:
        pg_run = costs["Postgres"][0]
        ctx.figure(NAME, "Postgres: runs/s per core", 1 / max(pg_run, 1e-9), "/s")
    transactions = short.transactions / short_runs
    ctx.figure(
        NAME,
        "Postgres: transactions per run",
        transactions,
        "",
        notes="every transaction on the database during the short batch (checkpoints too)",
    )
    # Per viewer (attach, pings, slot renewals) and per delivered event, from the two rounds.
    (few, few_usage), (many, many_usage) = rounds
    server_viewer, server_delivery = _per_viewer_and_delivery(
        few,
        many,
        few.server_cpu_s + few.attach_server_cpu_s,
        many.server_cpu_s + many.attach_server_cpu_s,
    )
    redis_viewer, redis_delivery = _per_viewer_and_delivery(
        few, many, few_usage.redis, many_usage.redis
    )
    shape = f"{FAN_VIEWERS} viewers per run"
    ctx.figure(NAME, "server: CPU per delivered event", server_delivery * 1e6, "µs", notes=shape)
    ctx.figure(NAME, "server: deliveries/s per core", 1 / server_delivery, "/s", notes=shape)
    ctx.figure(
        NAME,
        "server: CPU per viewer (attach, pings)",
        server_viewer * 1000,
        "ms",
        notes="request, ownership check, stream slot, replay, keep-alive",
    )
    ctx.figure(NAME, "Redis: CPU per delivered event", redis_delivery * 1e6, "µs", notes=shape)
    ctx.figure(NAME, "Redis: CPU per viewer", redis_viewer * 1000, "ms")
    ctx.note(
        NAME,
        short={"runs": short_runs, "tokens": SHORT_TOKENS, "seconds": short_s, **vars(short)},
        long={"runs": long_runs, "tokens": LONG_TOKENS, "seconds": long_s, **vars(long)},
        fanout=[{**fan.details(), "usage": vars(usage)} for fan, usage in rounds],
        postmaster_found=meter.postmaster is not None,
    )
