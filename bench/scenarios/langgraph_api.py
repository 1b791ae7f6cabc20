"""`langgraph_api`: the LangGraph API against `/v1`: first token, one run, 100 viewers.

Both APIs are measured in the same run: first token, one-run throughput and 100 viewers of
one run.

One server, one worker, product defaults, the `fake` model. Each LangGraph figure has the `/v1`
figure of this invocation as its baseline (ratio = LangGraph / `/v1`): at most 1.10 for times,
at least 0.90 for rates. The two APIs take turns (run by run, round by round), so noise from
other work on the machine falls on both alike.

- first token: `POST /v1/runs` then `GET stream_url`, against `POST /threads/{t}/runs/stream`
  (`stream_mode: ["messages-tuple"]`, `if_not_exists: "create"` on a new thread id, as `/v1`
  makes a new thread); from before the POST to the first `token` / `messages` event.
  Sequential runs of first_token's message, model delay 0, after a few warm-up runs.
- one-run throughput: one_run_throughput's 20,000-word message (5,000 with --quick), model
  delay 0; `token` events (`/v1`) or `messages` events (LangGraph) over the time from before
  the POST to the terminal event. Both clients are plain httpx with the same SSE parser
  (`bench.sse.SseParser`), so the client's cost is the same; a stream cut short is rejoined
  with Last-Event-ID.
- 100 viewers: fanout's gate (the worker is stopped while the run is submitted and the viewers
  attach) and its load generator (`bench.load.ViewerLoad`), reading `/v1` attach streams or
  LangGraph join streams (`GET /threads/{t}/runs/{r}/stream`, `Last-Event-ID: -1`), then
  SETTLE_S more (LangGraph's first event goes out before the viewer is subscribed). Delivered
  events/s (first live event to last) and XADD→receipt latency; the LangGraph viewer's events
  are the `metadata`, one `messages` per token and `end`.
"""

from __future__ import annotations

import asyncio
import resource
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.api import Api, words
from bench.context import BenchContext
from bench.launcher import Process, Server
from bench.load import ViewerLoad
from bench.processes import Namespace, machine_cpu
from bench.report import Target, histogram_summary, summary
from bench.sse import LANGGRAPH_TERMINAL, TERMINAL, SseEvent, SseParser

from .fanout import FanoutRound
from .sizes import THROUGHPUT_WORDS, TTFT_TEXT

NAME = "langgraph_api"
NEEDS: tuple[str, ...] = ()
WARMUP = 3
VIEWERS = 100
FANOUT_DELAY_MS = 2  # 100 viewers x 500 tokens/s: fanout's offered load for 1x100
# LangGraph's stream sends its `metadata` before the viewer subscribes to the run's live
# events (server/langgraph/runs.py `_stream`), so "every viewer has its first event" does not
# mean "every viewer is live" there; both APIs wait this long more before the run starts.
SETTLE_S = 0.5
MODES = ["messages-tuple"]
SSE_ACCEPT = {"Accept": "text/event-stream"}
TIME_TARGET = Target("<=", 1.10, on="ratio")
RATE_TARGET = Target(">=", 0.90, on="ratio")

Submit = Callable[[str, int], Awaitable[tuple[str, str]]]  # (text, delay) -> (run id, path)


@dataclass
class Streamed:
    """One client's view of one run, from before its POST."""

    tokens: int  # `token` (/v1) or `messages` (LangGraph) events
    post_s: float  # to the response head of the POST
    first_s: float  # to the first token
    done_s: float  # to the terminal event
    reconnects: int


