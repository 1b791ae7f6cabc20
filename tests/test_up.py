"""`runstream up` with nothing configured: private Valkey and Postgres, kept between starts;
`runstream status` beside it; its children restarted when they die (the `fault` tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.launcher import listening_socket
from tests.conftest import free_port
from tests.processes import ROOT
from tests.sse import read_events

Popen = subprocess.Popen[bytes]


def up_env(data_dir: Path) -> dict[str, str]:
    """No service URLs: `up` starts its own under `data_dir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    env.update(RUNSTREAM_DATA_DIR=str(data_dir), RUNSTREAM_FAKE_TOKEN_DELAY_MS="0")
    return env


def launch_up(data_dir: Path, port: int, args: tuple[str, ...], log: Path | None) -> Popen:
    """`runstream up` on `port`, bound here and handed down (`--fd`, which `up` holds for its
    life), its output piped, or appended to `log` (a pipe nobody reads while the test runs
    fills up and blocks it)."""
    with (
        listening_socket(port) as sock,
        open(log, "ab") if log is not None else contextlib.nullcontext() as output,
    ):
        fd = str(sock.fileno())
        return subprocess.Popen(
            [sys.executable, "-m", "server.processes.cli", "up", "--fd", fd, *args],
            cwd=ROOT,
            env=up_env(data_dir),
            stdout=output if output is not None else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(sock.fileno(),),
        )


async def start_up(data_dir: Path, port: int, *args: str, log: Path | None = None) -> Popen:
    process = launch_up(data_dir, port, args, log)
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if (await http.get("/readyz")).status_code == 200:
                    return process
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


def stop_up(process: Popen) -> str:
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    return (output or b"").decode(errors="replace")


def children_using(data_dir: Path) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if str(data_dir) in line]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_CHILDREN = {
    "serve": "server.processes.cli serve ",
    "worker": "server.processes.cli worker ",
    "valkey": "valkey-server ",
    "postgres": "bin/postgres -D ",
}


def children_of(up_pid: int) -> dict[str, int]:
    """The pids of `up`'s children: `serve`, `worker`, `valkey`, `postgres`."""
    listing = subprocess.run(
        ["ps", "-ww", "-o", "pid=,args=", "--ppid", str(up_pid)], capture_output=True, text=True
    ).stdout
    children = {}
    for line in listing.splitlines():
        pid, args = line.split(maxsplit=1)
        children.update({name: int(pid) for name, part in _CHILDREN.items() if part in args})
    return children


async def replaced(up_pid: int, child: str, old_pid: int) -> int:
    """The pid of the `child` that `up` started in place of `old_pid`."""
    deadline = time.monotonic() + 60
    while (pid := children_of(up_pid).get(child, old_pid)) == old_pid:
        assert time.monotonic() < deadline, f"no new {child} after {old_pid} was killed"
        await asyncio.sleep(0.1)
    return pid


def status_beside(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """`runstream status --json` with no service URLs, on up's data folder."""
    return subprocess.run(
        [sys.executable, "-m", "server.processes.cli", "status", "--json"],
        cwd=ROOT,
        env=up_env(data_dir),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def status_with_a_worker(data_dir: Path, pid: int | None = None) -> dict[str, Any]:
    """The status report, once the worker (`pid`, alone, when given) has a live heartbeat.

    A SIGKILLed worker's beat stays live until its expiry, so the report may name it for a
    few seconds after its replacement has already run something.
    """
    deadline = time.monotonic() + 30
    while True:
        result = status_beside(data_dir)
        assert result.returncode == 0, result.stdout + result.stderr
        report: dict[str, Any] = json.loads(result.stdout)
        pids = [beat["pid"] for beat in report["workers"] or []]
        if pids if pid is None else pids == [pid]:
            return report
        assert time.monotonic() < deadline, report
        await asyncio.sleep(0.5)


async def run_to_the_end(http: httpx.AsyncClient, content: str) -> dict[str, Any]:
    """Submit a run and follow it to its end (which waits for a worker that is starting)."""
    body = {"input": {"messages": [{"role": "user", "content": content}]}}
    run: dict[str, Any] = (await http.post("/v1/runs", json=body)).json()
    async with asyncio.timeout(60):
        events = await read_events(http, f"/v1/runs/{run['run_id']}/events")
    assert events[-1].data["status"] == "succeeded"
    return run


@pytest.mark.slow
class TestUp:
    """One command runs everything; Ctrl-C stops it all; the next start has the threads."""

    async def test_embedded_services_start_stop_and_keep_threads(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="rs-up-"))
        os.chmod(base, 0o755)  # as root, Postgres runs as `nobody`, who must reach the folder
        try:
            await self.check_up(base / "rs")
        finally:
            shutil.rmtree(base, ignore_errors=True)

    async def check_up(self, data_dir: Path) -> None:
        port = free_port()
        started = time.monotonic()
        process = await start_up(data_dir, port)
        cold_start_s = time.monotonic() - started
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                run = await run_to_the_end(http, "kept for later")
            report = await status_with_a_worker(data_dir)  # beside up: finds its services
            assert report["healthy"] and report["redis"]["url"].startswith("redis://127.0.0.1:")
            assert report["postgres"]["url"].startswith("postgresql://127.0.0.1:")
        finally:
            output = stop_up(process)
        assert "runstream is up" in output and "FAKE model" in output
        assert children_using(data_dir) == []  # valkey and postgres stopped with it
        gone = status_beside(data_dir)  # up removed its record: nothing to find
        assert gone.returncode == 2 and "set RUNSTREAM_REDIS_URL" in gone.stderr
        process = await start_up(data_dir, port)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                threads = (await http.get("/v1/threads")).json()["threads"]
                assert [t["title"] for t in threads] == ["kept for later"]
                thread = (await http.get(f"/v1/threads/{run['thread_id']}")).json()
                assert [m["content"] for m in thread["messages"]] == ["kept for later"] * 2
        finally:
            stop_up(process)
        print(f"\ncold `runstream up` to ready: {cold_start_s:.1f} s")


@pytest.mark.fault
class TestUpSupervises:
    """A child of `up` that dies is started again; only a signal to `up` stops them all."""

    async def test_killed_worker_and_server_come_back_and_sigterm_stops_all(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="rs-up-"))
        os.chmod(base, 0o755)  # as root, Postgres runs as `nobody`, who must reach the folder
        data_dir, port = base / "rs", free_port()
        process = await start_up(data_dir, port, "--processes", "1", log=base / "up.log")
        try:
            await self.check_supervision(process, port, data_dir)
        except BaseException:
            print((base / "up.log").read_text(errors="replace")[-12000:])
            raise
        finally:
            if process.poll() is None:
                stop_up(process)
            log = (base / "up.log").read_text(errors="replace")
            shutil.rmtree(base, ignore_errors=True)
        worker_restart = [line for line in log.splitlines() if "child=worker" in line]
        assert any("restarting" in line and "SIGKILL" in line for line in worker_restart), log

    async def check_supervision(self, process: Popen, port: int, data_dir: Path) -> None:
        first = children_of(process.pid)
        os.kill(first["worker"], signal.SIGKILL)
        worker = await replaced(process.pid, "worker", first["worker"])
        # reads wait while the new worker starts: no event for a while
        timeout = httpx.Timeout(5, read=60)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as http:
            run = await run_to_the_end(http, "after the worker died")
            beats = (await status_with_a_worker(data_dir, worker))["workers"]
            assert [beat["pid"] for beat in beats] == [worker]

            os.kill(first["serve"], signal.SIGKILL)
            server = await replaced(process.pid, "serve", first["serve"])
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the restarted server never got ready"
                await asyncio.sleep(0.1)
            answer = (await http.get(f"/v1/runs/{run['run_id']}")).json()
            assert answer["status"] == "succeeded"

            os.kill(first["postgres"], signal.SIGKILL)  # an embedded service comes back too
            await replaced(process.pid, "postgres", first["postgres"])
            await run_to_the_end(http, "after postgres died")  # on the same port and data
        assert process.poll() is None  # up itself kept running through all three

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0
        for pid in (server, worker):  # stopped and reaped by up
            assert not alive(pid)
        assert children_using(data_dir) == []  # valkey and postgres too
        assert not (data_dir / "up.json").exists()

    async def test_a_killed_up_takes_its_children_with_it(self) -> None:
        base = Path(tempfile.mkdtemp(prefix="rs-up-"))
        os.chmod(base, 0o755)
        data_dir, port = base / "rs", free_port()
        process = await start_up(data_dir, port, "--processes", "1", log=base / "up.log")
        try:
            children = children_of(process.pid)
            assert children_using(data_dir)  # its valkey and postgres
            process.kill()
            process.wait(10)
            deadline = time.monotonic() + 60
            while children_using(data_dir) or any(map(alive, children.values())):
                assert time.monotonic() < deadline, children_using(data_dir)
                await asyncio.sleep(0.2)
            assert (data_dir / "up.json").exists()  # nobody removed it: a dead up's record
            gone = status_beside(data_dir)
            assert gone.returncode == 2 and "set RUNSTREAM_REDIS_URL" in gone.stderr
        finally:
            if process.poll() is None:
                process.kill()
            shutil.rmtree(base, ignore_errors=True)
