"""`idle_sse`: N idle SSE connections to one server process, and what they cost in memory.

The server runs without a worker, so its runs stay `queued` and their streams stay open. The
viewers attach in client processes (file limit raised to the hard limit), read the first event
and then wait. Server RSS (/proc/PID/status VmRSS) is read after the runs were submitted and
again with every connection open; and once more after they closed.
"""

from __future__ import annotations

import asyncio

from bench.api import Api
from bench.context import BenchContext
from bench.load import ViewerLoad
from bench.report import Target

NAME = "idle_sse"
NEEDS: tuple[str, ...] = ()
MB = 1024 * 1024


async def run(ctx: BenchContext) -> None:
    connections = ctx.size(10_000, 1_000)
    runs = ctx.size(100, 10)
    async with ctx.cluster(NAME) as (_, cluster):
        server = await cluster.server()
        async with Api(server.url) as api:
            submitted = [await api.submit("idle", delay_ms=0) for _ in range(runs)]
        targets = [(server.url, submitted[i % runs]["stream_url"]) for i in range(connections)]
        await asyncio.sleep(1)
        before = server.process.rss()
        load = ViewerLoad(
            targets, procs=ctx.client_procs, mode="hold", connect_concurrency=200, timeout_s=300
        )
        load.start()
        try:
            attached, failed = await load.attached()
            await asyncio.sleep(2)
            during = server.process.rss()
            fds = _open_fds(server.process.pid)
        finally:
            load.release()
            result = await load.results()
            load.stop()
        await asyncio.sleep(2)
        after = server.process.rss()
    ctx.figure(
        NAME,
        f"connections open ({connections:,} asked)",
        attached,
        "",
        targets=[Target(">=", connections)],
        notes=f"{failed} failed",
    )
    ctx.figure(
        NAME,
        f"server RSS with {attached:,} idle streams",
        during / MB,
        "MB",
        baseline=before / MB,
        baseline_label="MB before",
        targets=[Target("<=", 1024)],
    )
    per_connection_kb = (during - before) / max(1, attached) / 1024
    ctx.figure(NAME, "server RSS per idle stream", per_connection_kb, "KB")
    ctx.note(
        NAME,
        runs=runs,
        rss_before_mb=before / MB,
        rss_during_mb=during / MB,
        rss_after_close_mb=after / MB,
        server_open_fds=fds,
        projected_rss_at_10k_mb=(before + per_connection_kb * 1024 * 10_000) / MB,
        attach_s=result.attach_s,
        attaches_per_s=attached / result.attach_s if result.attach_s else None,
    )


def _open_fds(pid: int) -> int | None:
    import os

    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