class Clients:
    """The two APIs over one keep-alive httpx client each way, read with the same parser."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.http = api.http

    @staticmethod
    def _lg_body(text: str, delay_ms: int) -> dict[str, Any]:
        return {
            "assistant_id": "chat",
            "input": {"messages": [{"type": "human", "content": text}]},
            "stream_mode": MODES,
            "config": {"configurable": {"fake_token_delay_ms": delay_ms}},
            "if_not_exists": "create",
        }

    async def _read(
        self,
        response: httpx.Response,
        seen: Streamed,
        start: float,
        token: bytes,
        terminal: tuple[bytes, ...],
    ) -> tuple[bool, bytes | None]:
        """Read one SSE response to its end (so that its connection is kept alive for the next
        request); (it had a terminal event, last event id)."""
        parser = SseParser()
        last_id: bytes | None = None
        ended = False
        async for data in response.aiter_raw():
            events: list[SseEvent] = parser.feed(data)
            if not events:
                continue
            now = time.perf_counter()
            for event in events:
                if event.event == token:
                    seen.tokens += 1
                    if not seen.first_s:
                        seen.first_s = now - start
                elif event.event in terminal:
                    seen.done_s = now - start
                    ended = True
                if event.id:
                    last_id = event.id
        return ended, last_id

    async def v1(self, text: str, delay_ms: int = 0) -> Streamed:
        start = time.perf_counter()
        run = await self.api.submit(text, delay_ms=delay_ms)
        seen = Streamed(0, time.perf_counter() - start, 0.0, 0.0, 0)
        headers = dict(SSE_ACCEPT)
        while True:
            async with self.http.stream("GET", run["stream_url"], headers=headers) as response:
                if response.status_code != 200:
                    raise RuntimeError(f"/v1 attach answered {response.status_code}")
                ended, last_id = await self._read(response, seen, start, b"token", TERMINAL)
            if ended:
                return seen
            seen.reconnects += 1
            if last_id:
                headers["Last-Event-ID"] = last_id.decode()
            if seen.reconnects > 50:
                raise AssertionError("the /v1 viewer kept being cut off")

    async def langgraph(self, text: str, delay_ms: int = 0) -> Streamed:
        thread_id = str(uuid.uuid4())
        start = time.perf_counter()
        request = self.http.build_request(
            "POST",
            f"/threads/{thread_id}/runs/stream",
            json=self._lg_body(text, delay_ms),
            headers=SSE_ACCEPT,
        )
        response = await self.http.send(request, stream=True)
        seen = Streamed(0, time.perf_counter() - start, 0.0, 0.0, 0)
        join = response.headers.get("location")
        try:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"runs/stream answered {response.status_code}: {response.text}")
            ended, last_id = await self._read(
                response, seen, start, b"messages", LANGGRAPH_TERMINAL
            )
        except httpx.TransportError:  # the server aborts a stream it cuts short
            ended, last_id = False, None
        finally:
            await response.aclose()
        while not ended:  # rejoin where it was cut, as the SDKs do
            seen.reconnects += 1
            if seen.reconnects > 50 or not join:
                raise AssertionError("the LangGraph viewer kept being cut off")
            headers = {**SSE_ACCEPT, "Last-Event-ID": (last_id or b"-1").decode()}
            try:
                async with self.http.stream("GET", join, headers=headers) as response:
                    ended, last_id = await self._read(
                        response, seen, start, b"messages", LANGGRAPH_TERMINAL
                    )
            except httpx.TransportError:
                ended = False
        return seen

    async def submit_v1(self, text: str, delay_ms: int) -> tuple[str, str]:
        run = await self.api.submit(text, delay_ms=delay_ms)
        return run["run_id"], run["stream_url"]

    async def submit_langgraph(self, text: str, delay_ms: int) -> tuple[str, str]:
        """A background run (`POST /threads/{t}/runs`); its join stream's path."""
        thread_id = str(uuid.uuid4())
        response = await self.http.post(
            f"/threads/{thread_id}/runs", json=self._lg_body(text, delay_ms)
        )
        if response.status_code != 200:
            raise RuntimeError(f"POST runs answered {response.status_code}: {response.text[:300]}")
        run_id = response.json()["run_id"]
        return run_id, f"/threads/{thread_id}/runs/{run_id}/stream"


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _time_figures(
    ctx: BenchContext, names: dict[str, str], lg: dict[str, float], v1: dict[str, float]
) -> None:
    """A figure per statistic (`names`: statistic → figure name): LangGraph's time against the
    `/v1` time of the same run."""
    for stat, name in names.items():
        ctx.figure(
            NAME,
            name,
            lg[stat],
            "ms",
            baseline=v1[stat],
            baseline_label="/v1",
            targets=[TIME_TARGET],
            stats=lg,
        )


def _ms(values: list[float]) -> list[float]:
    return [v * 1000 for v in values]


async def first_token(ctx: BenchContext, clients: Clients) -> None:
    n = ctx.size(50, 15)
    firsts: dict[str, list[float]] = {"v1": [], "langgraph": []}
    posts: dict[str, list[float]] = {"v1": [], "langgraph": []}
    for i in range(WARMUP + n):
        order = ("v1", "langgraph") if i % 2 == 0 else ("langgraph", "v1")
        for api in order:
            seen = await (clients.v1 if api == "v1" else clients.langgraph)(TTFT_TEXT)
            if not (seen.first_s and seen.done_s):
                raise AssertionError(f"{api}: no token or no terminal event")
            if i >= WARMUP:
                firsts[api].append(seen.first_s)
                posts[api].append(seen.post_s)
    v1, lg = summary(_ms(firsts["v1"])), summary(_ms(firsts["langgraph"]))
    _time_figures(ctx, {stat: f"first token, {stat}" for stat in ("median", "p99")}, lg, v1)
    v1_post, lg_post = summary(_ms(posts["v1"])), summary(_ms(posts["langgraph"]))
    ctx.note(
        NAME,
        first_token={
            "runs": n,
            "warmup_runs": WARMUP,
            "v1_ms": v1,
            "langgraph_ms": lg,
            "v1_post_to_202_ms": v1_post,
            "langgraph_post_to_200_head_ms": lg_post,
        },
    )
    print(
        f"    POST → response head, median: /v1 {v1_post['median']:.1f} ms (202), "
        f"LangGraph {lg_post['median']:.1f} ms (200, stream opened)",
        flush=True,
    )


