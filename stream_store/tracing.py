"""Traces: the OpenTelemetry plumbing that the server and the worker share.

A run's trace starts at its submit (continuing a W3C `traceparent` the client sent), crosses
the queue in the run's row and job, and ends with the worker's attempts. This module only
builds the tracer provider from the standard `OTEL_*` variables and carries span contexts as
`traceparent` strings; the spans themselves are made where the work is (`server/v1/runs.py`,
`runner/execute.py`, `runner/graph_spans.py`). It knows nothing of Redis or Postgres: it is
here, below `server` and `runner`, because both use it and `stream_store` stores and enqueues
the `traceparent`.

Off unless the variables ask for it: then every tracer is the API's no-op tracer and no span is
made, so an untraced deployment pays nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanContext, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .settings import SettingsError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from .run_records import RunRecord

__all__ = [
    "TRACER_NAME",
    "add_trace_ids",
    "context_of",
    "make_tracer",
    "record_outcome",
    "run_attributes",
    "span_context_of",
    "trace_id_of",
    "traceparent_of",
    "tracer_provider_from_env",
]

TRACER_NAME = "runstream"

# The W3C format; a run stores the one of its submit span (sampled or not).
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_PROPAGATOR = TraceContextTextMapPropagator()  # stateless


def tracer_provider_from_env(role: str) -> TracerProvider | None:
    """An SDK tracer provider when the `OTEL_*` variables ask for traces, else None.

    Traces are on when `OTEL_TRACES_EXPORTER` names `otlp` or `console`, or, with it unset,
    when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; never
    with `OTEL_SDK_DISABLED=true`. The SDK itself reads the rest (endpoint, headers, sampler,
    batch sizes, resource attributes). `role` (`server`, `worker`) names the service,
    `runstream-<role>`, unless `OTEL_SERVICE_NAME` does. The caller shuts the provider down
    (flushing its spans) when the process stops.
    """
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = [e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").lower().split(",")]
    exporters = [e for e in named if e and e != "none"]
    if not any(named) and (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        exporters = ["otlp"]
    if not exporters:
        return None
    # The SDK is imported only when traces are on.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    span_exporters = [_exporter(name) for name in exporters]
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: f"runstream-{role}"}))
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    for exporter in span_exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))  # exports off the event loop
    return provider


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        raise SettingsError(f"OTEL_TRACES_EXPORTER={name!r}: runstream exports `otlp` or `console`")
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if protocol not in ("", "http/protobuf"):
        raise SettingsError(f"OTLP protocol {protocol!r}: runstream exports over http/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout, compression: OTEL_EXPORTER_OTLP_*


def make_tracer(provider: trace.TracerProvider | None) -> Tracer:
    """runstream's tracer from `provider`; the no-op tracer without one (traces off)."""
    if provider is None:
        return trace.NoOpTracer()
    return provider.get_tracer(TRACER_NAME)


def run_attributes(run: RunRecord) -> dict[str, str | int]:
    """The attributes that say which run (and attempt) a span belongs to."""
    return {
        "runstream.run_id": run.run_id,
        "runstream.thread_id": run.thread_id,
        "runstream.graph": run.graph,
        "runstream.attempt": run.attempt,
    }


def record_outcome(outcome: str, error: str | None = None) -> None:
    """Say on the current span (the attempt's) how the attempt ended; an error sets its status."""
    span = trace.get_current_span()
    span.set_attribute("runstream.outcome", outcome)
    if error is not None:
        span.set_status(StatusCode.ERROR, error)


def traceparent_of(span: Span) -> str | None:
    """`span`'s context as a W3C `traceparent`, to carry it across the queue."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def context_of(traceparent: str | None) -> Context | None:
    """The context to start a child span in, from a stored `traceparent` (None: a new trace)."""
    if not traceparent:
        return None
    return _PROPAGATOR.extract({"traceparent": traceparent})


def span_context_of(traceparent: str | None) -> SpanContext | None:
    """The span a stored `traceparent` names, to link to it."""
    context = context_of(traceparent)
    if context is None:
        return None
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a stored `traceparent`: shown in the run object."""
    match = _TRACEPARENT.match(traceparent or "")
    return match.group(1) if match else None


def add_trace_ids(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: `trace_id` and `span_id` of the span a line is logged in, if any."""
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        event_dict.setdefault("trace_id", trace.format_trace_id(span_context.trace_id))
        event_dict.setdefault("span_id", trace.format_span_id(span_context.span_id))
    return event_dict
