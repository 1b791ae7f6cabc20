"""`/metrics` of servers and workers, and the dashboard and alert rules shipped in `deploy/`
(issue 13): every metric they use exists, and the figures move when a run happens."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bench.launcher import free_port
from server.processes.commands import worker as run_worker
from server.streaming.fanout import StreamFollower
from stream_store.deployment_metrics import DeploymentGauges
from stream_store.metrics import FanoutMetrics, GraphLabels
from stream_store.services import open_services
from stream_store.settings import Settings, SettingsError
from tests.conftest import StartServer, StartWorker
from tests.sse import read_events

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
# A metric name in a PromQL expression: runstream's own, and the Litestar plugin's HTTP ones.
METRIC_NAME = re.compile(r"\b(?:runstream|litestar)_[a-zA-Z0-9_]+\b")
TEXT = "one two three four five six seven eight nine ten"


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def dashboard_expressions() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    return [target["expr"] for panel in _panels(dashboard) for target in panel.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load((DEPLOY / "prometheus-alerts.yaml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def samples(exposition: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(exposition) for s in family.samples]


def value(exposition: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    found = [
        s.value
        for s in samples(exposition)
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert found, f"{name}{labels} not exposed"
    return sum(found)


async def scrape(url: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


class TestShippedDashboardAndAlerts:
    """deploy/ holds an importable Grafana dashboard and Prometheus rules, on metrics that exist."""

    def test_dashboard_is_importable_with_a_panel_per_metric_group(self) -> None:
        dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
        assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"]
        assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
        rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
        assert rows == [
            "Runs",
            "Queue and workers",
            "Latency",
            "Streams",
            "Postgres pools",
            "Webhooks",
        ]
        ids = [p["id"] for p in _panels(dashboard)]
        assert len(ids) == len(set(ids))
        for panel in _panels(dashboard):
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
                assert panel["targets"] and all(t["expr"] for t in panel["targets"])

    def test_every_alert_rule_is_complete(self) -> None:
        rules = alert_rules()
        assert len(rules) >= 7
        for rule in rules:
            assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
            assert rule["labels"]["severity"] in ("info", "warning", "critical")
            assert rule["annotations"]["summary"]

    async def test_every_metric_they_use_is_exposed_by_a_live_server_or_worker(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        port = free_port()
        await start_worker(worker_metrics_port=port)
        server = await start_server()
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            await client.get("/v1/threads")  # so the plugin's HTTP metrics have a sample
        exposed = {
            s.name
            for url in (f"{server.url}/metrics", f"http://127.0.0.1:{port}/metrics")
            for s in samples(await scrape(url))
        }
        expressions = dashboard_expressions() + [rule["expr"] for rule in alert_rules()]
        used = {name for expr in expressions for name in METRIC_NAME.findall(expr)}
        assert len(used) >= 25
        assert sorted(used - exposed) == []


class TestFiguresMove:
    """One run moves the gauges, counters and histograms an operator watches."""

    async def test_one_run_moves_runs_queue_latency_and_attempts(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        server = await start_server()
        metrics = f"{server.url}/metrics"
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = {"input": {"messages": [{"role": "user", "content": TEXT}]}}
            submitted = await client.post("/v1/runs", json=body)
            assert submitted.status_code == 202, submitted.text
            run_id = submitted.json()["run_id"]
            before = await scrape(metrics)  # no worker yet: the run waits in the queue
            assert value(before, "runstream_runs", graph="chat", status="queued") == 1
            assert value(before, "runstream_queue_waiting") == 1
            assert value(before, "runstream_queue_oldest_waiting_seconds") >= 0
            assert value(before, "runstream_workers_alive") == 0

            # A viewer attached before the run starts gets every token live.
            viewer = asyncio.create_task(read_events(client, f"/v1/runs/{run_id}/events"))
            await until(metrics, lambda text: value(text, "runstream_sse_connections") == 1)
            port = free_port()
            await start_worker(worker_metrics_port=port, fake_token_delay_ms=5)
            events = await asyncio.wait_for(viewer, 30)
            assert events[-1].event == "done" and events[-1].data["status"] == "succeeded"

        worker = await scrape(f"http://127.0.0.1:{port}/metrics")
        assert value(worker, "runstream_run_outcomes_total", graph="chat", status="succeeded") == 1
        assert value(worker, "runstream_run_outcomes_total", status="failed") == 0
        assert value(worker, "runstream_attempts_total", graph="chat") == 1
        assert value(worker, "runstream_retries_total") == 0
        assert value(worker, "runstream_first_token_seconds_count", graph="chat") == 1
        assert value(worker, "runstream_stream_bytes_appended_total") > len(TEXT)
        assert value(worker, "runstream_worker_active_runs") == 0
        assert value(worker, "runstream_worker_concurrency") == 100
        assert value(worker, "runstream_pg_pool_connections") >= 1

        after = await until(
            metrics, lambda text: value(text, "runstream_runs", graph="chat", status="queued") == 0
        )
        assert value(after, "runstream_runs", status="running") == 0
        assert value(after, "runstream_queue_waiting") == 0
        assert value(after, "runstream_workers_alive") == 1
        assert value(after, "runstream_event_delivery_seconds_count") >= 1
        assert value(after, "runstream_sse_connections") == 0
        assert value(after, "runstream_viewers_cut_off_total") == 0
        assert value(after, "runstream_storage_read_success") == 1
        assert value(after, "runstream_pg_pool_connections_max") == 10


async def until(url: str, check: Any, timeout_s: float = 10) -> str:
    """Scrape `url` until `check(text)` holds (the deployment gauges are cached for 1 s)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        text = await scrape(url)
        try:
            if check(text):
                return text
        except AssertionError:
            pass
        assert asyncio.get_running_loop().time() < deadline, text
        await asyncio.sleep(0.1)


