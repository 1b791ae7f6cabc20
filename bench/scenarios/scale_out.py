"""`scale_out`: throughput with 1, 2 and 4 server processes, and with 1, 2 and 4 workers.

- Servers: four servers and one worker are started; the `fanout` round (runs x viewers,
  5 ms/token, viewers spread round-robin over the servers in use) gives delivered events/s.
  Servers not in use are idle.
- Workers: then three servers and that worker are stopped, and four workers started with
  `--concurrency 10` (each a Postgres pool of 10, so that they fit a default max_connections of
  100 beside other users). N small runs (20 tokens, delay 0) are submitted while every worker
  is stopped (SIGSTOP); the workers in use continue together (SIGCONT): completed runs/s from
  the first start to the last finish.
- `serve --processes 2`: then, one server started that way (two children on one port, as a
  deployment runs it) takes the same fan-out round, every viewer on its one URL.
Efficiency per core is throughput / (throughput with one process x min(processes, CPUs)).
"""

from __future__ import annotations

import asyncio
import os

import psycopg

from bench.api import Api, words
from bench.context import BenchContext
from bench.launcher import Server
from bench.processes import Namespace

from .concurrent_runs import wait_settled
from .fanout import fanout_round

NAME = "scale_out"
NEEDS: tuple[str, ...] = ()
COUNTS = (1, 2, 4)
RUN_TOKENS = 20
PROCESSES = 2  # `serve --processes`: one per core of the machines these run on
WORKER_CONCURRENCY = 10


def _report(ctx: BenchContext, rates: dict[int, float], kind: str, measure: str, cpus: int) -> None:
    """Throughput per process count, against one process, and its efficiency per core."""
    for count in COUNTS:
        ctx.figure(
            NAME,
            f"{count} {kind}(s): {measure}",
            rates[count],
            "/s",
            baseline=rates[1],
            baseline_label=f"1 {kind}",
        )
        if count > 1:
            efficiency = rates[count] / (rates[1] * min(count, cpus))
            ctx.figure(
                NAME,
                f"{count} {kind}s: efficiency per core",
                efficiency * 100,
                "%",
                notes=f"{cpus} CPUs",
            )


async def _drain_rate(namespace: Namespace, run_ids: list[str]) -> float:
    async with await psycopg.AsyncConnection.connect(
        namespace.services.database_url, autocommit=True
    ) as conn:
        cur = await conn.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at)), count(*)"
            f' FROM "{namespace.schema}".runstream_runs'
            " WHERE run_id = ANY(%s::uuid[]) AND status = 'succeeded'",
            (run_ids,),
        )
        row = await cur.fetchone()
    assert row is not None
    seconds, succeeded = float(row[0]), int(row[1])
    if succeeded != len(run_ids):
        raise AssertionError(f"{succeeded} of {len(run_ids)} runs succeeded")
    return succeeded / seconds


async def run(ctx: BenchContext) -> None:
    cpus = os.cpu_count() or 1
    runs, viewers, tokens = ctx.size(20, 10), ctx.size(50, 20), ctx.size(100, 50)
    batch = ctx.size(300, 100)
    async with ctx.cluster(NAME) as (namespace, cluster):
        servers = await cluster.servers(max(COUNTS))
        fanout_worker = await cluster.ready_worker()
        server_rates: dict[int, float] = {}

        async def complete_round(servers_used: list[Server], label: str) -> float:
            """The fan-out round on `servers_used`: every viewer must get every event."""
            fan = await fanout_round(
                ctx,
                namespace,
                servers_used,
                [fanout_worker],
                runs=runs,
                viewers_per_run=viewers,
                tokens=tokens,
            )
            if fan.complete != fan.viewers:
                raise AssertionError(f"{fan.viewers - fan.complete} viewers missed events")
            ctx.note(NAME, **{label: fan.details()})
            print(f"    {label}: {fan.rate:,.0f} events/s", flush=True)
            return fan.rate

        for count in COUNTS:
            server_rates[count] = await complete_round(servers[:count], f"{count} servers")
        for process in [fanout_worker] + [server.process for server in servers[1:]]:
            process.stop()  # free their Postgres connections for the workers below

        workers = await cluster.workers(max(COUNTS), concurrency=WORKER_CONCURRENCY)
        worker_rates: dict[int, float] = {}
        for worker in workers:
            worker.pause()
        try:
            async with Api(servers[0].url, connections=16) as api:
                limit = asyncio.Semaphore(16)

                async def submit() -> str:
                    async with limit:
                        return str((await api.submit(words(RUN_TOKENS), delay_ms=0))["run_id"])

                for count in COUNTS:
                    run_ids = list(await asyncio.gather(*(submit() for _ in range(batch))))
                    for worker in workers[:count]:
                        worker.resume()
                    await wait_settled(namespace, run_ids, timeout_s=600)
                    for worker in workers[:count]:
                        worker.pause()
                    worker_rates[count] = await _drain_rate(namespace, run_ids)
                    print(f"    {count} worker(s): {worker_rates[count]:,.1f} runs/s", flush=True)
        finally:
            for worker in workers:
                worker.resume()
        for process in [servers[0].process, *workers]:
            process.stop()

        # `runstream serve --processes N`: N children accepting on one port, as deployed.
        one_port = await cluster.server(processes=PROCESSES)
        fanout_worker = await cluster.ready_worker()
        one_port_rate = await complete_round([one_port], f"serve --processes {PROCESSES}")

    _report(ctx, server_rates, "server", "events/s delivered", cpus)
    ctx.figure(
        NAME,
        f"serve --processes {PROCESSES} (one port): events/s delivered",
        one_port_rate,
        "/s",
        baseline=server_rates[1],
        baseline_label="1 server",
        notes="the kernel spreads the viewers' connections over the children",
    )
    _report(ctx, worker_rates, "worker", "runs/s completed", cpus)
    ctx.note(
        NAME,
        fanout_shape={"runs": runs, "viewers_per_run": viewers, "tokens": tokens},
        worker_batch={
            "runs": batch,
            "tokens": RUN_TOKENS,
            "events_per_run": RUN_TOKENS + 6,
            "worker_concurrency": WORKER_CONCURRENCY,
        },
        cpus=cpus,
    )
