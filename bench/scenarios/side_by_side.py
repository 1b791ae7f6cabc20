"""`side_by_side`: the side-by-side workloads against runstream and LangGraph alone, together.

Issue 36's targets are ratios, each measured in one invocation so that the machine's load
falls on both sides alike. LangGraph alone is the floor: the built-in `chat` graph and the fake
model streamed in this process as the worker streams them (`messages`, `updates`, `custom`,
async durability), on LangGraph's own `AsyncPostgresSaver` as shipped (its lock around every
statement included; runstream's saver drops it) over a pool of 10 connections on the
invocation's Postgres (a schema of its own): no queue, no Redis, no HTTP. runstream is one
server and one worker (concurrency 200) of this tree, serving examples/tool-agent beside the
built-in graphs. The workloads, floor and runstream in turns:

- a one-word run's first token (submit → first `token` at an SSE client attached after the
  202; the floor: the call → first token);
- a user's graph (`user_graph`'s examples/tool-agent `ChatOpenAI` agent and local model
  server): the first token runstream adds, served median minus in-process median;
- 50 concurrent runs x 199 token events 10 ms apart, each with a viewer: the wall from the
  first submit to the last viewer's `done`, against the ideal 2.0 s and the floor's wall;
- bursts of 50 and 200 runs (`--quick`: 50) submitted together (`burst`'s clients and
  moments), four of each size per side in turns (`--quick`: one): the median of the bursts'
  p99 submit → first token appended, against the median of the floor's p99s of N runs started
  together;
- one run's token rate (20,000 words, `--quick` 5,000; no delay; tokens over submit → `done`).

`--against REV` also starts REV's server and worker (a temporary checkout, bench/revision.py)
and runs the one-word first token and the token rate against it, run by run in turns with
this tree: those two figures' baseline is REV's (ratio = this tree / REV); without it they
have none and are not met.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench import revision
from bench.api import TERMINAL_STATUSES, Api, words
from bench.context import BenchContext
from bench.launcher import ROOT, Process, Server
from bench.lean_client import LeanClient
from bench.processes import Namespace
from bench.report import Target, summary
from bench.sse import follow

from . import burst as burst_scenario
from . import user_graph
from .first_token import one_first_token
from .floor import stream_chat
from .one_run_throughput import _one as one_viewed_run
from .sizes import THROUGHPUT_WORDS

NAME = "side_by_side"
NEEDS: tuple[str, ...] = ()
ONE_WORD = "hello"
WORKER_MODES = ["messages", "updates", "custom"]  # what runner/execute.py streams
CONCURRENT_RUNS = 50
CONCURRENT_EVENTS = 199
DELAY_MS = 10
IDEAL_S = 2.0  # issue 36: the ideal wall of 50 runs x 199 events at 10 ms
BURST_RATIOS = {50: 1.5, 200: 1.2}  # p99 submit → first token / LangGraph alone's
BURST_ROUNDS = 4  # bursts of each size per side, in turns (`--quick`: 1)
WARMUP = 3
QUICK_WORDS = 5_000  # one run's message with --quick (THROUGHPUT_WORDS otherwise)
FLOOR_POOL = 10  # connections, as the worker's Postgres pool


@dataclass
class Floor:
    """LangGraph alone: the `chat` graph on its Postgres checkpointer, in this process."""

    graph: Any

    async def first_token_ms(self, text: str) -> float:
        tokens, first, _ = await stream_chat(self.graph, text, WORKER_MODES, durability="async")
        if not tokens:
            raise AssertionError("the floor's run streamed no token")
        return first * 1000

    async def tokens_per_s(self, text: str, expected: int) -> float:
        tokens, _, seconds = await stream_chat(self.graph, text, WORKER_MODES, durability="async")
        if tokens != expected:
            raise AssertionError(f"the floor streamed {tokens} tokens, not {expected}")
        return tokens / seconds

    async def together(self, n: int, text: str) -> list[tuple[float, float]]:
        """`n` runs started at one moment, fake model 10 ms apart: each run's (seconds to its
        first token, seconds to its end), from that moment."""
        start = time.perf_counter()
        done = await asyncio.gather(
            *(
                stream_chat(
                    self.graph,
                    text,
                    WORKER_MODES,
                    token_delay_s=DELAY_MS / 1000,
                    durability="async",
                    start=start,
                )
                for _ in range(n)
            )
        )
        return [(first, end) for _, first, end in done]


@contextlib.asynccontextmanager
async def langgraph_alone(ctx: BenchContext) -> AsyncIterator[Floor]:
    """The floor on a schema of its own, dropped afterwards."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    from runner.graphs import chat
    from server.processes.heap import settle_heap

    namespace = Namespace.new(ctx.services, ctx.invocation, f"{NAME}_floor")
    async with await psycopg.AsyncConnection.connect(
        ctx.services.database_url, autocommit=True
    ) as conn:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{namespace.schema}"')
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        ctx.services.database_url,
        min_size=FLOOR_POOL,
        max_size=FLOOR_POOL,
        kwargs={
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "options": f"-c search_path={namespace.schema}",
        },
        open=False,
    )
    try:
        await pool.open(wait=True)
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        floor = Floor(chat.compile(checkpointer=saver))
        settle_heap()  # as the worker does once loaded (floor.py)
        await floor.first_token_ms(ONE_WORD)  # imports and caches
        yield floor
    finally:
        await pool.close()
        await namespace.drop()


