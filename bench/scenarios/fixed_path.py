"""`fixed_path`: where a run's fixed path goes, step by step, for one run and for a burst.

What every run pays before its graph and after its first token (issue 36), split at the
moments the product records on the one machine clock: submit (this process, before its POST),
recorded (Postgres `created_at`), claimed (`started_at`, set by the claim), first token
appended (the Redis stream id of the run's first `token` event, in milliseconds), and, for one
run, first token at the client (an SSE client attached right after the 202). The steps:

- record: submit → recorded (the POST's work up to its transaction: rows, checks);
- answer: recorded → 202 at the client (the rest of the submit: the stream opened, the job
  enqueued, the answer sent);
- claim: recorded → claimed (the job found and claimed by the worker);
- start: claimed → first token appended (the attempt's start, the graph's first step, the
  model's first token, the append);
- deliver: first token appended → first token at the client (the server's wake and write).

One run: sequential runs of the `chat` graph with the fake model (delay 0), each on a new
thread, after a warm-up. Burst: N runs submitted together (`burst`'s clients and moments), N =
50 and 200 (`--quick`: 50). With `--against REV`, REV's server and worker run beside this
tree's (bench/revision.py) and both are measured run by run, and burst by burst, in turns (four
bursts of each size per side, `--quick` one): each step's median against REV's, and the median
of the bursts' p99s against REV's. Sequential blocks of runs per tree moved by a millisecond
between invocations of one tree (2026-12-07); in turns both trees share the machine's moments,
and an A/A run (REV = this tree) put the one-run total within 4% (a step of a millisecond or
less, which the Redis id's resolution rounds, within 20%). Redis ids have millisecond
resolution, the others microseconds: a step under 1 ms reads as 0 or 1.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, NamedTuple

import psycopg

from bench import revision
from bench.api import TERMINAL_STATUSES, Api
from bench.context import BenchContext
from bench.launcher import Cluster, Process
from bench.lean_client import LeanClient
from bench.processes import Namespace
from bench.report import summary
from bench.scenarios.burst import Moments, burst, first_token_ms

from .first_token import AttachedRun, attached_run
from .sizes import TTFT_TEXT

NAME = "fixed_path"
NEEDS: tuple[str, ...] = ()
WARMUP = 10  # runs per side before the measured ones: a new worker's first claims are slower
BURST_ROUNDS = 4  # bursts of each size per side with `--against` (`--quick`: 1)


async def _recorded_and_claimed(
    namespace: Namespace, run_ids: list[str]
) -> dict[str, tuple[float, float]]:
    """Each run's (created_at, started_at), Unix seconds."""
    async with await psycopg.AsyncConnection.connect(
        namespace.services.database_url, autocommit=True
    ) as conn:
        cur = await conn.execute(
            "SELECT run_id::text, extract(epoch FROM created_at), extract(epoch FROM started_at)"
            f' FROM "{namespace.schema}".runstream_runs WHERE run_id = ANY(%s::uuid[])',
            (run_ids,),
        )
        return {run_id: (float(c), float(s)) for run_id, c, s in await cur.fetchall()}


STEPS = ("record", "answer", "claim", "start", "deliver", "total")


async def steps_of(namespace: Namespace, seen: list[AttachedRun]) -> dict[str, list[float]]:
    """Each step's milliseconds over the runs `seen` (the moments the product recorded)."""
    run_ids = [run.run_id for run in seen]
    rows = await _recorded_and_claimed(namespace, run_ids)
    appended = await first_token_ms(namespace, run_ids)
    steps: dict[str, list[float]] = {name: [] for name in STEPS}
    for run in seen:
        created, claimed = rows[run.run_id]
        token = appended[run.run_id] / 1000
        submitted = run.submitted
        accepted = submitted + run.accepted_ms / 1000
        first = submitted + run.first_token_ms / 1000
        for name, value in (
            ("record", created - submitted),
            ("answer", accepted - created),
            ("claim", claimed - created),
            ("start", token - claimed),
            ("deliver", first - token),
            ("total", first - submitted),
        ):
            steps[name].append(value * 1000)
    return steps


class Side(NamedTuple):
    """One tree's server and worker, as the steps are taken on them."""

    namespace: Namespace
    url: str
    worker: Process


async def _side(cluster: Cluster, namespace: Namespace, concurrency: int) -> Side:
    server = await cluster.server()
    worker = await cluster.ready_worker(concurrency=concurrency)
    return Side(namespace, server.url, worker)


