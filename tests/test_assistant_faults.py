"""A worker SIGKILLed during the assistant's extraction, after its facts were written and
before the step's checkpoint: the next attempt runs the extraction again and writes each fact
once (`runner.effects.once` and the store's stamp), the answer is in the thread once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import httpx
import psycopg
import pytest

from stream_store.settings import Settings
from tests.processes import ROOT, Cluster
from tests.test_faults import WatchedRun, body, wait_for

PROJECT = {
    "RUNSTREAM_CONFIG": str(ROOT / "tests" / "projects" / "assistant_fault" / "langgraph.json")
}

pytestmark = pytest.mark.fault


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """A short lease, so the killed worker's run is handed over at once."""
    return replace(settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0)


async def test_a_worker_killed_mid_extraction_writes_each_fact_once(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    _, url = await cluster.server(**PROJECT)
    first = await cluster.ready_worker(**PROJECT)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        request = body("My name is Ann and I live in Paris.", graph="assistant")
        watched = await WatchedRun.submit(http, url, request)
        events = watched.events

        def remembered() -> list[dict[str, str]]:
            return [
                e.data["memory"]
                for e in events
                if e.event == "custom" and e.data.get("memory", {}).get("event") == "remembered"
            ]

        await wait_for(lambda: len(remembered()) == 2, what="the facts written")
        killed_at = datetime.now(UTC)
        first.kill()
        await cluster.ready_worker(**PROJECT, RUNSTREAM_TEST_LINGER_S="0")
        await watched.end()
        thread = (await http.get(f"/v1/threads/{watched.run['thread_id']}")).json()

    assert events[-1].event == "done", events[-1]
    assert "retry" in [e.event for e in events]
    # the retry extracted again and found both facts written: it wrote neither again
    seen = remembered()
    assert [e["key"] for e in seen] == ["name", "location"]
    unchanged = [
        e.data["memory"]["key"]
        for e in events
        if e.event == "custom" and e.data.get("memory", {}).get("event") == "unchanged"
    ]
    assert unchanged == ["name", "location"]
    stamps = {e["key"]: e["written_at"] for e in seen}
    schema = cluster_settings.database_schema
    async with await psycopg.AsyncConnection.connect(str(cluster_settings.database_url)) as conn:
        rows = await (
            await conn.execute(f'SELECT key, value, updated_at FROM "{schema}".store ORDER BY key')
        ).fetchall()
        ledger = await (
            await conn.execute(
                f'SELECT tool_call_id FROM "{schema}".runstream_tool_executions'
                " WHERE run_id = %s ORDER BY 1",
                (watched.run["run_id"],),
            )
        ).fetchall()
    assert ledger == [("fact:location",), ("fact:name",)]
    assert [(key, value["value"], value["written_at"]) for key, value, _ in rows] == [
        ("location", "Paris", stamps["location"]),
        ("name", "Ann", stamps["name"]),
    ]
    assert all(updated_at < killed_at for _, _, updated_at in rows)  # not written again
    answers = [m for m in thread["messages"] if m["role"] == "assistant"]
    assert len(answers) == 1
