"""`/v1/runs`: submit, poll, attach, cancel and resume runs."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

import msgspec
import structlog
from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from server import inputs
from server.access.new_runs import new_run, with_message_id
from server.access.run_context import check_context
from server.access.runs import prepare_run, reach_run, record_run
from server.callers.auth import Caller
from server.callers.budgets import WRITE
from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.resources import Resources
from server.streaming.attach import Attachment, check_resume_point
from server.streaming.event_stream import EventStream
from server.v1.bodies import ResumeRequest, RunCreate
from stream_store.evaluations import EvaluationRecord
from stream_store.run_records import RunRecord
from stream_store.tracing import trace_id_of
from stream_store.webhook_records import WebhookDelivery
from wire.responses import (
    EvaluationList,
    EvaluationOut,
    RunOut,
    WebhookAttemptOut,
    WebhookList,
    WebhookOut,
)

__all__ = [
    "RunsController",
    "evaluation_list",
    "run_out",
    "submit_run",
    "webhook_list",
]

logger = structlog.get_logger()

SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}

IdempotencyHeader = Annotated[
    str | None, Parameter(header="Idempotency-Key", required=False, description="1-255 chars")
]


def run_out(resources: Resources, run: RunRecord, last_event_id: str | None = None) -> RunOut:
    token = resources.tokens.issue(run.run_id, run.owner)
    return RunOut(
        run_id=run.run_id,
        thread_id=run.thread_id,
        graph=run.graph,
        status=run.status,
        attempt=run.attempt,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        last_event_id=last_event_id or run.last_event_id,
        error=run.error,
        interrupt=run.interrupt,
        stream_url=f"/v1/runs/{run.run_id}/events?token={token}",
        metadata=run.metadata,
        multitask=run.multitask,
        trace_id=trace_id_of(run.traceparent),
        x_trace_id=run.x_trace_id,
    )


def webhook_list(deliveries: list[WebhookDelivery]) -> WebhookList:
    return WebhookList(
        webhooks=[
            WebhookOut(
                url=d.url,
                state=d.state,
                attempts=[
                    WebhookAttemptOut(at=a.at, status_code=a.status_code, error=a.error)
                    for a in d.attempts
                ],
                next_attempt_at=d.next_attempt_at if d.state == "pending" else None,
                created_at=d.created_at,
            )
            for d in deliveries
        ]
    )


def evaluation_list(records: list[EvaluationRecord]) -> EvaluationList:
    return EvaluationList(
        evaluations=[
            EvaluationOut(
                run_id=e.run_id,
                thread_id=e.thread_id,
                owner=e.owner,
                key=e.key,
                kind=e.kind,
                score=e.score,
                passed=e.passed,
                detail=e.detail,
                graph=e.graph,
                attempt=e.attempt,
                trace_id=e.trace_id,
                x_trace_id=e.x_trace_id,
                created_at=e.created_at,
                message_id=e.message_id,
            )
            for e in records
        ]
    )


def _request_hash(body: RunCreate, thread_id: str | None) -> str:
    canonical = msgspec.json.encode({"thread": thread_id, "body": body}, order="sorted")
    return hashlib.sha256(canonical).hexdigest()


async def submit_run(
    resources: Resources,
    quotas: CallerQuotas,
    caller: Caller,
    body: RunCreate,
    *,
    path_thread_id: str | None,
    idempotency_key: str | None,
) -> Response[RunOut]:
    """Record, open the stream of, and enqueue a run: 202, or 200 for an idempotent replay.

    Checks the input, then the caller's submits per minute (`quotas`), then, in the run's
    transaction, its queued and running runs (`max_active_runs`).
    """
    if body.graph not in resources.graphs:
        raise ApiError(
            400,
            "unknown_graph",
            f"unknown graph {body.graph!r}; known: {', '.join(resources.graphs.names())}",
        )
    inputs.message_texts([m.content for m in body.input.messages], resources.settings)
    body_thread = str(body.thread_id) if body.thread_id else None
    if path_thread_id and body_thread and body_thread != path_thread_id:
        raise ApiError(400, "thread_mismatch", "thread_id in the body differs from the path")
    thread_id = path_thread_id or body_thread
    key = inputs.idempotency_key(idempotency_key)
    run_input = msgspec.to_builtins(body.input)
    for message in run_input["messages"]:
        with_message_id(message)
    # `config.configurable` and `context` are one, as on LangGraph's routes: both are checked
    # as the graph's configurable keys (400), and as its context schema's fields (422)
    configurable = {**body.config.configurable, **body.context}
    new = new_run(
        resources,
        caller.owner,
        graph=body.graph,
        input=run_input,
        config={**msgspec.to_builtins(body.config), "configurable": configurable},
        metadata=body.metadata,
        thread_id=thread_id,
        multitask=body.multitask,
        idempotency_key=key,
        request_hash=_request_hash(body, thread_id) if key else None,
        # what the graph's `runtime.context` is built from (runner/execute.py)
        kwargs={"context": configurable} if configurable else {},
    )
    await check_context(resources, body.graph, configurable)
    # a project's `threads.create_run` handler is asked here too (server/access.py)
    await prepare_run(resources, caller, new, {"multitask_strategy": body.multitask})
    created = await record_run(resources, quotas, new)
    return Response(run_out(resources, created.run), status_code=202 if created.created else 200)


class RunsController(Controller):
    path = "/v1/runs"
    tags = ["runs"]

    @post("/", status_code=202, summary="Start a run")
    async def create(
        self,
        data: RunCreate,
        resources: Resources,
        quotas: CallerQuotas,
        caller: Caller,
        idempotency_key: IdempotencyHeader = None,
    ) -> Response[RunOut]:
        return await submit_run(
            resources, quotas, caller, data, path_thread_id=None, idempotency_key=idempotency_key
        )

    @get("/{run_id:str}", summary="A run's status, for polling")
    async def read(self, run_id: str, resources: Resources, caller: Caller) -> RunOut:
        run = await reach_run(resources, caller, run_id)
        record = await resources.events.live_record(run.run_id)
        return run_out(resources, run, record.last_event_id if record else None)

    @get("/{run_id:str}/evaluations", summary="What the run's graph recorded of its own work")
    async def evaluations(
        self, run_id: str, resources: Resources, caller: Caller
    ) -> EvaluationList:
        run = await reach_run(resources, caller, run_id)
        return evaluation_list(await resources.evaluations.for_run(run.run_id, caller.owner))

    @get("/{run_id:str}/webhooks", summary="The run's webhook deliveries and their attempts")
    async def webhooks(self, run_id: str, resources: Resources, caller: Caller) -> WebhookList:
        run = await reach_run(resources, caller, run_id)
        return webhook_list(await resources.webhooks.of_run(run.run_id, caller.owner))

    @get(
        "/{run_id:str}/events",
        summary="Attach over SSE: replay, then live",
        media_type="text/event-stream",
    )
    async def events(
        self,
        request: Request[Any, Any, Any],
        run_id: str,
        resources: Resources,
        quotas: CallerQuotas,
        token: Annotated[str | None, Parameter(query="token", required=False)] = None,
        last_event_id_header: inputs.LastEventIdHeader = None,
        last_event_id_query: inputs.LastEventIdQuery = None,
    ) -> EventStream:
        run_id = inputs.object_id(run_id, "run")
        after = inputs.event_id(inputs.last_event_id(last_event_id_header, last_event_id_query))
        if token:  # the run's own capability, signed for its owner (docs/security.md)
            caller = resources.tokens.verify(token, run_id)
        else:
            caller = await resources.sign_in.caller(request)
        run = await reach_run(resources, caller, run_id)
        record = await resources.events.live_record(run.run_id)
        first_id = check_resume_point(run, record, after)
        slot = await quotas.take_stream_slot(caller.owner, token)  # last: nothing to give back
        logger.debug("viewer attached", after=after)
        frames = Attachment(
            resources.follower,
            resources.events,
            run_id=run.run_id,
            after=after,
            first_id=first_id,
            ping_interval_s=resources.settings.ping_interval_s,
        ).frames()
        return EventStream(
            quotas.hold(slot, frames), media_type="text/event-stream", headers=SSE_HEADERS
        )

    @post("/{run_id:str}/cancel", status_code=202, summary="Stop a run", dependencies=WRITE)
    async def cancel(self, run_id: str, resources: Resources, caller: Caller) -> RunOut:
        # LangGraph's action for a cancel: `threads` `update`, shown as its server shows it
        shown = {"action": "interrupt", "metadata": {"run_ids": [run_id], "status": None}}
        run = await reach_run(resources, caller, run_id, "update", shown)
        return run_out(resources, await resources.lifecycle.cancel(run))

    @post(
        "/{run_id:str}/resume",
        status_code=202,
        summary="Answer a pending interrupt",
        dependencies=WRITE,
    )
    async def resume(
        self, run_id: str, data: ResumeRequest, resources: Resources, caller: Caller
    ) -> RunOut:
        inputs.resume_value(data.resume, resources.settings)
        # a resume is a new run of the thread to LangGraph (`Command(resume=...)`): `create_run`
        shown = {"status": "pending", "kwargs": {"command": {"resume": data.resume}}}
        run = await reach_run(resources, caller, run_id, "create_run", shown)
        return run_out(resources, await resources.lifecycle.resume(run, data.resume))
