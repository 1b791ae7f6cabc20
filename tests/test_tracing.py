"""Traces (issue 13): one OpenTelemetry trace per run, from the client's `traceparent` to the
outcome, across the queue; spans checked with the SDK's in-memory exporter, and one export
over OTLP/HTTP to a receiver on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import structlog
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from runner.job_loop import JobLoop
from runner.worker import build_worker
from server.app import create_app
from server.processes.logs import configure_logging
from stream_store.settings import Settings, SettingsError
from stream_store.tracing import tracer_provider_from_env
from tests.conftest import ServerHandle, serve_in_loop, stop_worker
from tests.test_control import wait_status
from tests.test_runs import run_body

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


@dataclass
class Traced:
    """A server and the means to start workers, all exporting to one in-memory exporter."""

    settings: Settings
    provider: TracerProvider
    exporter: InMemorySpanExporter
    server: ServerHandle
    workers: list[tuple[JobLoop, asyncio.Task[None]]]

    async def start_worker(self, **changes: Any) -> JobLoop:
        settings = replace(self.settings, **changes)
        return await start_worker(settings, self.provider, self.workers)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


async def start_worker(
    settings: Settings,
    provider: TracerProvider,
    workers: list[tuple[JobLoop, asyncio.Task[None]]],
) -> JobLoop:
    worker = build_worker(settings, tracer_provider=provider)
    task = asyncio.create_task(worker.main())
    workers.append((worker, task))
    for _ in range(500):
        if "state" in worker.ctx:
            return worker
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    raise AssertionError("the worker did not start")


@pytest.fixture
async def traced(settings: Settings) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = await serve_in_loop(create_app(settings, tracer_provider=provider))
    traced = Traced(settings, provider, exporter, server, [])
    try:
        yield traced
    finally:
        for worker, task in traced.workers:
            await stop_worker(worker, task)
        await server.stop()
        provider.shutdown()


@contextlib.contextmanager
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[list[dict[str, Any]]]:
    """The process's log lines, as `RUNSTREAM_LOG_FORMAT=json` writes them."""
    lines: list[dict[str, Any]] = []
    structlog_config, handlers = structlog.get_config(), logging.root.handlers[:]
    configure_logging("info", json=True, cache=False)
    try:
        yield lines
    finally:
        structlog.configure(**structlog_config)  # as tests/conftest.py set it up
        logging.root.handlers[:] = handlers
        for line in capsys.readouterr().err.splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))


def client_traceparent() -> tuple[str, str, str]:
    """A `traceparent` as a traced client would send it: (header, trace id, parent span id)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def hex_ids(span: ReadableSpan) -> tuple[str, str, str | None]:
    """(trace id, span id, parent span id) of a finished span, in hex."""
    assert span.context is not None
    parent = f"{span.parent.span_id:016x}" if span.parent is not None else None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}", parent


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in spans]}"
    return found[0]


def span_tree(spans: list[ReadableSpan]) -> str:
    """The spans of one trace, indented under their parents (for the eye, and the docs)."""
    ids = {hex_ids(span)[1]: span for span in spans}
    children: dict[str | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = hex_ids(span)[2]
        children.setdefault(parent if parent in ids else None, []).append(span)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            keys = ("runstream.outcome", "runstream.attempt", "runstream.events", "langgraph.node")
            shown = {k: v for k, v in (span.attributes or {}).items() if k in keys}
            links = f" links={len(span.links)}" if span.links else ""
            lines.append(f"{'  ' * depth}{span.name} {shown if shown else ''}{links}".rstrip())
            walk(hex_ids(span)[1], depth + 1)

    walk(None, 0)
    return "\n".join(lines)


async def wait_for_spans(traced: Traced, name: str, count: int = 1) -> list[ReadableSpan]:
    """The worker ends its attempt's span just after the outcome a client can see."""
    for _ in range(500):
        spans = traced.spans()
        if sum(span.name == name for span in spans) >= count:
            return spans
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {count} span(s) {name!r}: {[s.name for s in traced.spans()]}")


