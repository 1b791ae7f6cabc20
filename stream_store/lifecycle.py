"""Every change of a run's status, each written once: the Postgres update, then its events.

The rule every transition keeps: Postgres (the system of record) changes first, by a
conditional UPDATE that only one of several racing processes can win; only the winner writes
the events that announce it, and the last of those events is remembered as the run's
`last_event_id`. A viewer that sees a status event can therefore always read that status back,
and a crash between the two steps leaves a state the reaper completes (`repair`).

The server's own transitions (submit, cancel of an idle run, resume) go to Redis inside the
Postgres transaction, after its UPDATE and before its COMMIT: a Redis that refuses (at
`maxmemory`) rolls the transition back, so the caller's 503 means nothing changed. A submit
opens its stream there (nobody can read a run before its commit; a failed commit deletes the
stream again); a cancel or resume only reserves its status event there (`EventLog.reserve`) and
writes it after the commit, so that a commit that fails once Redis said yes leaves no status
its viewers saw and Postgres never had.

Which process calls what:

    server   submit, cancel, resume, end_interrupted
    worker   claim, start, interrupt, finish, announce_retry
    reaper   requeue (or exhaust), repair, restore_stream

Every transition is here, and only here, so that each keeps the rule above the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from wire.events import (
    DoneData,
    ErrorData,
    PendingData,
    RetryData,
    RunStatus,
    RunStatusData,
    WireMessage,
    decode_data,
    encode_data,
)

from .errors import Conflict, Fenced, StoreUnavailable, StreamGone
from .live_record import Claimed
from .log import EventLog
from .queue import RunQueue
from .run_records import RunRecord, RunRecords
from .run_status import ACTIVE, TERMINAL
from .run_submit import Created, NewRun, RunSubmitter
from .thread_records import DeletedRun

__all__ = ["RetryPlan", "RunLifecycle"]

logger = structlog.get_logger()


@dataclass(frozen=True)
class RetryPlan:
    """What clients must be told when a new attempt starts over an old one's stream."""

    discard: list[str]  # ids of messages whose partial tokens clients drop
    resend: Sequence[tuple[str, Any]]  # (event, data) that give the kept messages whole


PlanRetry = Callable[[RunRecord], Awaitable[RetryPlan]]