@dataclass
class Tree:
    """One source tree's server and worker, on a namespace of their own."""

    label: str
    root: Path
    namespace: Namespace
    server: Server
    worker: Process
    api: Api

    def cwds(self) -> dict[str, str]:
        """Where the children run from, read back from /proc: the tree they import."""
        return {
            "server": os.readlink(f"/proc/{self.server.process.pid}/cwd"),
            "worker": os.readlink(f"/proc/{self.worker.pid}/cwd"),
        }

    def check_root(self) -> None:
        """AssertionError unless both children run from this tree's root."""
        expected = os.path.realpath(self.root)
        if any(cwd != expected for cwd in self.cwds().values()):
            raise AssertionError(f"{self.label}: children run in {self.cwds()}, not {expected}")


@contextlib.asynccontextmanager
async def tree(
    ctx: BenchContext, label: str, root: Path, scenario: str, model_url: str
) -> AsyncIterator[Tree]:
    """A server and a worker of the tree at `root`, serving its examples/tool-agent project
    (the built-in graphs stay served beside it) with `model_url` as the agent's model."""
    async with ctx.cluster(scenario, root=root) as (namespace, cluster):
        env = {
            "RUNSTREAM_CONFIG": str(root / user_graph.PROJECT.relative_to(ROOT) / "langgraph.json"),
            "OPENAI_BASE_URL": model_url,
            "OPENAI_API_KEY": user_graph.API_KEY,
        }
        server, worker = await asyncio.gather(
            cluster.server(0, 1, **env), cluster.ready_worker(max(BURST_RATIOS), **env)
        )
        async with Api(server.url) as api:
            warm = await api.submit("warm up", delay_ms=0)
            await api.wait_status(warm["run_id"], TERMINAL_STATUSES)
            started = Tree(label, root, namespace, server, worker, api)
            started.check_root()
            yield started


async def in_turns(
    rounds: int, ways: dict[str, Callable[[], Awaitable[float]]], warmup: int = 0
) -> dict[str, list[float]]:
    """Each way once per round, the order rotated every round; the first `warmup` rounds are
    not kept."""
    names = list(ways)
    seen: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + rounds):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            value = await ways[name]()
            if i >= warmup:
                seen[name].append(value)
    return seen


def _median_of(rev: Tree | None, seen: dict[str, list[float]]) -> float | None:
    """REV's median, when REV was measured."""
    return summary(seen[rev.label])["median"] if rev is not None else None


