"""`burst`: N runs submitted at the same moment; how soon is each one streaming?

A class of students pressing "send" together, a batch job, a morning rush: N POSTs leave at
once (N warm connections, one per client, as N browsers would have; sent by
`bench/lean_client.py`, so that the clients, which are elsewhere in real life, take little of
the machine's CPU), each a run of the `chat` graph with the fake model streaming 200 tokens
10 ms apart (model time 1.99 s). One worker
with concurrency N takes them all. For N = 10, 50 and 200 (`--quick`: 10 and 50), through
`/v1/runs`, and for 50 also through the LangGraph API (`POST /threads/{t}/runs`, what
`runs.create` sends).

Each run's moments come from where they are recorded, on the one machine clock: submit (this
process, before its POST), created and claimed (Postgres: `created_at`, `started_at`), first
token (the Redis stream id of its first `token` event: the milliseconds of the append), and
finished (`finished_at`). Figures: p50/p99 of submit → first token and of submit → claimed,
the burst's wall (first submit → last run finished) over the model time, and the worker's CPU
per run and Postgres's CPU per run (every `postgres` process on the machine, so only a rough
figure where other work uses Postgres).

Issue 23's targets: 50 runs: p99 submit → first token ≤ 150 ms and wall ≤ 1.2x model time;
200 runs: p99 ≤ 500 ms.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import psutil
import psycopg

from bench.api import TERMINAL_STATUSES, Api, words
from bench.context import BenchContext
from bench.launcher import Process
from bench.lean_client import LeanClient
from bench.processes import Namespace
from bench.report import Target, summary
from bench.scenarios.concurrent_runs import wait_settled

NAME = "burst"
NEEDS: tuple[str, ...] = ()
TOKENS = 200
DELAY_MS = 10
MODEL_S = (TOKENS - 1) * DELAY_MS / 1000
TEXT = words(TOKENS)
FIRST_TOKEN_TARGETS = {50: 150.0, 200: 500.0}  # p99 submit → first token, ms


def postgres_cpu() -> float:
    """CPU seconds of every `postgres` process now alive (backends come and go: a rough sum)."""
    total = 0.0
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in ("postgres", "postmaster"):
            try:
                times = process.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass
    return total


@dataclass
class Moments:
    """One run's moments, in seconds after the burst's first submit."""

    submit: float
    created: float
    claimed: float
    first_token: float
    finished: float


async def submit_v1(client: LeanClient) -> str:
    """What `Api.submit` sends."""
    body = {
        "input": {"messages": [{"role": "user", "content": TEXT}]},
        "graph": "chat",
        "config": {"configurable": {"fake_token_delay_ms": DELAY_MS}},
    }
    status, answer = await client.post("/v1/runs", body)
    if status != 202:
        raise RuntimeError(f"submit answered {status}: {str(answer)[:300]}")
    return str(answer["run_id"])


async def submit_langgraph(client: LeanClient) -> str:
    """What `runs.create` sends."""
    body = {
        "assistant_id": "chat",
        "input": {"messages": [{"role": "user", "content": TEXT}]},
        "config": {"configurable": {"fake_token_delay_ms": DELAY_MS}},
        "if_not_exists": "create",
    }
    status, answer = await client.post(f"/threads/{uuid.uuid4()}/runs", body)
    if status != 200:
        raise RuntimeError(f"runs.create answered {status}: {str(answer)[:300]}")
    return str(answer["run_id"])


async def first_token_ms(namespace: Namespace, run_ids: list[str]) -> dict[str, int]:
    """Each run's first `token` append, in Unix milliseconds (its Redis stream id)."""
    from stream_store.keys import KeySpace

    keys = KeySpace(namespace.prefix)
    redis = namespace.redis()
    found: dict[str, int] = {}
    try:
        for run_id in run_ids:
            for entry_id, fields in await redis.xrange(keys.run_events(run_id), count=20):
                if fields[b"e"] == b"token":
                    found[run_id] = int(entry_id.split(b"-")[0])
                    break
    finally:
        await redis.aclose()
    return found


