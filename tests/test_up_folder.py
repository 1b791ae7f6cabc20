"""`runstream up`'s data folder: one `up` at a time on it, and the signing key it keeps there
for a project with `auth.path` (issue 32)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.processes import ROOT
from tests.test_up import launch_up, start_up, stop_up, up_env

AUTH_PROJECT = ROOT / "tests" / "projects" / "auth" / "langgraph.json"


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
        second = launch_up(data_dir, free_port(), ("--processes", "1"), None)
        output, _ = second.communicate(timeout=60)
        lines = output.decode().strip().splitlines()
        assert second.returncode == 2, output
        assert len(lines) == 1, output  # refused before starting anything (no log lines)
        assert f"pid {first.pid}, http://127.0.0.1:{port}" in lines[0], lines
        assert lines[0].startswith("runstream: another `runstream up`"), lines
        assert first.poll() is None  # the first keeps running, its services untouched
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.get("/readyz")).status_code == 200
        assert "up.lock" in os.listdir(data_dir) and (data_dir / "up.json").exists()
    finally:
        stop_up(first)


@pytest.mark.slow
async def test_up_makes_and_keeps_a_signing_key_for_a_project_with_auth(base: Path) -> None:
    data_dir, port = base / "rs", free_port()
    args = ("--processes", "1", "--config", str(AUTH_PROJECT))
    keys = []
    for _ in range(2):
        process = await start_up(data_dir, port, *args, log=base / "up.log")
        try:
            headers = {"Authorization": "Bearer token-alice"}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                answer = await http.post("/threads", json={}, headers=headers)
                assert answer.status_code == 200, answer.text
        finally:
            stop_up(process)
        key = data_dir / "signing_key"
        found = key.lstat()
        assert stat.S_IMODE(found.st_mode) == 0o600 and found.st_uid == os.getuid()
        keys.append(key.read_text())
    assert keys[0] == keys[1] and len(keys[0].strip()) == 64  # made once, kept


def test_serve_still_requires_a_signing_key_for_a_project_with_auth(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server.processes.cli", "serve", "--config", str(AUTH_PROJECT)],
        cwd=ROOT,
        env=up_env(tmp_path / "rs"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert (
        "runstream: the project's auth (auth.path) is set but RUNSTREAM_SIGNING_KEY is not"
        in done.stderr
    )
    assert not (tmp_path / "rs").exists()  # serve keeps nothing of its own
