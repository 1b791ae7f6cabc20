"""The workers' webhook deliveries: LangGraph's POST of a run when it ends, at least once.

A run's end records its delivery in Postgres in the same transaction (a trigger,
stream_store/migrations.py), so a worker that dies after the run ended loses nothing: any
worker's loop here claims it (stream_store/webhook_records.py: one worker at a time, under a
lease). The payload is LangGraph's (`langgraph_api/webhook.py` `call_webhook`): the run, its
status, `run_started_at`, `run_ended_at`, `webhook_sent_at`, the thread's `values` and, for a
failed run, `error`; built at the first attempt and sent unchanged on every retry.

A receiver that is slow or down never slows a run: the loop is a task of its own, each POST
has LangGraph's timeouts (5 s to connect, 30 s in all), and at most `CONCURRENCY` are in
flight per worker. A timeout, a network error, 408, 429 or a 5xx is retried with exponential
backoff (jittered) up to `MAX_ATTEMPTS` attempts; any other answer settles the delivery
(`delivered` for a 2xx, `failed` otherwise), as LangGraph retries only those. Each attempt is
recorded, and the run's owner reads them (`GET /v1/runs/{id}/webhooks`, docs/protocol.md).

Each attempt checks the URL policy again and resolves the host once: an address the policy
refuses (the name now points at 127.0.0.1, say) settles the delivery `failed` at once with the
policy's reason, never retried (LangGraph does not retry a blocked host either); a name that
does not resolve is retried as a failed connect is. The POST then connects to the checked
address itself (runner/pinned_request.py). Attempts are counted by outcome on the worker's
/metrics (`runstream_webhook_attempts_total`, docs/operations.md).
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import msgspec
import psycopg
import structlog
from langgraph.pregel import Pregel

from project.webhooks import (
    Resolver,
    WebhookPolicy,
    WebhookRefused,
    WebhookUnresolved,
    resolve_host,
)
from stream_store.assistant_ids import assistant_id_for
from stream_store.errors import StoreError
from stream_store.messages import state_to_json
from stream_store.metrics import WebhookOutcome
from stream_store.webhook_records import (
    DeliveryAttempt,
    DeliveryState,
    WebhookDelivery,
    WebhookRecords,
)
from wire.run_status import RunStatus

from .pinned_request import pinned_post, webhook_client
from .state import WorkerState

__all__ = [
    "CONCURRENCY",
    "MAX_ATTEMPTS",
    "WebhookSender",
    "deliver_webhooks_forever",
    "webhook_payload",
]

logger = structlog.get_logger()

MAX_ATTEMPTS = 6  # about a minute of retries: 1, 2, 4, 8, 16 s apart (jittered)
CONCURRENCY = 16  # POSTs in flight per worker
CONNECT_TIMEOUT_S = 5.0  # LangGraph's
REQUEST_TIMEOUT_S = 30.0  # LangGraph's, and a bound on the whole POST here
POLL_S = 1.0
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 300.0
SETTLED_KEPT_S = 7 * 24 * 3600.0  # settled deliveries (and their attempts) are kept a week
_RETRIED_STATUSES = frozenset({408, 429})

_FAILURES = (StoreError, psycopg.Error, OSError)

# A run's own field and runstream's notes in its kwargs, which LangGraph's run does not show
# (server/langgraph/views.py `run_view` leaves out the same).
_NOT_KWARGS = frozenset({"assistant_id", "rollback", "breakpoint"})


def _status(run: dict[str, Any]) -> str:
    """LangGraph's word for how the run ended: a run stopped at interrupt() `success` (its
    thread interrupted), a cancelled one `interrupted` (`rollback` when rolled back)."""
    match run["status"]:
        case RunStatus.FAILED:
            return "error"
        case RunStatus.CANCELLED:
            return "rollback" if (run.get("kwargs") or {}).get("rollback") else "interrupted"
        case _:
            return "success"


def _error(run: dict[str, Any]) -> dict[str, str]:
    """The failed run's error as LangGraph serialises an exception: its type and message."""
    error = run.get("error") or {}
    message = str(error.get("message", ""))
    kind, found, text = message.partition(": ")
    if found and kind.isidentifier():
        return {"error": kind, "message": text}
    return {"error": str(error.get("code", "Error")), "message": message}