async def throughput(ctx: BenchContext, clients: Clients, server: Server, worker: Process) -> None:
    count = ctx.size(THROUGHPUT_WORDS, 5000)
    text = words(count)
    await clients.v1(words(100))  # warm-up
    await clients.langgraph(words(100))
    rates: dict[str, list[float]] = {"v1": [], "langgraph": []}
    live: dict[str, list[float]] = {"v1": [], "langgraph": []}
    cpu: dict[str, dict[str, float]] = {
        api: {"server_s": 0.0, "worker_s": 0.0, "client_s": 0.0} for api in ("v1", "langgraph")
    }
    reconnects = {"v1": 0, "langgraph": 0}
    for i in range(ctx.size(3, 1)):
        order = ("v1", "langgraph") if i % 2 == 0 else ("langgraph", "v1")
        for api in order:
            before = (server.process.cpu(), worker.cpu(), _own_cpu())
            seen = await (clients.v1 if api == "v1" else clients.langgraph)(text)
            cpu[api]["server_s"] += server.process.cpu() - before[0]
            cpu[api]["worker_s"] += worker.cpu() - before[1]
            cpu[api]["client_s"] += _own_cpu() - before[2]
            if seen.tokens != count:
                raise AssertionError(f"{api}: {seen.tokens} of {count} tokens")
            rates[api].append(seen.tokens / seen.done_s)
            live[api].append(seen.tokens / (seen.done_s - seen.first_s))
            reconnects[api] += seen.reconnects
    for api, spent in cpu.items():
        print(
            f"    {api:9} one run: {summary(rates[api])['median']:,.0f} events/s; CPU s over "
            f"the runs: server {spent['server_s']:.2f}, worker {spent['worker_s']:.2f}, "
            f"client {spent['client_s']:.2f}",
            flush=True,
        )
    v1, lg = summary(rates["v1"]), summary(rates["langgraph"])
    ctx.figure(
        NAME,
        "one run: events/s, submit → done",
        lg["median"],
        "/s",
        baseline=v1["median"],
        baseline_label="/v1",
        targets=[RATE_TARGET],
        stats=lg,
        notes=f"LangGraph `messages` events against /v1 `token` events, {count:,} of each",
    )
    ctx.note(
        NAME,
        throughput={
            "words": count,
            "v1_per_s": v1,
            "langgraph_per_s": lg,
            "v1_first_token_to_done_per_s": summary(live["v1"]),
            "langgraph_first_token_to_done_per_s": summary(live["langgraph"]),
            "reconnects": reconnects,
            "cpu_s": cpu,  # summed over the measured runs of each API
        },
    )


async def viewers_round(
    ctx: BenchContext,
    namespace: Namespace,
    server: Server,
    worker: Process,
    submit: Submit,
    *,
    langgraph: bool,
    tokens: int,
) -> FanoutRound:
    """fanout's gate and load generator for one run and VIEWERS viewers of one API."""
    from stream_store.keys import KeySpace

    worker.pause()
    try:
        run_id, path = await submit(words(tokens), FANOUT_DELAY_MS)
        load = ViewerLoad(
            [(server.url, path)] * VIEWERS,
            procs=ctx.client_procs,
            connect_concurrency=100,
            timeout_s=300,
            last_event_id=b"-1" if langgraph else None,
            terminal=LANGGRAPH_TERMINAL if langgraph else TERMINAL,
        )
        before_attach = server.process.cpu()
        load.start()
        try:
            _, failed = await load.attached()
            if failed:
                raise AssertionError(f"{failed} of {VIEWERS} viewers could not attach")
            await asyncio.sleep(SETTLE_S)
            server_cpu, worker_cpu = server.process.cpu(), worker.cpu()
            machine_busy = machine_cpu()[0]
        except BaseException:
            load.stop()
            raise
    finally:
        worker.resume()
    try:
        result = await load.results()
    finally:
        load.stop()
    attach_cpu = server_cpu - before_attach
    server_cpu = server.process.cpu() - server_cpu
    worker_cpu = worker.cpu() - worker_cpu
    machine_busy = machine_cpu()[0] - machine_busy
    redis = namespace.redis()
    try:
        entries = await redis.xrange(KeySpace(namespace.prefix).run_events(run_id))
    finally:
        await redis.aclose()
    if langgraph:  # `metadata`, a `messages` per token, `end`
        expected = 2 + sum(1 for _, fields in entries if fields[b"e"] == b"token")
    else:
        expected = len(entries)
    complete = sum(
        1 for v in result.viewers if v.terminal and v.out_of_order == 0 and v.events == expected
    )
    return FanoutRound(
        runs=1,
        viewers=VIEWERS,
        events_expected=expected * VIEWERS,
        complete=complete,
        result=result,
        server_cpu_s=server_cpu,
        attach_server_cpu_s=attach_cpu,
        worker_cpu_s=worker_cpu,
        machine_busy_s=machine_busy,
        latency=histogram_summary(result.latency_ms),
        delay_ms=FANOUT_DELAY_MS,
    )