async def burst(
    client: LeanClient, namespace: Namespace, worker: Process, n: int, dialect: str
) -> tuple[list[Moments], float, float]:
    """Submit `n` runs together; their moments, the worker's and Postgres's CPU seconds."""
    submit = submit_v1 if dialect == "v1" else submit_langgraph
    submitted: dict[str, float] = {}

    async def one() -> str:
        at = time.time()
        run_id = await submit(client)
        submitted[run_id] = at
        return run_id

    worker_before, postgres_before = worker.cpu(), postgres_cpu()
    start = time.time()
    run_ids = await asyncio.gather(*(one() for _ in range(n)))
    await wait_settled(namespace, run_ids, timeout_s=300)
    worker_cpu, pg_cpu = worker.cpu() - worker_before, postgres_cpu() - postgres_before
    firsts = await first_token_ms(namespace, run_ids)
    async with await psycopg.AsyncConnection.connect(
        namespace.services.database_url, autocommit=True
    ) as conn:
        cur = await conn.execute(
            "SELECT run_id::text, status, extract(epoch FROM created_at),"
            " extract(epoch FROM started_at), extract(epoch FROM finished_at)"
            f' FROM "{namespace.schema}".runstream_runs WHERE run_id = ANY(%s::uuid[])',
            (run_ids,),
        )
        rows = await cur.fetchall()
    moments = []
    for run_id, status, created, claimed, finished in rows:
        if status != "succeeded" or run_id not in firsts:
            raise AssertionError(f"run {run_id} ended {status} (first token: {run_id in firsts})")
        moments.append(
            Moments(
                submit=submitted[run_id] - start,
                created=float(created) - start,
                claimed=float(claimed) - start,
                first_token=firsts[run_id] / 1000 - start,
                finished=float(finished) - start,
            )
        )
    return moments, worker_cpu, pg_cpu


def report(
    ctx: BenchContext, n: int, dialect: str, moments: list[Moments], worker_cpu: float, pg: float
) -> None:
    label = f"{n} runs" + (" (LangGraph API)" if dialect == "langgraph" else "")
    to_first = summary([(m.first_token - m.submit) * 1000 for m in moments])
    to_claim = summary([(m.claimed - m.submit) * 1000 for m in moments])
    to_record = summary([(m.created - m.submit) * 1000 for m in moments])
    wall = max(m.finished for m in moments) - min(m.submit for m in moments)
    target = FIRST_TOKEN_TARGETS.get(n)
    for stat in ("median", "p99"):
        ctx.figure(
            NAME,
            f"{label}: submit → first token, {stat}",
            to_first[stat],
            "ms",
            targets=[Target("<=", target)] if target and stat == "p99" else None,
            stats=to_first,
        )
    ctx.figure(NAME, f"{label}: submit → claimed, p99", to_claim["p99"], "ms", stats=to_claim)
    ctx.figure(
        NAME,
        f"{label}: wall / model time",
        wall / MODEL_S,
        "x",
        targets=[Target("<=", 1.2)] if n == 50 else None,
        notes=f"model time {MODEL_S:.2f} s",
    )
    ctx.figure(NAME, f"{label}: worker CPU per run", worker_cpu / n * 1000, "ms")
    ctx.note(
        NAME,
        **{
            f"{dialect}_{n}": {
                "submit_to_created_ms": to_record,
                "submit_to_claimed_ms": to_claim,
                "submit_to_first_token_ms": to_first,
                "wall_s": wall,
                "worker_cpu_s": worker_cpu,
                "postgres_cpu_s": pg,
                "postgres_cpu_ms_per_run": pg / n * 1000,
            }
        },
    )


async def run(ctx: BenchContext) -> None:
    sizes = [10, 50] if ctx.quick else [10, 50, 200]
    rounds = [(n, "v1") for n in sizes] + [(50, "langgraph")]
    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server()
        worker = await cluster.ready_worker(concurrency=max(sizes))
        async with Api(server.url) as api:
            warm = await api.submit("warm up", delay_ms=0)
            await api.wait_status(warm["run_id"], TERMINAL_STATUSES)
        for n, dialect in rounds:
            # n warm connections, as n clients would each have one open
            async with LeanClient(server.url, connections=n) as client:
                moments, worker_cpu, pg_cpu = await burst(client, namespace, worker, n, dialect)
                report(ctx, n, dialect, moments, worker_cpu, pg_cpu)
                await asyncio.sleep(1.0)  # the last round's viewers and writes settle