def webhook_payload(
    run: dict[str, Any],
    values: Any,
    sent_at: datetime,
    allowed_fields: list[str] | None = None,
) -> dict[str, Any]:
    """What LangGraph POSTs for `run` (a delivery's snapshot of the run as it ended), in its
    key order; only `allowed_fields` when the project names some."""
    kwargs = {k: v for k, v in (run.get("kwargs") or {}).items() if k not in _NOT_KWARGS}
    named = (run.get("kwargs") or {}).get("assistant_id")
    payload: dict[str, Any] = {
        "run_id": run["run_id"],
        "thread_id": run["thread_id"],
        "assistant_id": named if isinstance(named, str) else assistant_id_for(run["graph"]),
        "metadata": run.get("metadata") or {},
        "status": _status(run),
        "kwargs": kwargs,
        "multitask_strategy": run.get("multitask"),
        "created_at": run["created_at"],
        "updated_at": run["ended_at"],
        "langsmith_session_name": None,
        "run_started_at": run.get("started_at"),
        "run_ended_at": run["ended_at"],
        "webhook_sent_at": sent_at.isoformat(),
        "values": values,
    }
    if run["status"] == RunStatus.FAILED:
        payload["error"] = _error(run)
    if allowed_fields:
        payload = {k: v for k, v in payload.items() if k in allowed_fields}
    return payload


def _backoff_s(attempts: int) -> float:
    """Before attempt `attempts + 1`: doubling from FIRST_BACKOFF_S, jittered down by half."""
    ceiling = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (attempts - 1))
    return ceiling * random.uniform(0.5, 1.0)  # spreads the retries of many deliveries