async def viewers(
    ctx: BenchContext, namespace: Namespace, server: Server, worker: Process, clients: Clients
) -> None:
    tokens = ctx.size(1000, 300)
    rounds: dict[str, list[FanoutRound]] = {"v1": [], "langgraph": []}
    for i in range(ctx.size(3, 1)):
        order = ("v1", "langgraph") if i % 2 == 0 else ("langgraph", "v1")
        for api in order:
            lg = api == "langgraph"
            submit = clients.submit_langgraph if lg else clients.submit_v1
            fan = await viewers_round(
                ctx, namespace, server, worker, submit, langgraph=lg, tokens=tokens
            )
            if fan.complete != fan.viewers:
                raise AssertionError(
                    f"{api}: {fan.complete} of {fan.viewers} viewers got every event "
                    f"({fan.result.events} of {fan.events_expected}; errors {fan.result.errors})"
                )
            rounds[api].append(fan)
            r = fan.result
            print(
                f"    {api:9} round {i + 1}: {fan.rate:,.0f} events/s over {r.window_s:.2f} s, "
                f"p50 {fan.latency['p50']:.0f} ms, p99 {fan.latency['p99']:.0f} ms; "
                f"server {fan.server_cpu_s / r.window_s:.2f} cores, "
                f"clients {r.cpu_s / r.window_s:.2f}",
                flush=True,
            )

    def pooled(api: str) -> dict[str, float]:
        merged = rounds[api][0].result.latency_ms.copy()
        for fan in rounds[api][1:]:
            merged.update(fan.result.latency_ms)
        return histogram_summary(merged)

    def rate(api: str) -> dict[str, float]:
        return summary([fan.rate for fan in rounds[api]])

    def server_us(api: str) -> float:
        """Server CPU per delivered event (all viewers), over every round."""
        cpu = sum(fan.server_cpu_s for fan in rounds[api])
        return 1e6 * cpu / sum(fan.live_events for fan in rounds[api])

    v1_rate, lg_rate = rate("v1"), rate("langgraph")
    label = f"{VIEWERS} viewers"
    ctx.figure(
        NAME,
        f"{label}: events/s delivered",
        lg_rate["median"],
        "/s",
        baseline=v1_rate["median"],
        baseline_label="/v1",
        targets=[RATE_TARGET],
        stats=lg_rate,
        notes=f"offered {VIEWERS * 1000 // FANOUT_DELAY_MS:,}/s to each API",
    )
    v1_lat, lg_lat = pooled("v1"), pooled("langgraph")
    names = {stat: f"{label}: XADD→receipt {stat}" for stat in ("p50", "p99")}
    _time_figures(ctx, names, lg_lat, v1_lat)
    ctx.figure(
        NAME,
        f"{label}: server CPU per event",
        server_us("langgraph"),
        "µs",
        baseline=server_us("v1"),
        baseline_label="/v1",
        notes="server process CPU over the rounds / events delivered to all viewers",
    )
    ctx.note(
        NAME,
        viewers={
            "viewers": VIEWERS,
            "tokens": tokens,
            "delay_ms": FANOUT_DELAY_MS,
            "v1_rounds": [fan.details() for fan in rounds["v1"]],
            "langgraph_rounds": [fan.details() for fan in rounds["langgraph"]],
            "v1_latency_ms": v1_lat,
            "langgraph_latency_ms": lg_lat,
        },
    )


async def run(ctx: BenchContext) -> None:
    async with ctx.cluster(NAME) as (namespace, cluster):
        server = await cluster.server()
        worker = await cluster.ready_worker()
        async with Api(server.url) as api:
            clients = Clients(api)
            started = time.monotonic()
            await first_token(ctx, clients)
            await throughput(ctx, clients, server, worker)
            await viewers(ctx, namespace, server, worker, clients)
            ctx.note(NAME, measured_s=time.monotonic() - started)