class RunLifecycle:
    """The transitions of a run; one instance per process, over its records and event log."""

    def __init__(
        self,
        run_records: RunRecords,
        submitter: RunSubmitter,
        events: EventLog,
        queue: RunQueue,
        *,
        lease_s: float,
        max_attempts: int,
    ) -> None:
        self.run_records = run_records
        self.submitter = submitter
        self.events = events
        self.queue = queue
        self.max_attempts = max_attempts
        # Long enough for one reaper to write an outcome; short enough that another one
        # finishes the job soon if that reaper dies.
        self.repair_lock_s = max(5.0, 5 * lease_s)

    # -- events ------------------------------------------------------------------------------

    async def _event(
        self,
        run: RunRecord,
        attempt: int,
        event: str,
        data: Any,
        *,
        status: RunStatus | None = None,
        settled: bool = False,
        expect_status: RunStatus | None = None,
    ) -> str:
        return await self.events.append(
            run.run_id,
            attempt,
            event,
            encode_data(data),
            status=status,
            settled=settled,
            expect_status=expect_status,
        )

    async def _status(
        self,
        run: RunRecord,
        attempt: int,
        status: RunStatus,
        *,
        settled: bool = False,
        expect_status: RunStatus | None = None,
    ) -> str:
        data = RunStatusData(status=status, attempt=attempt)
        return await self._event(
            run, attempt, "run", data, status=status, settled=settled, expect_status=expect_status
        )

    async def _outcome(self, run: RunRecord, attempt: int, *, settled: bool = False) -> None:
        """The status event and the terminal event of a finished `run`, then its last id."""
        try:
            await self._status(run, attempt, run.status, settled=settled)
        except StreamGone:
            if settled:
                raise  # the worker's own stream: it was fenced out
            # An interrupted run's stream expired (RUNSTREAM_INTERRUPTED_TTL) before it was
            # cancelled or superseded: nobody to tell, as when the reaper sweeps an outcome.
            await self.run_records.set_last_event_id(run.run_id, "0-0")
            return
        if run.status == RunStatus.FAILED:
            error = run.error or {}
            data: Any = ErrorData(
                code=str(error.get("code", "failed")),
                message=str(error.get("message", "the run failed")),
            )
            last = await self._event(run, attempt, "error", data, settled=settled)
        else:
            output = msgspec.convert(run.output, WireMessage) if run.output else None
            done = DoneData(status=run.status, output=output)  # type: ignore[arg-type]
            last = await self._event(run, attempt, "done", done, settled=settled)
        await self.run_records.set_last_event_id(run.run_id, last)

    async def _pending(
        self,
        run: RunRecord,
        attempt: int,
        *,
        settled: bool = False,
        interrupt_id: str | None = None,
    ) -> None:
        """The `pending` event and `interrupted` status of an interrupted `run`."""
        pending = PendingData(interrupt=run.interrupt, interrupt_id=interrupt_id)
        await self._event(run, attempt, "pending", pending, settled=settled)
        last = await self._status(run, attempt, RunStatus.INTERRUPTED, settled=settled)
        await self.run_records.set_last_event_id(run.run_id, last)

    # -- server ------------------------------------------------------------------------------

    async def submit(self, new: NewRun) -> Created:
        """Record the run with its stream open, then hand it to the workers if it may start.

        A run that starts at once and ends no other run has its job queued beside its stream's
        opening (the two in parallel), before the commit, so that the worker's wake-up and read
        overlap the commit; its claim waits for the commit (`RUN_SUBMIT_LOCK`). Other runs are
        queued after the commit, once the runs they end have their outcome. A failed enqueue
        does not fail the submit: the run is recorded and its stream open, and the reaper
        enqueues queued runs that have no job.
        """

        opened: list[str] = []

        def queued_before_commit(created: Created) -> bool:
            return (
                created.dispatch_now
                and not created.superseded
                and new.multitask not in ("interrupt", "rollback")
            )

        async def open_stream(created: Created) -> None:
            run = created.run
            status = RunStatusData(status=RunStatus.QUEUED, attempt=run.attempt)
            opening = self.events.open(
                run.run_id,
                owner=run.owner,
                thread_id=run.thread_id,
                attempt=run.attempt,
                event="run",
                data=encode_data(status),
            )
            opened.append(run.run_id)  # dropped if the submit fails (dropping none is harmless)
            if queued_before_commit(created):
                await asyncio.gather(opening, self._enqueue(run))
            else:
                await opening

        try:
            created = await self.submitter.create_run(new, before_commit=open_stream)
        except Exception:
            await self._drop_opened(opened)
            raise
        for ended in created.superseded:
            await self._outcome(ended, ended.attempt)
            logger.info("interrupted run ended by a new run", run_id=ended.run_id)
        if created.created and new.multitask in ("interrupt", "rollback"):
            await self._cancel_others(created.run, rollback=new.multitask == "rollback")
        if created.dispatch_now and not queued_before_commit(created):
            await self._enqueue(created.run)
        return created

    async def _enqueue(self, run: RunRecord) -> None:
        """The run's job queued; a failure logged only: the reaper queues a queued run that has
        no job."""
        try:
            await self.queue.enqueue(run)
        except StoreUnavailable as exc:
            logger.warning(
                "enqueue failed; the reaper will retry it", run_id=run.run_id, error=str(exc)
            )

    async def _drop_opened(self, run_ids: list[str]) -> None:
        """The streams a submit opened before its commit failed: nobody can know those runs.
        (A commit that went through after all, the connection lost before its answer, leaves a
        queued run without its stream, which the reaper rebuilds, as after a loss of Redis.)"""
        if not run_ids:
            return
        try:
            await self.events.delete(run_ids)
        except StoreUnavailable as exc:
            logger.warning("submit failed; its stream is left behind", error=str(exc))

    async def _cancel_others(self, run: RunRecord, *, rollback: bool) -> None:
        """Multitask `interrupt` and `rollback`: cancel the thread's other active runs (and
        with `rollback`, remove them and what they wrote); `run` starts after."""
        for other in await self.run_records.thread_runs(run.thread_id, run.owner):
            if other.run_id != run.run_id and other.status in ACTIVE:
                with contextlib.suppress(Conflict):  # it finished meanwhile
                    await self.cancel(other, rollback=rollback)

    async def _roll_back(self, run: RunRecord) -> None:
        """A cancelled run whose canceller asked for LangGraph's rollback goes, with the
        checkpoints it wrote. Its stream stays until its TTL: viewers still see it end."""
        if run.status == RunStatus.CANCELLED and run.kwargs.get("rollback"):
            await self.run_records.roll_back_run(run.run_id, run.thread_id)
            logger.info("run rolled back", run_id=run.run_id)

    async def cancel(self, run: RunRecord, *, rollback: bool = False) -> RunRecord:
        """Cancel a queued or interrupted run at once, or ask the worker running it to stop.

        With `rollback`, the run is deleted once cancelled, with the checkpoints it wrote. The
        `run`/`cancelled` event is reserved before the cancel commits and written after: a
        Redis that refuses it (at `maxmemory`) rolls the cancel back, and the caller gets 503
        with nothing changed; a commit that fails leaves the stream as it was.

        Raises:
            Conflict: the run already finished.
            StoreUnavailable: Redis or Postgres refused; the run is as it was.
        """
        if run.status in TERMINAL:
            raise Conflict(f"run {run.run_id} already {run.status}", code="run_finished")
        marked = rollback and not run.kwargs.get("rollback")
        if marked:
            await self.run_records.ask_rollback(run.run_id)

        async def reserve(cancelled: RunRecord) -> None:
            with contextlib.suppress(StreamGone):  # an expired interrupt: `_outcome` says so
                await self.events.reserve(cancelled.run_id, cancelled.attempt)

        try:
            cancelled = await self.run_records.cancel_idle_run(
                run.run_id, run.owner, before_commit=reserve
            )
            if cancelled is None:
                # Running (or just claimed): the worker that holds it stops it and writes the
                # outcome.
                await self.events.request_cancel(run.run_id)
        except StoreUnavailable:
            if marked:
                with contextlib.suppress(StoreUnavailable):
                    await self.run_records.ask_rollback(run.run_id, wanted=False)
            raise
        if cancelled is None:
            logger.info("cancel requested from the worker")
            return await self.run_records.get_run(run.run_id, run.owner) or run
        try:
            await self._outcome(cancelled, cancelled.attempt)
        except (StoreUnavailable, Fenced) as exc:
            # Cancelled: the reaper writes its events (`repair`) later, or (fenced) is already.
            logger.warning("cancel recorded; the reaper will finish its events", error=str(exc))
        await self._roll_back(cancelled)
        try:
            await self.queue.dispatch_next(cancelled.thread_id)
        except StoreUnavailable as exc:
            logger.warning("enqueue failed; the reaper will retry it", error=str(exc))
        logger.info("run cancelled")
        return cancelled

    async def resume(self, run: RunRecord, value: Any) -> RunRecord:
        """Queue an interrupted run again with the answer to its interrupt.

        The `run`/`queued` event is reserved before the resume commits and written after: a
        Redis that refuses it (at `maxmemory`) rolls the resume back, and the caller gets 503
        with nothing changed; a commit that fails leaves the stream as it was. A failed write
        or enqueue after the commit is left to the reaper, as for a submit.

        Raises:
            Conflict: the run is not interrupted.
            StoreUnavailable: Redis or Postgres refused; the run is still interrupted.
        """
        gone = False

        async def reserve(resumed: RunRecord) -> None:
            nonlocal gone
            try:
                await self.events.reserve(resumed.run_id, resumed.attempt)
            except StreamGone:  # RUNSTREAM_INTERRUPTED_TTL passed (or Redis lost it): a new one
                gone = True

        resumed = await self.run_records.resume_run(
            run.run_id, run.owner, value, before_commit=reserve
        )
        if resumed is None:
            raise Conflict(
                f"run {run.run_id} is {run.status}, not interrupted", code="run_not_interrupted"
            )
        await self._tell_resumed(resumed, restore=gone)
        try:
            await self.queue.enqueue(resumed)
        except StoreUnavailable as exc:
            logger.warning("enqueue failed; the reaper will retry it", error=str(exc))
        logger.info("run resumed")
        return resumed

    async def _tell_resumed(self, resumed: RunRecord, *, restore: bool) -> None:
        """`run`/`queued` once the resume committed, or a new stream if the old one is gone.

        Only over `interrupted`: the reaper may enqueue the queued run as soon as it committed,
        and an attempt that already said `running` must not be followed by `queued` (which would
        also drop its lease). Left out when Redis fails here: that attempt's `running` says it,
        and the reaper rebuilds a stream that is missing.
        """
        try:
            if not restore:
                try:
                    await self._status(
                        resumed,
                        resumed.attempt,
                        RunStatus.QUEUED,
                        expect_status=RunStatus.INTERRUPTED,
                    )
                    return
                except StreamGone:
                    pass
            await self.restore_stream(resumed)
        except Fenced as exc:
            logger.info(
                "resumed run already started; its queued status is left out", error=str(exc)
            )
        except StoreUnavailable as exc:
            logger.warning("resume recorded; its queued status is left out", error=str(exc))

    async def end_interrupted(self, thread_id: str) -> list[RunRecord]:
        """End the thread's interrupted run as succeeded, as a LangGraph submit supersedes it:
        for a state update that left its graph nothing to run (LangGraph's thread is idle)."""
        ended = await self.submitter.end_interrupted(thread_id)
        for run in ended:
            await self._outcome(run, run.attempt)
            logger.info("interrupted run ended by a state update", run_id=run.run_id)
        return ended

    async def tell_deleted(self, runs: Sequence[DeletedRun]) -> None:
        """Runs deleted with their thread while they waited at an interrupt, or were queued or
        running (LangGraph's thread delete cancels them): nothing will resume or finish them,
        so their viewers get `cancelled` and the end (as when LangGraph's thread delete cancels
        them first) before the streams go. The end also fences a worker still running one: the
        stream takes nothing after it (`_fence.lua`), and the worker is told to stop. Written
        as settled: the delete has committed, whatever the worker's lease. A stream already
        ended or gone, or Redis refusing, leaves viewers to find the run gone on their next
        attach."""
        cancelled = RunStatus.CANCELLED
        for run in runs:
            status = encode_data(RunStatusData(status=cancelled, attempt=run.attempt))
            done = encode_data(DoneData(status=cancelled, output=None))  # type: ignore[arg-type]
            with contextlib.suppress(StreamGone, Fenced, StoreUnavailable):
                await self.events.append(
                    run.run_id, run.attempt, "run", status, status=cancelled, settled=True
                )
                await self.events.append(run.run_id, run.attempt, "done", done, settled=True)
            if run.active:
                with contextlib.suppress(StoreUnavailable):
                    await self.events.request_cancel(run.run_id)

    # -- worker ------------------------------------------------------------------------------

    async def claim(self, run_id: str, attempt_traceparent: str | None = None) -> RunRecord | None:
        """queued -> running in Postgres for the worker that got the job; None if not ours.
        `start` then takes the attempt's lease and says `running`.

        The run's `attempt_traceparent` is then the previous attempt's (`RunRecords.claim_run`).
        """
        run = await self.run_records.claim_run(run_id, attempt_traceparent)
        if run is None:
            logger.info("run not claimable, skipping", run_id=run_id)
        return run

    async def start(
        self, run: RunRecord, plan_retry: PlanRetry, *, lease_s: float, worker: str = ""
    ) -> bool:
        """The claimed attempt begins: its lease (noting `worker`, its id, in the live record
        for the reaper), its `retry` announcement if nobody wrote it, then `running`. False,
        with the lease taken and nothing written, when a cancel was requested meanwhile.

        Lease, cancel check and `running` are one script call (`EventLog.claim`); a retried
        attempt whose announcement is missing (the reaper died first) takes two more.

        Raises:
            Fenced, StreamGone: the attempt cannot take the run; nothing was written.
        """
        running = encode_data(RunStatusData(status=RunStatus.RUNNING, attempt=run.attempt))
        claimed = await self.events.claim(run.run_id, run.attempt, lease_s, running, worker)
        if claimed is Claimed.CANCELLED:
            return False
        if claimed is Claimed.RETRY:
            await self.announce_retry(run, await plan_retry(run))
            await self._status(run, run.attempt, RunStatus.RUNNING)
        return True

    async def interrupt(self, run: RunRecord, value: Any, interrupt_id: str | None = None) -> bool:
        """running -> interrupted; False when the attempt no longer held the run."""
        interrupted = await self.run_records.interrupt_run(
            run.run_id, run.attempt, value, interrupt_id
        )
        if interrupted is None:
            logger.warning("run changed hands before it paused; writing nothing")
            return False
        await self._pending(interrupted, run.attempt, settled=True, interrupt_id=interrupt_id)
        logger.info("run interrupted")
        return True

    async def finish(
        self,
        run: RunRecord,
        status: RunStatus,
        *,
        output: WireMessage | None = None,
        error: dict[str, str] | None = None,
    ) -> bool:
        """running -> succeeded, failed or cancelled; False when the attempt lost the run.

        The caller has written every event the attempt emitted before this: the outcome's
        events are the stream's last.
        """
        done = await self.run_records.finish_run(
            run.run_id,
            run.attempt,
            status,
            output=msgspec.to_builtins(output) if output is not None else None,
            error=error,
        )
        if done is None:
            logger.warning("run changed hands before it finished; writing nothing", status=status)
            return False
        await self._outcome(done, run.attempt, settled=True)
        logger.info("run finished", status=status)
        await self._roll_back(done)
        return True

    async def announce_retry(self, run: RunRecord, plan: RetryPlan) -> None:
        """Write the `retry` event of `run.attempt` and re-send the messages it keeps whole."""
        retry = RetryData(attempt=run.attempt, discard=plan.discard)
        await self._event(run, run.attempt, "retry", retry)
        for event, data in plan.resend:
            await self._event(run, run.attempt, event, data)

    # -- reaper ------------------------------------------------------------------------------

    async def requeue(self, run: RunRecord, reason: str, plan_retry: PlanRetry) -> None:
        """Queue attempt `run.attempt + 1` (the stream already fenced `run.attempt` out), or
        fail the run with `attempts_exhausted` when none are left."""
        following = run.attempt + 1
        log = logger.bind(run_id=run.run_id, thread_id=run.thread_id, attempt=following)
        if following > self.max_attempts:
            error = {
                "code": "attempts_exhausted",
                "message": f"gave up after {run.attempt} attempts; the last one ended: {reason}",
            }
            failed = await self.run_records.fail_attempts_exhausted(run.run_id, run.attempt, error)
            if failed is None:
                await self.repair(run.run_id)
                return
            await self._outcome(failed, following)
            await self.queue.dispatch_next(run.thread_id)
            log.warning("run failed: attempts exhausted", reason=reason)
            return
        queued = await self.run_records.requeue_attempt(run.run_id, run.attempt)
        if queued is None:
            await self.repair(run.run_id)
            return
        plan = await plan_retry(queued)
        await self.announce_retry(queued, plan)
        await self._status(queued, following, RunStatus.QUEUED)
        await self.queue.enqueue(queued)
        log.warning("run re-queued", reason=reason, discard=len(plan.discard))

    async def repair(self, run_id: str) -> None:
        """Postgres holds the run's outcome but its stream was never told: tell it.

        The caller has fenced the old attempt out of the stream; the events are written as the
        live record's current attempt, once: under a lock, as every worker's reaper may find
        the run in the same pass.

        Not while an attempt holds the run's lease: a reaper that read the run before another
        one handed it to that attempt would otherwise write the outcome the attempt is writing
        (and fence it out of its own). If that attempt dies, its lease runs out and a later pass
        repairs the run.
        """
        held = await self.events.live_record(run_id)
        if held is not None and await self.events.lease_held(run_id, held):
            return
        if not await self.events.lock_repair(run_id, self.repair_lock_s):
            return
        run = await self.run_records.get_run(run_id)
        record = await self.events.live_record(run_id)
        if run is None or record is None:
            return
        last = await self.events.last_event(run_id)
        if run.status in TERMINAL:
            if last is not None and last.terminal:
                await self.run_records.set_last_event_id(run_id, last.id)
                return
            await self._outcome(run, record.attempt)
            await self.queue.dispatch_next(run.thread_id)
        elif run.status == RunStatus.INTERRUPTED:
            await self.run_records.set_attempt(run_id, record.attempt)
            said_interrupted = (
                last is not None
                and last.event == "run"
                and decode_data(last.data).get("status") == RunStatus.INTERRUPTED
            )
            if said_interrupted and last is not None:
                await self.run_records.set_last_event_id(run_id, last.id)
            else:
                await self._pending(run, record.attempt)
        else:
            return
        logger.warning("run stream repaired from postgres", run_id=run_id, status=run.status)

    async def restore_stream(self, run: RunRecord) -> None:
        """Redis lost the run's record and stream: start a new one, opened by a `retry` event.

        A run that was running gets a new attempt (its worker's writes are fenced out by the
        new record's attempt); queued and interrupted runs say their status again.
        """
        running = run.status == RunStatus.RUNNING
        attempt = run.attempt + 1 if running else run.attempt
        await self.events.open(
            run.run_id,
            owner=run.owner,
            thread_id=run.thread_id,
            attempt=attempt,
            event="retry",
            data=encode_data(RetryData(attempt=attempt, discard=[])),
            status=run.status,
        )
        logger.warning("run stream restored after redis lost it", run_id=run.run_id)
        if running:
            queued = await self.run_records.requeue_attempt(run.run_id, run.attempt)
            if queued is None:
                await self.repair(run.run_id)
                return
            await self._status(queued, queued.attempt, RunStatus.QUEUED)
            await self.queue.enqueue(queued)
        elif run.status == RunStatus.QUEUED:
            await self._status(run, attempt, RunStatus.QUEUED)
        elif run.status == RunStatus.INTERRUPTED:
            await self._pending(run, attempt)