async def first_token(ctx: BenchContext, floor: Floor, this: Tree, rev: Tree | None) -> None:
    ways: dict[str, Callable[[], Awaitable[float]]] = {
        "floor": lambda: floor.first_token_ms(ONE_WORD)
    }
    for side in (this, rev):
        if side is not None:
            ways[side.label] = _first_token_of(side)
    seen = await in_turns(ctx.size(30, 10), ways, warmup=WARMUP)
    ours, alone = summary(seen[this.label]), summary(seen["floor"])
    label = "one-word run: submit → first token"
    for stat in ("median", "p99"):
        ctx.figure(
            NAME,
            f"{label}, {stat}",
            ours[stat],
            "ms",
            baseline=alone[stat],
            baseline_label="LangGraph alone",
            stats=ours,
        )
    against_rev(
        ctx,
        f"chat: {label}, median",
        ours,
        "ms",
        _median_of(rev, seen),
        Target("<=", 0.6, on="ratio"),
    )
    ctx.note(NAME, first_token_ms={name: summary(values) for name, values in seen.items()})


def against_rev(
    ctx: BenchContext,
    label: str,
    ours: dict[str, float],
    unit: str,
    today: float | None,
    target: Target,
) -> None:
    """Our median against REV's ("today's", `--against`), with its target; unmeasured (no
    baseline, not met) without `--against`."""
    ctx.figure(
        NAME,
        f"{label}, against {ctx.against or 'REV (none)'}",
        ours["median"],
        unit,
        baseline=today,
        baseline_label=ctx.against or "",
        targets=[target],
        stats=ours,
    )


def _first_token_of(side: Tree) -> Callable[[], Awaitable[float]]:
    async def one() -> float:
        total, _ = await one_first_token(side.api, side.server.url, ONE_WORD)
        return total

    return one


async def token_rate(ctx: BenchContext, floor: Floor, this: Tree, rev: Tree | None) -> None:
    count = ctx.size(THROUGHPUT_WORDS, QUICK_WORDS)
    text = words(count)
    ways: dict[str, Callable[[], Awaitable[float]]] = {
        "floor": lambda: floor.tokens_per_s(text, count)
    }
    for side in (this, rev):
        if side is not None:
            ways[side.label] = _token_rate_of(side, text, count)
    seen = await in_turns(ctx.size(3, 2), ways)
    ours, alone = summary(seen[this.label]), summary(seen["floor"])
    label = f"one run ({count:,} tokens): token events/s, submit → done"
    ctx.figure(
        NAME,
        label,
        ours["median"],
        "/s",
        baseline=alone["median"],
        baseline_label="LangGraph alone",
        stats=ours,
    )
    against_rev(ctx, label, ours, "/s", _median_of(rev, seen), Target(">=", 1.0, on="ratio"))
    ctx.note(NAME, tokens_per_s={name: summary(values) for name, values in seen.items()})


def _token_rate_of(side: Tree, text: str, count: int) -> Callable[[], Awaitable[float]]:
    async def one() -> float:
        viewed = await one_viewed_run(side.api, side.server.url, text)
        if viewed.tokens != count:
            raise AssertionError(f"{side.label}: the viewer got {viewed.tokens} tokens")
        return viewed.tokens / viewed.whole_s

    return one


async def concurrent_wall(this: Tree, n: int, text: str) -> float:
    """`n` runs submitted together, each followed by a viewer attached after its 202: seconds
    from the first submit to the last viewer's `done`."""
    body = {
        "input": {"messages": [{"role": "user", "content": text}]},
        "graph": "chat",
        "config": {"configurable": {"fake_token_delay_ms": DELAY_MS}},
    }

    async def one(client: LeanClient) -> float:
        status, answer = await client.post("/v1/runs", body)
        if status != 202:
            raise RuntimeError(f"submit answered {status}: {str(answer)[:300]}")
        viewed = await follow(this.server.url, answer["stream_url"])
        if not viewed.terminal or viewed.out_of_order or viewed.error:
            raise AssertionError(f"run {answer['run_id']}: viewer saw {viewed}")
        return viewed.last_at

    async with LeanClient(this.server.url, connections=n) as client:
        start = time.time()
        ends = await asyncio.gather(*(one(client) for _ in range(n)))
    return max(ends) - start