class TestOneTracePerRun:
    async def test_a_run_is_one_trace_from_the_clients_traceparent_to_its_outcome(
        self, traced: Traced, capsys: pytest.CaptureFixture[str]
    ) -> None:
        await traced.start_worker()
        header, trace_id, client_span_id = client_traceparent()
        with json_logs(capsys) as logs:
            async with httpx.AsyncClient(base_url=traced.server.url, timeout=30) as client:
                created = await client.post(
                    "/v1/runs", json=run_body("hello traced world"), headers={"traceparent": header}
                )
                assert created.status_code == 202, created.text
                run_id = created.json()["run_id"]
                assert created.json()["trace_id"] == trace_id
                await wait_status(client, run_id, "succeeded")
                spans = await wait_for_spans(traced, "run attempt")
                polled = (await client.get(f"/v1/runs/{run_id}")).json()
                assert (await client.get("/healthz")).status_code == 200
        assert polled["trace_id"] == trace_id
        assert not [s for s in traced.spans() if "/healthz" in s.name]  # probes: no spans

        run_spans = [span for span in spans if hex_ids(span)[0] == trace_id]
        print(f"\nspan tree of run {run_id}:\n{span_tree(run_spans)}")
        request = next(
            s for s in run_spans if s.kind is SpanKind.SERVER and s.name.startswith("POST")
        )
        submit = one(run_spans, "submit run")
        attempt = one(run_spans, "run attempt")
        assert hex_ids(request)[2] == client_span_id  # continues the client's span
        assert hex_ids(submit)[2] == hex_ids(request)[1]
        assert hex_ids(attempt)[2] == hex_ids(submit)[1]  # across the queue
        assert attempt.kind is SpanKind.CONSUMER
        attempt_id = hex_ids(attempt)[1]
        assert hex_ids(one(run_spans, "claim"))[2] == attempt_id
        node = one(run_spans, "node respond")
        assert hex_ids(node)[2] == attempt_id
        model = one(run_spans, "chat model")
        assert hex_ids(model)[2] == hex_ids(node)[1]
        assert model.attributes and model.attributes["gen_ai.operation.name"] == "chat"
        append = one(run_spans, "append events")  # one for all the attempt's batches
        assert hex_ids(append)[2] == attempt_id
        assert append.attributes and append.attributes["runstream.events"] == 5
        assert attempt.attributes is not None
        assert attempt.attributes["runstream.outcome"] == "succeeded"
        assert attempt.attributes["runstream.run_id"] == run_id
        assert attempt.attributes["runstream.attempt"] == 1
        assert not attempt.links

        # Every log line of the run's submit and of its worker names the trace (a later
        # request about the run, a poll say, is a trace of its own).
        run_lines = [
            line
            for line in logs
            if line.get("run_id") == run_id
            and ("request_id" not in line or line["event"] == "run submitted")
        ]
        events = {line["event"] for line in run_lines}
        assert {"run submitted", "run started"} <= events, events
        assert all(line.get("trace_id") == trace_id for line in run_lines), run_lines

    async def test_a_retried_attempt_is_a_linked_span_in_the_same_trace(
        self, traced: Traced
    ) -> None:
        first = await traced.start_worker()
        header, trace_id, _ = client_traceparent()
        async with httpx.AsyncClient(base_url=traced.server.url, timeout=30) as client:
            slow = {"configurable": {"fake_token_delay_ms": 20}}
            body = run_body(" ".join(f"w{i}" for i in range(40)), config=slow)
            created = await client.post("/v1/runs", json=body, headers={"traceparent": header})
            run_id = created.json()["run_id"]
            await wait_status(client, run_id, "running")
            # A worker that stops hands its run back: the next attempt goes to another worker.
            stopping = next(task for worker, task in traced.workers if worker is first)
            await stop_worker(first, stopping)
            await traced.start_worker()
            done = await wait_status(client, run_id, "succeeded")
            spans = await wait_for_spans(traced, "run attempt", 2)
        assert done["attempt"] == 2 and done["trace_id"] == trace_id

        run_spans = [span for span in spans if hex_ids(span)[0] == trace_id]
        print(f"\nspan tree of run {run_id}:\n{span_tree(run_spans)}")
        submit = one(run_spans, "submit run")
        attempts = sorted(
            (s for s in run_spans if s.name == "run attempt"), key=lambda s: s.start_time or 0
        )
        assert [(s.attributes or {}).get("runstream.outcome") for s in attempts] == [
            "handed_back",
            "succeeded",
        ]
        assert all(hex_ids(s)[2] == hex_ids(submit)[1] for s in attempts)
        (link,) = attempts[1].links
        linked = (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}")
        assert linked == hex_ids(attempts[0])[:2]  # the attempt before, in the same trace

    async def test_a_langgraph_api_run_is_traced_the_same_way(self, traced: Traced) -> None:
        await traced.start_worker()
        header, trace_id, client_span_id = client_traceparent()
        async with httpx.AsyncClient(base_url=traced.server.url, timeout=30) as client:
            waited = await client.post(
                "/runs/wait",
                json={
                    "assistant_id": "chat",
                    "input": {"messages": [{"type": "human", "content": "hi"}]},
                },
                headers={"traceparent": header},
            )
            assert waited.status_code == 200, waited.text
            spans = await wait_for_spans(traced, "run attempt")
        run_spans = [span for span in spans if hex_ids(span)[0] == trace_id]
        (request,) = [s for s in run_spans if s.kind is SpanKind.SERVER]
        submit, attempt = one(run_spans, "submit run"), one(run_spans, "run attempt")
        assert hex_ids(request)[2] == client_span_id
        assert hex_ids(submit)[2] == hex_ids(request)[1]
        assert hex_ids(attempt)[2] == hex_ids(submit)[1]
        assert (attempt.attributes or {}).get("runstream.outcome") == "succeeded"

    async def test_a_reapers_retry_is_in_the_runs_trace(
        self, traced: Traced, capsys: pytest.CaptureFixture[str]
    ) -> None:
        worker = await traced.start_worker(lease_s=1.0, reaper_interval_s=0.1)
        header, trace_id, _ = client_traceparent()
        with json_logs(capsys) as logs:
            async with httpx.AsyncClient(base_url=traced.server.url, timeout=30) as client:
                slow = {"configurable": {"fake_token_delay_ms": 20}}
                body = run_body(" ".join(f"w{i}" for i in range(40)), config=slow)
                created = await client.post("/v1/runs", json=body, headers={"traceparent": header})
                run_id = created.json()["run_id"]
                await wait_status(client, run_id, "running")
                # The attempt stops as if its lease were lost, writing nothing more; once the
                # lease runs out, the reaper re-queues the run and an attempt 2 finishes it.
                worker.ctx["state"].attempts[run_id].lose()
                done = await wait_status_within(client, run_id, "succeeded", 15)
                spans = await wait_for_spans(traced, "run attempt", 2)
        assert done["attempt"] == 2

        run_spans = [span for span in spans if hex_ids(span)[0] == trace_id]
        print(f"\nspan tree of run {run_id}:\n{span_tree(run_spans)}")
        submit = one(run_spans, "submit run")
        requeue = one(run_spans, "requeue")
        assert hex_ids(requeue)[2] == hex_ids(submit)[1]
        assert requeue.attributes and requeue.attributes["runstream.attempt"] == 1
        first, second = sorted(
            (s for s in run_spans if s.name == "run attempt"), key=lambda s: s.start_time or 0
        )
        assert (first.attributes or {}).get("runstream.outcome") == "lease_lost"
        assert (second.attributes or {}).get("runstream.outcome") == "succeeded"
        assert hex_ids(second)[2] == hex_ids(submit)[1]
        assert [f"{link.context.span_id:016x}" for link in second.links] == [hex_ids(first)[1]]
        requeued = [line for line in logs if line["event"] == "run re-queued"]
        assert requeued and all(line.get("trace_id") == trace_id for line in requeued)


