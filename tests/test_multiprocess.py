"""`runstream serve --processes N` and `runstream worker --processes N`: N server processes
answer on one port, N worker processes take runs from one queue, and stopping the parent
stops every child."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.launcher import Process, child_env, listening_socket
from tests.processes import Cluster
from tests.sse import read_events

pytestmark = pytest.mark.slow  # starts the whole product: ./scripts/test runs it


PROCESS_TAG = re.compile(r"process=(\d+)")


def processes_that_logged(process: Process, event: str) -> set[int]:
    """The child indexes (`process=i` on each line) that logged `event`."""
    return {
        int(found.group(1))
        for line in process.output().splitlines()
        if event in line and (found := PROCESS_TAG.search(line))
    }


def child_pids(process: Process, kind: str) -> list[int]:
    line = next(ln for ln in process.output().splitlines() if f"{kind} processes started" in ln)
    found = re.search(r"pids=\[([\d, ]+)\]", line)
    assert found, line
    return [int(pid) for pid in found.group(1).split(",")]


async def wait_for(predicate: object, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_two_servers_on_one_port_and_two_workers_run_and_stop_together(
    cluster: Cluster,
) -> None:
    env = child_env(cluster.config(), RUNSTREAM_FAKE_TOKEN_DELAY_MS="25")
    exe = [sys.executable, "-m", "server.processes.cli"]
    # on a socket bound here and handed down (`serve --fd`), as a supervisor would
    with listening_socket() as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        serve = [*exe, "serve", "--fd", str(sock.fileno()), "--processes", "2"]
        servers = Process("servers", serve, env, pass_fds=(sock.fileno(),))
    # One run at a time per worker process: runs submitted together must use both.
    workers = Process("workers", [*exe, "worker", "--processes", "2", "--concurrency", "1"], env)
    cluster.processes += [servers, workers]

    async def ready() -> None:
        async with httpx.AsyncClient(base_url=url) as http:
            while True:
                assert servers.alive(), servers.tail()
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)

    await asyncio.wait_for(ready(), 90)
    await wait_for(lambda: workers.output().count("worker ready") == 2, "two workers ready", 90)

    body = {"input": {"messages": [{"role": "user", "content": " ".join(["w"] * 30)}]}}

    async def submit() -> dict[str, object]:
        async with httpx.AsyncClient(base_url=url) as http:  # a connection of its own
            response = await http.post("/v1/runs", json=body)
        assert response.status_code == 202, response.text
        return response.json()

    runs = [await submit() for _ in range(4)]
    took = processes_that_logged(servers, "run submitted")
    if len(took) == 1:
        # Both children wait on the one socket and the first awake takes a connection (with
        # every connection pending): on an idle machine that can be the same child every time.
        # Paused, it leaves the next ones to the other.
        first = child_pids(servers, "server")[took.pop()]
        os.kill(first, signal.SIGSTOP)
        try:
            runs += [await submit() for _ in range(2)]
        finally:
            os.kill(first, signal.SIGCONT)
    assert processes_that_logged(servers, "run submitted") == {0, 1}

    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for run in runs:  # every stream complete, read through either server
            events = await read_events(http, f"/v1/runs/{run['run_id']}/events")
            assert events[-1].event == "done"
    assert processes_that_logged(workers, "run started") == {0, 1}

    children = child_pids(servers, "server") + child_pids(workers, "worker")
    assert len(children) == 4
    servers.signal(signal.SIGTERM)
    workers.signal(signal.SIGTERM)
    assert await asyncio.to_thread(servers.proc.wait, 40) == 0
    assert await asyncio.to_thread(workers.proc.wait, 40) == 0
    await wait_for(
        lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), "children gone", 10
    )