def turn_order(turn: int, sides: int) -> list[int]:
    """The sides' order in a turn: alternating which goes first."""
    order = list(range(sides))
    return order if turn % 2 == 0 else order[::-1]


async def one_run_steps(sides: list[Side], n: int) -> list[dict[str, list[float]]]:
    """Each side's steps over `n` runs (after `WARMUP` more), the sides run by run in turns."""
    seen: list[list[AttachedRun]] = [[] for _ in sides]
    async with contextlib.AsyncExitStack() as stack:
        apis = [await stack.enter_async_context(Api(side.url)) for side in sides]
        for i in range(WARMUP + n):
            for k in turn_order(i, len(sides)):
                moments = await attached_run(apis[k], sides[k].url, TTFT_TEXT)
                if i >= WARMUP:
                    seen[k].append(moments)
    return [await steps_of(side.namespace, runs) for side, runs in zip(sides, seen, strict=True)]


def burst_steps(moments: list[Moments]) -> dict[str, list[float]]:
    return {
        "record": [(m.created - m.submit) * 1000 for m in moments],
        "claim": [(m.claimed - m.created) * 1000 for m in moments],
        "start": [(m.first_token - m.claimed) * 1000 for m in moments],
        "total": [(m.first_token - m.submit) * 1000 for m in moments],
    }


def report(
    ctx: BenchContext,
    label: str,
    steps: dict[str, list[float]],
    against: dict[str, list[float]] | None = None,
) -> None:
    for name, values in steps.items():
        stats = summary(values)
        baseline = summary(against[name])["median"] if against else None
        ctx.figure(
            NAME,
            f"{label}: {name}, median (p99 {stats['p99']:.1f})",
            stats["median"],
            "ms",
            baseline=baseline,
            baseline_label=(ctx.against or "") if against else "",
            stats=stats,
        )
    details: dict[str, Any] = {name: summary(values) for name, values in steps.items()}
    if against:
        details[f"against {ctx.against}"] = {n: summary(v) for n, v in against.items()}
    ctx.note(NAME, **{label: details})


async def burst_steps_in_turns(
    sides: list[Side], size: int, rounds: int
) -> tuple[list[dict[str, list[float]]], list[list[float]]]:
    """`rounds` bursts of `size` on each side, in turns: each side's steps over all its
    bursts, and each burst's p99 submit → first token."""
    steps: list[dict[str, list[float]]] = [{} for _ in sides]
    p99s: list[list[float]] = [[] for _ in sides]
    for i in range(rounds):
        for k in turn_order(i, len(sides)):
            side = sides[k]
            async with LeanClient(side.url, connections=size) as client:
                moments, _, _ = await burst(client, side.namespace, side.worker, size, "v1")
            taken = burst_steps(moments)
            for name, values in taken.items():
                steps[k].setdefault(name, []).extend(values)
            p99s[k].append(summary(taken["total"])["p99"])
            await asyncio.sleep(1.0)  # the burst's runs finish before the next one
    return steps, p99s


async def run(ctx: BenchContext) -> None:
    sizes = [50] if ctx.quick else [50, 200]
    async with contextlib.AsyncExitStack() as stack:
        namespace, cluster = await stack.enter_async_context(ctx.cluster(NAME))
        sides = [await _side(cluster, namespace, max(sizes))]
        if ctx.against:
            root = stack.enter_context(revision.checkout(ctx.against))
            rev_namespace, rev = await stack.enter_async_context(
                ctx.cluster(f"{NAME}_rev", root=root)
            )
            sides.append(await _side(rev, rev_namespace, max(sizes)))
        runs = await one_run_steps(sides, ctx.size(40, 15))
        report(ctx, "one run", runs[0], runs[1] if ctx.against else None)
        for side in sides:
            async with Api(side.url) as api:
                warm = await api.submit("warm up", delay_ms=0)
                await api.wait_status(warm["run_id"], TERMINAL_STATUSES)
        for size in sizes:
            rounds = ctx.size(BURST_ROUNDS, 1) if ctx.against else 1
            steps, p99s = await burst_steps_in_turns(sides, size, rounds)
            label = f"burst of {size}"
            report(ctx, label, steps[0], steps[1] if ctx.against else None)
            if ctx.against:
                ctx.figure(
                    NAME,
                    f"{label}: total, p99 (median of {rounds} bursts)",
                    summary(p99s[0])["median"],
                    "ms",
                    baseline=summary(p99s[1])["median"],
                    baseline_label=ctx.against,
                )
                ctx.note(NAME, **{f"{label}: p99 per burst": p99s})