async def concurrent(ctx: BenchContext, floor: Floor, this: Tree) -> None:
    text = words(CONCURRENT_EVENTS)

    async def alone() -> float:
        return max(end for _, end in await floor.together(CONCURRENT_RUNS, text))

    async def ours() -> float:
        wall = await concurrent_wall(this, CONCURRENT_RUNS, text)
        await asyncio.sleep(0.5)  # the round's last writes settle
        return wall

    seen = await in_turns(ctx.size(2, 1), {"floor": alone, "this": ours})
    wall, floor_wall = summary(seen["this"]), summary(seen["floor"])
    label = f"{CONCURRENT_RUNS} runs x {CONCURRENT_EVENTS} events at {DELAY_MS} ms: wall"
    ctx.figure(
        NAME,
        label,
        wall["median"],
        "s",
        baseline=IDEAL_S,
        baseline_label="ideal",
        targets=[Target("<=", 1.3, on="ratio")],
        stats=wall,
    )
    ctx.figure(
        NAME,
        f"{label}, against LangGraph alone",
        wall["median"],
        "s",
        baseline=floor_wall["median"],
        baseline_label="LangGraph alone",
        stats=wall,
    )
    ctx.note(NAME, concurrent_wall_s={"runstream": wall, "langgraph_alone": floor_wall})


async def bursts(ctx: BenchContext, floor: Floor, this: Tree) -> None:
    """Bursts of each size, LangGraph alone's and this tree's in turns. The p99 is the median
    of the bursts' own p99s, each side's: one burst's p99 of LangGraph alone moved from 58 to
    127 ms (50 runs) and from 357 to 996 ms (200) between invocations of one tree."""
    sizes = [50] if ctx.quick else list(BURST_RATIOS)
    for n in sizes:
        ratio = BURST_RATIOS[n]
        firsts: dict[str, list[float]] = {"this": [], "floor": []}

        async def alone(n: int = n, firsts: dict[str, list[float]] = firsts) -> float:
            times = [first * 1000 for first, _ in await floor.together(n, burst_scenario.TEXT)]
            firsts["floor"] += times
            return summary(times)["p99"]

        async def ours(n: int = n, firsts: dict[str, list[float]] = firsts) -> float:
            async with LeanClient(this.server.url, connections=n) as client:
                moments, _, _ = await burst_scenario.burst(
                    client, this.namespace, this.worker, n, "v1"
                )
            times = [(m.first_token - m.submit) * 1000 for m in moments]
            firsts["this"] += times
            await asyncio.sleep(1.0)  # the round's viewers and writes settle
            return summary(times)["p99"]

        p99s = await in_turns(ctx.size(BURST_ROUNDS, 1), {"floor": alone, "this": ours})
        stats, floor_stats = summary(firsts["this"]), summary(firsts["floor"])
        ctx.figure(
            NAME,
            f"burst of {n}: submit → first token, median",
            stats["median"],
            "ms",
            baseline=floor_stats["median"],
            baseline_label="LangGraph alone",
            stats=stats,
        )
        rounds = len(p99s["this"])
        ctx.figure(
            NAME,
            f"burst of {n}: submit → first token, p99 (median of {rounds} bursts)",
            summary(p99s["this"])["median"],
            "ms",
            baseline=summary(p99s["floor"])["median"],
            baseline_label="LangGraph alone",
            targets=[Target("<=", ratio, on="ratio")],
            stats=stats,
        )
        ctx.figure(  # the tail the median of bursts leaves out: one slow burst is in it
            NAME,
            f"burst of {n}: submit → first token, p99 of all {rounds} bursts' runs",
            stats["p99"],
            "ms",
            baseline=floor_stats["p99"],
            baseline_label="LangGraph alone",
            stats=stats,
        )
        ctx.note(
            NAME,
            **{
                f"burst_{n}_first_token_ms": {"runstream": stats, "alone": floor_stats},
                f"burst_{n}_p99_per_burst_ms": p99s,
            },
        )