class TestStorageReads:
    async def test_a_failed_storage_read_leaves_the_gauges_out_rather_than_stale(
        self, settings: Settings
    ) -> None:
        async with open_services(settings) as services:
            gauges = DeploymentGauges(
                services.pool, services.redis, services.keys, GraphLabels(["chat"]), max_age_s=0
            )
            registry = CollectorRegistry()
            registry.register(gauges)
            await gauges.refresh()
            assert registry.get_sample_value("runstream_storage_read_success") == 1
            queued = {"graph": "chat", "status": "queued"}
            assert registry.get_sample_value("runstream_runs", queued) == 0
            assert registry.get_sample_value("runstream_runs", {**queued, "graph": "other"}) == 0
            await services.pool.close()  # Postgres unreachable, as far as the server can tell
            await gauges.refresh()
            assert registry.get_sample_value("runstream_storage_read_success") == 0
            assert registry.get_sample_value("runstream_runs", queued) is None
            assert registry.get_sample_value("runstream_queue_waiting") is None


class TestViewersCutOff:
    async def test_a_viewer_cut_off_for_not_reading_is_counted(self, settings: Settings) -> None:
        registry = CollectorRegistry()
        metrics = FanoutMetrics(registry)
        async with open_services(settings) as services:
            follower = StreamFollower(
                services.clients.node_url,
                services.events,
                queue_size=16,
                cut_off_s=0.2,
                metrics=metrics,
            )
            await follower.start()
            try:

                async def stuck_client() -> None:
                    viewer = await follower.subscribe(str(uuid.uuid4()))
                    viewer.write_started()
                    await asyncio.sleep(30)  # a write the client never takes

                task = asyncio.create_task(stuck_client())
                await asyncio.wait([task], timeout=5)
                assert task.cancelled()
            finally:
                await follower.stop()
        assert registry.get_sample_value("runstream_viewers_cut_off_total") == 1


class TestWorkerMetricsPort:
    def test_the_port_setting_is_read_and_negative_ports_are_refused(self) -> None:
        read = Settings.from_env({"RUNSTREAM_WORKER_METRICS_PORT": "9101"}, env_file="")
        assert read.worker_metrics_port == 9101
        assert Settings.from_env({}, env_file="").worker_metrics_port == 0
        with pytest.raises(SettingsError, match="RUNSTREAM_WORKER_METRICS_PORT"):
            Settings.from_env({"RUNSTREAM_WORKER_METRICS_PORT": "-1"}, env_file="")

    def test_a_metrics_port_out_of_range_is_refused(self, settings: Settings) -> None:
        with pytest.raises(SettingsError, match="metrics port must be 0 to 65535"):
            run_worker(settings, None, 70000)
