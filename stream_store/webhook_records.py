"""LangGraph webhook deliveries in Postgres (`runstream_webhooks`): recorded by a trigger in
the transaction that ends a run (stream_store/migrations.py), claimed and settled by the
workers' delivery loop (runner/webhooks.py), read by the run's owner (`GET /v1/runs/{id}/webhooks`).

A delivery is `pending` until an attempt is answered 2xx (`delivered`) or it gives up
(`failed`). One worker at a time holds a pending one: the claim is `FOR UPDATE SKIP LOCKED`
with a lease (`claimed_until`), so a worker that dies mid-POST hands it on when the lease runs
out, and the receiver may get it twice (at least once, never never).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from psycopg.types.json import Jsonb

from .connections import ConnectionSource
from .pg import execute, fetch_all

__all__ = ["DeliveryAttempt", "DeliveryState", "WebhookDelivery", "WebhookRecords"]

DeliveryState = Literal["pending", "delivered", "failed"]

_COLUMNS = (
    "delivery_id, run_id::text, thread_id::text, owner, url, run, payload, state, attempts,"
    " next_attempt_at, created_at, done_at"
)


class DeliveryAttempt(msgspec.Struct, kw_only=True):
    """One POST: when, and the receiver's status code or why there was none."""

    at: datetime
    status_code: int | None = None
    error: str | None = None


class WebhookDelivery(msgspec.Struct, kw_only=True):
    """One row of `runstream_webhooks`."""

    delivery_id: int
    run_id: str
    thread_id: str
    owner: str
    url: str
    run: dict[str, Any]  # the run as it ended (the trigger's snapshot)
    payload: dict[str, Any] | None  # what is POSTed; built at the first attempt
    state: DeliveryState
    attempts: list[DeliveryAttempt]
    next_attempt_at: datetime
    created_at: datetime
    done_at: datetime | None = None


def _deliveries(rows: list[Any]) -> list[WebhookDelivery]:
    return [msgspec.convert(dict(row), WebhookDelivery) for row in rows]


class WebhookRecords:
    """Queries and changes of webhook deliveries; one instance per process."""

    def __init__(self, pool: ConnectionSource) -> None:
        self.pool = pool

    async def pending_count(self, owner: str) -> int:
        """How many of `owner`'s deliveries are not settled yet (the per-caller bound)."""
        rows = await fetch_all(
            self.pool,
            "SELECT count(*) AS n FROM runstream_webhooks WHERE owner = %s AND state = 'pending'",
            (owner,),
        )
        return int(rows[0]["n"])

    async def of_run(self, run_id: str, owner: str) -> list[WebhookDelivery]:
        """The run's deliveries, oldest first (the owner's only)."""
        return _deliveries(
            await fetch_all(
                self.pool,
                f"SELECT {_COLUMNS} FROM runstream_webhooks WHERE run_id = %s AND owner = %s"
                " ORDER BY delivery_id",
                (run_id, owner),
            )
        )

    async def claim_due(self, limit: int, lease_s: float) -> list[WebhookDelivery]:
        """Up to `limit` pending deliveries whose time has come and that no live claim holds,
        each held by the caller for `lease_s` seconds."""
        if limit <= 0:
            return []
        return _deliveries(
            await fetch_all(
                self.pool,
                "UPDATE runstream_webhooks"
                " SET claimed_until = clock_timestamp() + make_interval(secs => %s)"
                " WHERE delivery_id IN ("
                "  SELECT delivery_id FROM runstream_webhooks"
                "  WHERE state = 'pending' AND next_attempt_at <= clock_timestamp()"
                "   AND (claimed_until IS NULL OR claimed_until < clock_timestamp())"
                "  ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED)"
                f" RETURNING {_COLUMNS}",
                (lease_s, limit),
            )
        )

    async def set_payload(self, delivery_id: int, payload: dict[str, Any]) -> None:
        """Keep what the first attempt POSTs, so every retry sends the same."""
        await execute(
            self.pool,
            "UPDATE runstream_webhooks SET payload = %s WHERE delivery_id = %s",
            (Jsonb(payload), delivery_id),
        )

    async def record_attempt(
        self,
        delivery_id: int,
        attempt: DeliveryAttempt,
        state: DeliveryState,
        retry_in_s: float = 0.0,
    ) -> None:
        """Append `attempt` and move the delivery to `state`: still `pending` (the next attempt
        `retry_in_s` from now), or settled. The claim is released either way."""
        await execute(
            self.pool,
            "UPDATE runstream_webhooks SET attempts = attempts || %s, state = %s,"
            " next_attempt_at = clock_timestamp() + make_interval(secs => %s),"
            " claimed_until = NULL,"
            " done_at = CASE WHEN %s = 'pending' THEN NULL ELSE clock_timestamp() END"
            " WHERE delivery_id = %s",
            (Jsonb([msgspec.to_builtins(attempt)]), state, retry_in_s, state, delivery_id),
        )

    async def forget_settled(self, older_than_s: float, limit: int = 1000) -> int:
        """Delete up to `limit` deliveries settled more than `older_than_s` ago."""
        rows = await fetch_all(
            self.pool,
            "DELETE FROM runstream_webhooks WHERE delivery_id IN ("
            " SELECT delivery_id FROM runstream_webhooks"
            " WHERE done_at < clock_timestamp() - make_interval(secs => %s) LIMIT %s)"
            " RETURNING delivery_id",
            (older_than_s, limit),
        )
        return len(rows)
