"""Fires LangGraph's crons: each server process runs one `CronScheduler`, and of several only
one fires a given slot.

Every `interval_s` it claims the due crons one at a time (`CronRecords.claim_due`: FOR UPDATE
SKIP LOCKED, then a lease) and submits each one's run through the LangGraph routes' own
submit (`submit.submit_scheduled`), under an idempotency key made of the cron's id and the
slot. Only then does the cron move to its next slot. A scheduler that dies between the two
leaves the claim to lapse; the slot is claimed again and its submit answers the run already
recorded, so a slot never fires twice. Slots missed while no server ran fire once: the cron
moves to its first slot after now, not the one after the missed slot.

A pass claims in rounds, one cron per owner a round (the owner's due longest ago): an owner
with a hundred crons due at one slot does not go before every other owner's one.

A slot the submit refuses (the thread busy and `multitask_strategy` `reject`, the owner's
limits, the graph no longer registered) is skipped, and logged. One that meets Postgres or
Redis unavailable is claimed again on a later pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import msgspec
import structlog

from server.callers.quotas import CallerQuotas
from server.errors import ApiError
from server.resources import Resources
from stream_store.cron_records import CronRecord, CronRecords
from stream_store.errors import StoreError, StoreUnavailable

from .schedules import next_run
from .submit import submit_scheduled
from .wire import RunCreate

__all__ = ["CronScheduler", "running_scheduler", "slot_key"]

logger = structlog.get_logger()

Clock = Callable[[], datetime]
# How long a claim holds a cron for its scheduler: far longer than a submit takes. A claim of
# a scheduler that died lapses after it, and the slot fires then (late, and once).
CLAIM_LEASE_S = 60.0


def _utc_now() -> datetime:
    return datetime.now(UTC)


def slot_key(cron_id: str, slot: datetime) -> str:
    """The idempotency key of a cron's run for one slot."""
    return f"cron:{cron_id}:{slot.astimezone(UTC).isoformat()}"


class CronScheduler:
    """Fires the crons that are due by `clock` (injectable: tests move time on)."""

    def __init__(
        self,
        resources: Resources,
        quotas: CallerQuotas,
        *,
        interval_s: float = 1.0,
        clock: Clock = _utc_now,
        lease_s: float = CLAIM_LEASE_S,
    ) -> None:
        self.resources = resources
        self.quotas = quotas
        self.records: CronRecords = resources.cron_records
        self.interval_s = interval_s
        self.clock = clock
        self.lease_s = lease_s

    async def tick(self) -> int:
        """Fire every cron due now that no other scheduler holds, one per owner a round; how
        many were claimed."""
        claimed = 0
        turns: set[str] = set()  # the owners whose cron fired in this round
        while True:
            cron = await self.records.claim_due(self.clock(), self.lease_s, skip_owners=turns)
            if cron is None:
                if not turns:
                    return claimed
                turns.clear()  # everyone due had a turn: the next round
                continue
            claimed += 1
            turns.add(cron.owner)
            await self._fire(cron)

    async def _fire(self, cron: CronRecord) -> None:
        assert cron.next_run_date is not None  # a claimed cron is due
        slot = cron.next_run_date
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(cron_id=cron.cron_id, slot=slot.isoformat())
        with self.resources.tracer.start_as_current_span(
            "fire cron", attributes={"runstream.cron_id": cron.cron_id}
        ):
            try:
                body = msgspec.convert(cron.payload, RunCreate)
                created = await submit_scheduled(
                    self.resources,
                    self.quotas,
                    cron.owner,
                    body,
                    cron.thread_id,
                    slot_key(cron.cron_id, slot),
                )
            except StoreUnavailable as exc:
                logger.warning("cron slot not fired; it is tried again", error=str(exc))
                await self.records.release(cron.cron_id, self.interval_s)
                return
            except (StoreError, ApiError, msgspec.ValidationError) as exc:
                logger.warning("cron slot skipped: its run was refused", error=str(exc))
            except Exception:
                logger.exception("cron slot skipped: its submit failed")
            else:
                replayed = " (recorded before)" if not created.created else ""
                logger.info(f"cron fired{replayed}", run_id=created.run.run_id)
        await self.records.advance(cron, self._next_slot)

    def _next_slot(self, cron: CronRecord) -> datetime | None:
        return next_run(cron.schedule, cron.timezone, self.clock(), cron.end_time)

    async def run_forever(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # storage unreachable: the next pass tries again
                logger.warning("cron scheduler pass failed", error=str(exc))
            await asyncio.sleep(self.interval_s)


@contextlib.asynccontextmanager
async def running_scheduler(
    resources: Resources, quotas: CallerQuotas, interval_s: float
) -> AsyncIterator[CronScheduler | None]:
    """A scheduler running in the background while this is open; none with `interval_s` 0
    (RUNSTREAM_CRON_INTERVAL_MS=0: this process fires no crons)."""
    if interval_s <= 0:
        yield None
        return
    scheduler = CronScheduler(resources, quotas, interval_s=interval_s)
    task = asyncio.create_task(scheduler.run_forever(), name="cron scheduler")
    try:
        yield scheduler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
