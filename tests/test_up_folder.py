"""`runstream up`'s data folder: one `up` at a time on it (issue 32)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.test_up import launch_up, start_up, stop_up


@pytest.fixture
def base() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="rs-up-"))
    os.chmod(base, 0o755)  # as root, Postgres runs as `nobody`, who must reach the folder
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
async def test_a_second_up_on_the_same_folder_is_refused_in_one_line(base: Path) -> None:
    data_dir, port = base / "rs", free_port()
    first = await start_up(data_dir, port, "--processes", "1", log=base / "first.log")
    try:
        started = time.monotonic()
        second = launch_up(data_dir, free_port(), ("--processes", "1"), None)
        output, _ = second.communicate(timeout=60)
        took_s = time.monotonic() - started
        lines = output.decode().strip().splitlines()
        assert second.returncode == 2, output
        assert len(lines) == 1, output
        assert f"pid {first.pid}, http://127.0.0.1:{port}" in lines[0], lines
        assert lines[0].startswith("runstream: another `runstream up`"), lines
        assert took_s < 15  # before starting anything (the interpreter's start aside)
        assert first.poll() is None  # the first keeps running, its services untouched
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/readyz")).status_code == 200
        assert "up.lock" in os.listdir(data_dir) and (data_dir / "up.json").exists()
    finally:
        stop_up(first)
