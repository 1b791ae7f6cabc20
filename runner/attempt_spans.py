"""The spans under an attempt's span: one per graph node, model call and tool call, and one
for the attempt's event appends.

LangGraph reports every node it runs, and LangChain every model and tool call, to the callback
handlers in the run's config; `GraphSpans` turns them into OpenTelemetry spans. It is only
installed when the attempt's span is recording (traces on), and it never makes a span current:
the graph's own code, and the events it streams, see the attempt's span. Nothing is done per
token: the model's token callbacks are not handled, and `AppendSpan` makes one span of all the
attempt's batches (a slow model's batches hold a token each).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

__all__ = ["AppendSpan", "GraphSpans", "graph_callbacks"]

# LangGraph tags the callbacks of the task that runs a node (and only that run) with its step.
_STEP_TAG = "graph:step:"


def graph_callbacks(tracer: Tracer) -> list[BaseCallbackHandler]:
    """The callbacks to run the attempt's graph with: spans under the current span, if traced."""
    current = trace.get_current_span()
    if not current.is_recording():
        return []
    return [GraphSpans(tracer, trace.set_span_in_context(current))]


class GraphSpans(BaseCallbackHandler):
    """Spans for one attempt's nodes (`node <name>`), model calls (`chat <model>`) and tools.

    Each span's parent is the span of its nearest traced ancestor run (a model call's, its
    node's), else the attempt's span (`parent`).
    """

    run_inline = True  # called in the event loop, not in a thread: it only starts/ends spans
    raise_error = False

    def __init__(self, tracer: Tracer, parent: Context) -> None:
        self._tracer = tracer
        self._parent = parent
        self._spans: dict[UUID, Span] = {}
        self._parents: dict[UUID, UUID | None] = {}  # every open LangChain run: its parent

    # -- nodes ----------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._parents[run_id] = parent_run_id
        node = (metadata or {}).get("langgraph_node")
        if node is None or not any(tag.startswith(_STEP_TAG) for tag in tags or ()):
            return  # the graph itself, or a runnable inside a node
        attributes: dict[str, str | int] = {"langgraph.node": str(node)}
        step = (metadata or {}).get("langgraph_step")
        if isinstance(step, int):
            attributes["langgraph.step"] = step
        self._start(run_id, parent_run_id, f"node {node}", attributes)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # -- model calls ------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(run_id, parent_run_id, metadata or {})

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(run_id, parent_run_id, metadata or {})

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        span = self._spans.get(run_id)
        if span is not None:
            for generations in response.generations:
                for generation in generations:
                    if not isinstance(generation, ChatGeneration):
                        continue
                    usage = getattr(generation.message, "usage_metadata", None)
                    if usage:
                        span.set_attribute("gen_ai.usage.input_tokens", usage["input_tokens"])
                        span.set_attribute("gen_ai.usage.output_tokens", usage["output_tokens"])
        self._end(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # -- tools ------------------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
        }
        self._start(run_id, parent_run_id, f"execute_tool {name}", attributes)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # -- spans ------------------------------------------------------------------------------

    def _model_start(
        self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any]
    ) -> None:
        model = str(metadata.get("ls_model_name") or "model")
        attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
        }
        if metadata.get("ls_provider"):
            attributes["gen_ai.provider.name"] = str(metadata["ls_provider"])
        self._start(run_id, parent_run_id, f"chat {model}", attributes, SpanKind.CLIENT)

    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        attributes: dict[str, str | int],
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> None:
        self._parents[run_id] = parent_run_id
        self._spans[run_id] = self._tracer.start_span(
            name, context=self._context_of(parent_run_id), kind=kind, attributes=attributes
        )

    def _context_of(self, run_id: UUID | None) -> Context:
        while run_id is not None:
            span = self._spans.get(run_id)
            if span is not None:
                return trace.set_span_in_context(span)
            run_id = self._parents.get(run_id)
        return self._parent

    def _end(self, run_id: UUID, error: BaseException | None = None) -> None:
        # A cancelled streaming model call reports no end of its own: its spans end with the
        # node they ran in, with the same error, and whatever is left with the graph.
        graph_ends = run_id in self._parents and self._parents[run_id] is None
        for inner in [o for o in self._spans if graph_ends or self._descends(o, run_id)]:
            self._end_span(inner, error)
        self._parents.pop(run_id, None)
        self._end_span(run_id, error)

    def _descends(self, run_id: UUID, ancestor: UUID) -> bool:
        parent = self._parents.get(run_id)
        while parent is not None:
            if parent == ancestor:
                return True
            parent = self._parents.get(parent)
        return False

    def _end_span(self, run_id: UUID, error: BaseException | None) -> None:
        span = self._spans.pop(run_id, None)
        if span is None:
            return
        if isinstance(error, GraphBubbleUp):  # an interrupt or a `Command`: not a failure
            span.set_attribute("langgraph.interrupted", True)
        elif error is not None:
            span.record_exception(error)
            span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
        span.end()


class AppendSpan:
    """`append events`: one span from an attempt's first event to its end.

    It counts the batches and events and the time they spent in flight to Redis, and records
    a batch's failure; a span per batch would be a span per token with a slow model.
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._span: Span | None = None
        self._batches = 0
        self._events = 0
        self._waited_s = 0.0

    def begin(self) -> None:
        """Start the span, if not started yet: called in the attempt's context, whose span
        is its parent (the batches are sent from the event log's own task)."""
        if self._span is None:
            self._span = self._tracer.start_span("append events")

    def record(self, events: int, waited_s: float, error: BaseException | None) -> None:
        """One batch written (or refused with `error`); with traces off nothing is kept."""
        span = self._span
        if span is None or not span.is_recording():
            return  # traces off, or a batch answered after the attempt's end
        self._batches += 1
        self._events += events
        self._waited_s += waited_s
        if error is not None:
            span.record_exception(error)
            span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])

    def end(self) -> None:
        span, self._span = self._span, None
        if span is not None:
            span.set_attributes(
                {
                    "runstream.batches": self._batches,
                    "runstream.events": self._events,
                    "runstream.append_seconds": round(self._waited_s, 6),
                }
            )
            span.end()