async def user_graph_added(ctx: BenchContext, this: Tree, model_url: str, tokens: int) -> None:
    """The issue-21 user graph (`user_graph`'s), served by this tree and in this process, run
    by run in turns."""
    with user_graph.model_environment(model_url):
        graph = user_graph.project_graph()
        async with httpx.AsyncClient(base_url=this.server.url, timeout=60) as http:

            async def served() -> float:
                return _first_ms(await user_graph.served(http), tokens, "served")

            async def alone() -> float:
                return _first_ms(await user_graph.in_process(graph), tokens, "in-process")

            seen = await in_turns(
                ctx.size(15, 6), {"served": served, "alone": alone}, warmup=user_graph.WARMUP
            )
    ours, alone_stats = summary(seen["served"]), summary(seen["alone"])
    ctx.figure(
        NAME,
        "user graph: submit → first token, median",
        ours["median"],
        "ms",
        baseline=alone_stats["median"],
        baseline_label="LangGraph alone",
        stats=ours,
    )
    ctx.figure(
        NAME,
        "user graph: first token added by runstream, median",
        ours["median"] - alone_stats["median"],
        "ms",
        targets=[Target("<=", 10)],
        notes=f"served {ours['median']:.1f} ms - in-process {alone_stats['median']:.1f} ms",
    )
    ctx.note(NAME, user_graph_first_token_ms={"served": ours, "in_process": alone_stats})


def _first_ms(streamed: tuple[int, float, float], expected: int, way: str) -> float:
    """The first token's ms of a (tokens, first, end) run that streamed every token."""
    tokens, first, _ = streamed
    if tokens != expected:
        raise AssertionError(f"{way}: {tokens} tokens, not {expected}")
    return first * 1000


async def run(ctx: BenchContext) -> None:
    seconds: dict[str, float] = {}
    reply_tokens = ctx.size(300, 100)  # the user graph's model's answer
    async with contextlib.AsyncExitStack() as stack:
        async with timed(seconds, "start"):
            model_url, _ = await stack.enter_async_context(user_graph.openai_compat(reply_tokens))
            floor = await stack.enter_async_context(langgraph_alone(ctx))
            trees = [tree(ctx, "this tree", ROOT, NAME, model_url)]
            if ctx.against:
                rev_root = stack.enter_context(revision.checkout(ctx.against))
                trees.append(tree(ctx, ctx.against, rev_root, f"{NAME}_rev", model_url))
            entered = await asyncio.gather(
                *(stack.enter_async_context(t) for t in trees), return_exceptions=True
            )
            for outcome in entered:
                if isinstance(outcome, BaseException):
                    raise outcome
            started = [t for t in entered if isinstance(t, Tree)]
        this, rev = started[0], (started[1] if len(started) > 1 else None)
        ctx.note(
            NAME,
            trees={t.label: {"root": str(t.root), "children_cwd": t.cwds()} for t in started},
            against=ctx.against and revision.resolve(ctx.against),
        )
        async with timed(seconds, "user graph"):
            await user_graph_added(ctx, this, model_url, reply_tokens)
        async with timed(seconds, "first token"):
            await first_token(ctx, floor, this, rev)
        async with timed(seconds, "token rate"):
            await token_rate(ctx, floor, this, rev)
        async with timed(seconds, "concurrent"):
            await concurrent(ctx, floor, this)
        async with timed(seconds, "bursts"):
            await bursts(ctx, floor, this)
    ctx.note(NAME, leg_seconds=seconds)


@contextlib.asynccontextmanager
async def timed(seconds: dict[str, float], leg: str) -> AsyncIterator[None]:
    """How long each leg took, printed as it ends (the scenario's runtime, leg by leg)."""
    start = time.monotonic()
    yield
    seconds[leg] = time.monotonic() - start
    print(f"    ({leg}: {seconds[leg]:.1f} s)", flush=True)