class WebhookSender:
    """One worker's deliveries: claims due ones each `POLL_S` and POSTs them, each in a task
    of its own (at most CONCURRENCY at once)."""

    def __init__(
        self, state: WorkerState, client: httpx.AsyncClient, resolve: Resolver = resolve_host
    ) -> None:
        self.state = state
        self.records: WebhookRecords = state.services.webhooks
        self.client = client
        project = state.graphs.project
        spec = project.webhooks if project is not None else None
        self.policy = WebhookPolicy(
            url=spec.url if spec is not None else None,
            private_addresses=state.services.settings.webhook_private_addresses,
            resolve=resolve,
        )
        self.headers = dict(project.webhook_headers) if project is not None else {}
        self.allowed_fields = spec.allowed_fields if spec is not None else None
        self.disabled = project.http.disable_webhooks if project is not None else False
        # a claim outlives any POST (RUNSTREAM_WEBHOOK_LEASE); then another worker takes it
        self.lease_s = state.services.settings.webhook_lease_s
        self.in_flight: set[asyncio.Task[None]] = set()

    async def run_forever(self) -> None:
        passes = 0
        try:
            while True:
                try:
                    await self.claim_and_send()
                    if passes % 3600 == 0:
                        await self.records.forget_settled(SETTLED_KEPT_S)
                except _FAILURES as exc:
                    logger.warning("webhook pass failed; retrying", error=str(exc))
                passes += 1
                await asyncio.sleep(POLL_S)
        finally:
            for task in list(self.in_flight):
                task.cancel()  # its claim runs out and another worker sends it
            await asyncio.gather(*self.in_flight, return_exceptions=True)

    async def claim_and_send(self) -> None:
        free = CONCURRENCY - len(self.in_flight)
        for delivery in await self.records.claim_due(free, self.lease_s):
            task = asyncio.create_task(self.deliver(delivery))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def deliver(self, delivery: WebhookDelivery) -> None:
        log = logger.bind(
            run_id=delivery.run_id, thread_id=delivery.thread_id, delivery=delivery.delivery_id
        )
        try:
            await self._deliver(delivery, log)
        except _FAILURES as exc:  # Postgres: the claim runs out and a later pass retries
            log.warning("webhook delivery not recorded; retrying", error=str(exc))

    async def _deliver(self, delivery: WebhookDelivery, log: Any) -> None:
        number = len(delivery.attempts) + 1
        now = datetime.now(UTC)
        if self.disabled:
            why = "webhooks are disabled (langgraph.json http.disable_webhooks)"
            await self._record(delivery, DeliveryAttempt(at=now, error=why), "refused")
            return
        try:
            target = await self.policy.check(delivery.url)
        except WebhookUnresolved:  # a failed lookup, as a failed connect: worth another try
            unresolved = DeliveryAttempt(at=now, error="the webhook's host did not resolve")
            await self._failed(delivery, unresolved, number, retry=True, log=log)
            return
        except WebhookRefused as exc:  # the policy changed since the submit, or its DNS did
            await self._refuse(delivery, now, exc, log)
            return
        payload = delivery.payload
        if payload is None:
            values = await self._values(delivery)
            payload = webhook_payload(delivery.run, values, now, self.allowed_fields)
            await self.records.set_payload(delivery.delivery_id, payload)
        headers = {**self.headers, "Content-Type": "application/json"}
        try:
            request = pinned_post(self.client, target, msgspec.json.encode(payload), headers)
        except WebhookRefused as exc:
            await self._refuse(delivery, now, exc, log)
            return
        attempt, retry = await self._send(request)
        if attempt.status_code is not None and 200 <= attempt.status_code < 300:
            await self._record(delivery, attempt, "delivered")
            self.state.metrics.webhook_delivered(delivery.created_at)
            log.info("webhook delivered", attempt=number, status_code=attempt.status_code)
        else:
            await self._failed(delivery, attempt, number, retry=retry, log=log)

    async def _refuse(
        self, delivery: WebhookDelivery, at: datetime, exc: WebhookRefused, log: Any
    ) -> None:
        """Settle `failed` now: another attempt would be refused the same way (or reach a
        host the submit never saw). The owner reads the policy's reason; the resolved
        addresses stay out of it (an owner could map the internal network with them)."""
        refused = DeliveryAttempt(at=at, error=f"refused by the URL policy: {exc}")
        await self._record(delivery, refused, "refused")
        log.warning("webhook refused by the URL policy", reason=str(exc))

    async def _failed(
        self,
        delivery: WebhookDelivery,
        attempt: DeliveryAttempt,
        number: int,
        *,
        retry: bool,
        log: Any,
    ) -> None:
        """An attempt that reached no 2xx: another later if worth it and any are left."""
        if retry and number < MAX_ATTEMPTS:
            wait = _backoff_s(number)
            await self.records.record_attempt(delivery.delivery_id, attempt, "pending", wait)
            self.state.metrics.webhook_attempt("retrying")
            log.info("webhook attempt failed; will retry", attempt=number, retry_in_s=wait)
        else:
            await self._record(delivery, attempt, "failed")
            log.warning("webhook delivery failed", attempt=number, error=attempt.error)

    async def _record(
        self, delivery: WebhookDelivery, attempt: DeliveryAttempt, outcome: WebhookOutcome
    ) -> None:
        """Settle the delivery with its last attempt, and count that attempt's outcome."""
        state: DeliveryState = "delivered" if outcome == "delivered" else "failed"
        await self.records.record_attempt(delivery.delivery_id, attempt, state)
        self.state.metrics.webhook_attempt(outcome)

    async def _send(self, request: httpx.Request) -> tuple[DeliveryAttempt, bool]:
        """One POST: its attempt, and whether a failure is worth another."""
        at = datetime.now(UTC)
        started = time.monotonic()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                response = await self.client.send(request)
        except (httpx.HTTPError, TimeoutError) as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return DeliveryAttempt(at=at, error=reason[:500]), True
        finally:
            self.state.metrics.webhook_posted(time.monotonic() - started)
        code = response.status_code
        retry = code >= 500 or code in _RETRIED_STATUSES
        error = None if 200 <= code < 300 else f"answered {code}"
        return DeliveryAttempt(at=at, status_code=code, error=error), retry

    async def _values(self, delivery: WebhookDelivery) -> Any:
        """The thread's values now (the run just ended): LangGraph's `values`; None when the
        run was rolled back, or its thread or graph is gone."""
        if delivery.run.get("kwargs", {}).get("rollback"):
            return None
        graph_name = delivery.run["graph"]
        if graph_name not in self.state.graphs:
            return None
        try:
            graph: Pregel = await self.state.graphs.graph_for_reading(
                graph_name, self.state.services.checkpointer
            )
            config = {"configurable": {"thread_id": delivery.thread_id, "checkpoint_ns": ""}}
            snapshot = await graph.aget_state(config)  # type: ignore[arg-type]
        except _FAILURES as exc:
            logger.warning("webhook values not read", run_id=delivery.run_id, error=str(exc))
            return None
        if not snapshot.config.get("configurable", {}).get("checkpoint_id"):
            return None
        return state_to_json(snapshot.values)


async def deliver_webhooks_forever(state: WorkerState, resolve: Resolver = resolve_host) -> None:
    """The worker's delivery loop (runner/worker.py starts it beside the reaper); `resolve`
    looks up webhook hosts (tests give their own)."""
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    async with webhook_client(timeout, CONCURRENCY) as client:
        await WebhookSender(state, client, resolve).run_forever()
