"""`concurrent_runs`: one worker process running C runs at once, each at 50 tokens/s.

The worker is started with `--concurrency C`; C runs of K = 100 tokens with fake model delay
20 ms (model time (K-1) x 20 ms = 1.98 s) are submitted together (20 requests in flight).
Each run's created → finished time (from GET /v1/runs/{id}) is divided by the model time.
Completion is watched with one SQL count per 0.25 s, not by polling every run.

Baseline, in the same invocation: the in-process floor, the same C runs of the `chat` graph
streamed concurrently in this process (InMemorySaver, the worker's stream modes, no queue,
Redis or HTTP). It shows what LangGraph and the fake model alone cost at that concurrency in
one Python process.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from bench.api import TERMINAL_STATUSES, Api, parse_time, words
from bench.context import BenchContext
from bench.launcher import Process
from bench.processes import Namespace
from bench.report import Target, summary

NAME = "concurrent_runs"
NEEDS: tuple[str, ...] = ()
TOKENS = 100
DELAY_MS = 20


async def wait_settled(namespace: Namespace, run_ids: list[str], timeout_s: float) -> None:
    """Until every run in `run_ids` is terminal (one COUNT query per 0.25 s)."""
    deadline = time.monotonic() + timeout_s
    async with await psycopg.AsyncConnection.connect(
        namespace.services.database_url, autocommit=True
    ) as conn:
        while True:
            cur = await conn.execute(
                f'SELECT count(*) FROM "{namespace.schema}".runstream_runs'
                " WHERE run_id = ANY(%s::uuid[]) AND status = ANY(%s)",
                (run_ids, list(TERMINAL_STATUSES)),
            )
            row = await cur.fetchone()
            settled = row[0] if row else 0
            if settled >= len(run_ids):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {settled} of {len(run_ids)} runs settled")
            await asyncio.sleep(0.25)


async def in_process_floor(concurrency: int, text: str, model_s: float) -> dict[str, float]:
    """Each of `concurrency` concurrent in-process runs' duration / model time."""
    import uuid

    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from project.graph_context import RunContext
    from runner.graphs import chat
    from runner.run_scope import running

    from .floor import in_process_scope

    graph = chat.compile(checkpointer=InMemorySaver())

    async def one() -> float:
        scope = in_process_scope(str(uuid.uuid4()), token_delay_s=DELAY_MS / 1000)
        context = RunContext(run_id=scope.run_id, thread_id=scope.thread_id, attempt=1)
        config = {"configurable": {"thread_id": context.thread_id}}
        start = time.perf_counter()
        with running(scope):  # what the worker sets around a run's stream
            async for _ in graph.astream(  # type: ignore[call-overload]
                {"messages": [HumanMessage(text)]},
                config,
                context=context,
                stream_mode=["messages", "updates", "custom"],
                durability="async",
            ):
                pass
        return (time.perf_counter() - start) / model_s

    return summary(list(await asyncio.gather(*(one() for _ in range(concurrency)))))


@dataclass
class ConcurrentRound:
    runs: list[dict[str, Any]]  # GET /v1/runs/{id} of each, once all are terminal
    submit_s: float
    wall_s: float  # first submit → last run terminal
    worker_cpu_s: float

    def ratios(self, model_s: float) -> tuple[list[float], list[float], list[float]]:
        """Per run: created→finished / model time, started→finished / model time, and the
        wait in the queue (created→started, ms)."""
        total, execution, waits = [], [], []
        for r in self.runs:
            created, began, finished = (
                parse_time(r["created_at"]),
                parse_time(r["started_at"]),
                parse_time(r["finished_at"]),
            )
            if created is None or began is None or finished is None:
                continue
            total.append((finished - created) / model_s)
            execution.append((finished - began) / model_s)
            waits.append((began - created) * 1000)
        return total, execution, waits

    @property
    def failed(self) -> list[str]:
        return [r["run_id"] for r in self.runs if r["status"] != "succeeded"]


async def concurrent_round(
    api: Api, namespace: Namespace, worker: Process, concurrency: int, text: str
) -> ConcurrentRound:
    """Submit `concurrency` runs of `text` together (20 requests in flight), wait until all
    are terminal, then read each."""
    limit = asyncio.Semaphore(20)

    async def submit() -> str:
        async with limit:
            return str((await api.submit(text, delay_ms=DELAY_MS))["run_id"])

    cpu_before = worker.cpu()
    started = time.monotonic()
    run_ids = await asyncio.gather(*(submit() for _ in range(concurrency)))
    submit_s = time.monotonic() - started
    await wait_settled(namespace, run_ids, timeout_s=600)
    wall_s = time.monotonic() - started
    worker_cpu = worker.cpu() - cpu_before
    runs = []
    for run_id in run_ids:
        async with limit:
            runs.append(await api.run(run_id))
    return ConcurrentRound(runs, submit_s, wall_s, worker_cpu)


async def run(ctx: BenchContext) -> None:
    concurrency = ctx.size(500, 50)
    model_s = (TOKENS - 1) * DELAY_MS / 1000
    text = words(TOKENS)
    floor = await in_process_floor(concurrency, text, model_s)
    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server()
        worker = await cluster.ready_worker(concurrency=concurrency)
        async with Api(server.url, connections=20) as api:
            await api.wait_status(
                (await api.submit("warm up", delay_ms=0))["run_id"], TERMINAL_STATUSES
            )
            measured = await concurrent_round(api, namespace, worker, concurrency, text)
    runs, failed = measured.runs, measured.failed
    submit_s, wall_s, worker_cpu = measured.submit_s, measured.wall_s, measured.worker_cpu_s
    total, execution, waits = measured.ratios(model_s)
    ratio, exec_ratio, wait = summary(total), summary(execution), summary(waits)
    label = f"{concurrency} runs"
    for stat in ("median", "p99"):
        ctx.figure(
            NAME,
            f"{label}: created→finished / model time, {stat}",
            ratio[stat],
            "x",
            baseline=floor[stat],
            baseline_label="in-process floor",
            targets=[Target("<=", 1.1)],
            stats=ratio,
            notes=f"model time {model_s:.2f} s",
        )
    ctx.figure(
        NAME,
        f"{label}: started→finished / model time, p99",
        exec_ratio["p99"],
        "x",
        stats=exec_ratio,
    )
    ctx.figure(NAME, f"{label}: queued (created→started), p99", wait["p99"], "ms", stats=wait)
    ctx.figure(
        NAME,
        f"{label}: succeeded",
        len(runs) - len(failed),
        "",
        targets=[Target(">=", concurrency)],
    )
    ctx.note(
        NAME,
        concurrency=concurrency,
        tokens=TOKENS,
        delay_ms=DELAY_MS,
        model_s=model_s,
        started_to_finished_ratio=exec_ratio,
        in_process_floor_ratio=floor,
        queued_ms=wait,
        submit_s=submit_s,
        wall_s=wall_s,
        worker_cpu_cores=worker_cpu / wall_s,
        token_events_per_s=concurrency * TOKENS / wall_s,
        failed=failed[:20],
    )
