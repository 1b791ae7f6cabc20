"""`runstream up` with nothing configured: private Valkey and Postgres, kept between starts."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.conftest import free_port
from tests.processes import ROOT
from tests.sse import read_events


async def start_up(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    env.update(RUNSTREAM_DATA_DIR=str(data_dir), RUNSTREAM_FAKE_TOKEN_DELAY_MS="0")
    process = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "server.cli", "up", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
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


def stop_up(process: subprocess.Popen[bytes]) -> str:
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    return output.decode(errors="replace")


def children_using(data_dir: Path) -> list[str]:
    listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if str(data_dir) in line]


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
                body = {"input": {"messages": [{"role": "user", "content": "kept for later"}]}}
                run = (await http.post("/v1/runs", json=body)).json()
                events = await read_events(http, f"/v1/runs/{run['run_id']}/events")
                assert events[-1].data["status"] == "succeeded"
        finally:
            output = stop_up(process)
        assert "runstream is up" in output and "FAKE model" in output
        assert children_using(data_dir) == []  # valkey and postgres stopped with it
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
