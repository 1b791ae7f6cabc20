"""The wire details of docs/protocol.md 3.1 Submitting a run and 4 Events (SSE): headers,
pings, custom events, graph registry."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx
import structlog

from runner.job_loop import JobLoop
from server.processes.logs import configure_logging
from tests.conftest import StartServer, StartWorker
from tests.sse import read_events
from tests.test_runs import run_body


class TestSseResponse:
    """The SSE response carries the caching headers and pings while nothing happens."""

    async def test_headers_and_pings(self, start_server: StartServer, worker: JobLoop) -> None:
        server = await start_server(ping_interval_s=0.05)
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = run_body("please wait", graph="approval")
            run = (await http.post("/v1/runs", json=body)).json()
            lines: list[str] = []
            async with http.stream("GET", f"/v1/runs/{run['run_id']}/events") as response:
                assert response.headers["cache-control"] == "no-store"
                assert response.headers["x-accel-buffering"] == "no"

                async def collect() -> None:
                    """Until three pings came after `pending` (the run waits there for ever)."""
                    async for line in response.aiter_lines():
                        lines.append(line)
                        if "event: pending" in lines:
                            after = lines[lines.index("event: pending") :]
                            if after.count(": ping") >= 3:
                                return

                # However slow the worker is to reach the interrupt on a busy machine.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(collect(), 20)
        assert "event: pending" in lines
        after_pending = lines[lines.index("event: pending") :]
        assert after_pending.count(": ping") >= 3


class TestGraphRegistry:
    """RUNSTREAM_GRAPHS adds graphs by `module:attr`: builders and compiled graphs alike."""

    async def test_registered_graphs_stream_custom_events(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        graphs = {"words": "tests.custom_graphs:builder", "words2": "tests.custom_graphs:compiled"}
        server = await start_server(graphs=graphs)
        await start_worker(graphs=graphs)
        async with httpx.AsyncClient(base_url=server.url) as http:
            for name in graphs:
                run = (await http.post("/v1/runs", json=run_body("a b c", graph=name))).json()
                events = await read_events(http, f"/v1/runs/{run['run_id']}/events")
                custom = [e.data for e in events if e.event == "custom"]
                assert custom == [{"word": w, "index": i} for i, w in enumerate("abc")]
                assert events[-1].data["output"]["content"] == "3 words"
                tokens = [e.data for e in events if e.event == "token"]
                assert tokens == [{"message_id": "counted", "text": "3 words", "node": "count"}]


class TestLogs:
    """Worker and server log lines about a run carry its run_id and thread_id."""

    async def test_run_log_lines_carry_run_and_thread_ids(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        captured: list[dict[str, object]] = []

        def capture(_: object, __: str, event_dict: dict[str, object]) -> dict[str, object]:
            captured.append(dict(event_dict))
            raise structlog.DropEvent

        structlog.configure(
            processors=[structlog.contextvars.merge_contextvars, capture],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            cache_logger_on_first_use=False,
        )
        try:
            run = (await client.post("/v1/runs", json=run_body("log me"))).json()
            await read_events(client, f"/v1/runs/{run['run_id']}/events")
            for _ in range(100):  # the worker logs "run finished" just after writing `done`
                if any(e.get("event") == "run finished" for e in captured):
                    break
                await asyncio.sleep(0.01)
        finally:
            configure_logging("warning", cache=False)
        about_run = [
            e
            for e in captured
            if e.get("event") in ("run submitted", "run started", "run finished")
        ]
        assert {e["event"] for e in about_run} == {"run submitted", "run started", "run finished"}
        for entry in about_run:
            assert entry["run_id"] == run["run_id"]
            assert entry["thread_id"] == run["thread_id"]
