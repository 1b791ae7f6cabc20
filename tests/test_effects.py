"""`runner.effects.once` in a user graph: its effect runs once across a worker SIGKILL
(tests/projects/runtime `sends_once`), as the built-in `save_note` does (TestWriteToolOnce)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from runner.effects import NotInARun, once
from stream_store.settings import Settings
from tests.processes import Cluster
from tests.test_faults import WatchedRun, body, wait_for
from tests.test_graph_runtime import PROJECT


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """A short lease, so the killed worker's run is handed over at once."""
    return replace(settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0)


async def test_once_outside_a_run_is_refused() -> None:
    async def effect() -> None:
        raise AssertionError("must not run")

    with pytest.raises(NotInARun):
        await once("k", effect)


@pytest.mark.slow
async def test_a_user_effect_runs_once_across_a_worker_kill(
    cluster: Cluster, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.txt"
    env = {**PROJECT, "RUNTIME_EFFECTS_FILE": str(sent)}
    _, url = await cluster.server(**PROJECT)
    first = await cluster.ready_worker(**env)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        watched = await WatchedRun.submit(http, url, body("send", graph="sends_once"))
        events = watched.events
        await wait_for(lambda: any(e.event == "custom" for e in events), what="the send")
        first.kill()
        await cluster.ready_worker(**env, RUNSTREAM_TEST_LINGER_S="0")
        await watched.end()
    results = [e.data for e in events if e.event == "custom"]
    assert results == [{"result": {"sent": 1}}, {"result": {"sent": 1}}]  # the second replayed
    assert events[-1].event == "done", events[-1]
    assert sent.read_text() == "sent\n"