async def wait_status_within(
    client: httpx.AsyncClient, run_id: str, status: str, timeout_s: float
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        run = (await client.get(f"/v1/runs/{run_id}")).json()
        if run["status"] == status:
            return run
        assert asyncio.get_running_loop().time() < deadline, f"never {status}: {run}"
        await asyncio.sleep(0.05)


class TestTracesOffByDefault:
    def test_no_otel_variables_no_tracer_provider(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in OTEL_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        assert tracer_provider_from_env("server") is None
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        assert tracer_provider_from_env("server") is None
        monkeypatch.delenv("OTEL_SDK_DISABLED")
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        assert tracer_provider_from_env("server") is None

    def test_an_exporter_runstream_lacks_is_refused_at_start_up(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for name in OTEL_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        with pytest.raises(SettingsError, match="http/protobuf"):
            tracer_provider_from_env("worker")
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
        with pytest.raises(SettingsError, match="zipkin"):
            tracer_provider_from_env("worker")

    async def test_an_untraced_run_has_no_trace_id(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        header, _, _ = client_traceparent()
        created = await client.post("/v1/runs", json=run_body(), headers={"traceparent": header})
        run = await wait_status(client, created.json()["run_id"], "succeeded")
        assert run["trace_id"] is None


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """A minimal OTLP/HTTP receiver on loopback: it decodes each POST to /v1/traces."""
    received: list[ExportTraceServiceRequest] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                received.append(ExportTraceServiceRequest.FromString(body))
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_address[1]}", received
    finally:
        http.shutdown()
        http.server_close()


async def test_spans_are_exported_over_otlp_http_when_the_endpoint_is_set(
    settings: Settings,
    otlp_receiver: tuple[str, list[ExportTraceServiceRequest]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, received = otlp_receiver
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    provider = tracer_provider_from_env("server")
    assert provider is not None
    workers: list[tuple[JobLoop, asyncio.Task[None]]] = []
    server = await serve_in_loop(create_app(settings, tracer_provider=provider))
    try:
        await start_worker(settings, provider, workers)
        header, trace_id, _ = client_traceparent()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            created = await client.post(
                "/v1/runs", json=run_body(), headers={"traceparent": header}
            )
            await wait_status(client, created.json()["run_id"], "succeeded")
        for worker, task in workers:
            await stop_worker(worker, task)
        workers.clear()
    finally:
        for worker, task in workers:
            await stop_worker(worker, task)
        await server.stop()
        await asyncio.to_thread(provider.shutdown)  # exports what is still batched

    exported = [
        (resource_spans.resource, span)
        for request in received
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    names = {span.name for _, span in exported if span.trace_id.hex() == trace_id}
    assert {"submit run", "run attempt", "claim", "node respond", "chat model"} <= names, names
    services = {
        attribute.value.string_value
        for resource, _ in exported
        for attribute in resource.attributes
        if attribute.key == "service.name"
    }
    assert services == {"runstream-server"}
