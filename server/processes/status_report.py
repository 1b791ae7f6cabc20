"""`runstream status` as plain text: what `server.processes.status` gathered, laid out for an
operator, with what to look at first."""

from __future__ import annotations

from datetime import datetime

from clients.tables import ago, duration, table
from stream_store.workers import WorkerBeat

from .status import DeploymentStatus, QueueState, ServiceHealth, StuckRun

__all__ = ["render_status"]


def _service_line(name: str, health: ServiceHealth) -> list[object]:
    if health.ok:
        return [name, "ok", health.url, f"{health.rtt_ms:.1f} ms"]
    return [name, "DOWN", health.url, health.error]


def _workers(workers: list[WorkerBeat] | None, now: datetime) -> list[str]:
    if workers is None:
        return ["workers: unknown (Redis did not answer)"]
    out = [f"workers: {len(workers)} alive"]
    if not workers:
        return out
    rows = [
        [
            beat.worker_id,
            beat.host,
            beat.pid,
            f"{len(beat.run_ids)}/{beat.concurrency}",
            duration((now - beat.started_at).total_seconds()),
            ago(beat.beat_at, now),
        ]
        for beat in workers
    ]
    out.append(table(["WORKER", "HOST", "PID", "RUNS", "UP", "LAST BEAT"], rows))
    running = [(run_id, b.worker_id) for b in workers for run_id in b.run_ids]
    if running:
        out += ["", f"running on workers ({len(running)}):"]
        out.append(table(["RUN", "WORKER"], running))
    return out


def _queue(queue: QueueState | None, now: datetime) -> list[str]:
    if queue is None:
        return ["runs: unknown (Postgres did not answer)"]
    jobs = "unknown" if queue.jobs is None else str(queue.jobs)
    out = [
        f"runs: {queue.queued} queued ({queue.waiting_on_thread} behind another run of"
        f" their thread), {queue.running} running, {queue.interrupted} interrupted",
        f"arq queue: {jobs} job(s), waiting or in progress",
    ]
    oldest = queue.oldest_queued
    if oldest is not None:
        out.append(
            f"oldest queued: run {oldest.run_id} (owner {oldest.owner}, attempt"
            f" {oldest.attempt}), queued {ago(oldest.queued_at, now)}"
        )
    return out


def _stuck(stuck: list[StuckRun] | None, now: datetime) -> list[str]:
    if not stuck:
        return []
    rows = [
        [
            run.run_id,
            run.owner,
            run.attempt,
            ago(run.claimed_at, now),
            run.reason + (f" {duration(run.lease_expired_s)} ago" if run.lease_expired_s else ""),
        ]
        for run in stuck
    ]
    return [
        "",
        f"stuck past their lease ({len(stuck)}):",
        table(["RUN", "OWNER", "ATTEMPT", "CLAIMED", "WHY"], rows),
    ]


def _warnings(status: DeploymentStatus) -> list[str]:
    """What to look at first: services down, queued or stuck runs with no worker to take them."""
    warnings = []
    services = (("Redis", status.redis), ("Postgres", status.postgres))
    down = [name for name, health in services if not health.ok]
    if down:
        verb = "is" if len(down) == 1 else "are"
        warnings.append(f"{' and '.join(down)} {verb} down: servers answer 503, workers wait")
    if status.workers == [] and status.queue is not None and status.queue.queued:
        warnings.append("no worker is alive: queued runs wait (start `runstream worker`)")
    if status.stuck and status.workers == []:
        warnings.append("stuck runs are retried by any live worker's reaper: none is alive")
    return ["", *(f"! {warning}" for warning in warnings)] if warnings else []


def render_status(status: DeploymentStatus) -> str:
    """The report as plain text: services, workers, queue, stuck runs, and what to look at."""
    now = status.checked_at
    out = [
        f"runstream status  (redis prefix {status.redis_prefix},"
        f" schema {status.database_schema}, lease {status.lease_s:g} s)",
        "",
        table(
            ["SERVICE", "STATE", "URL", "ROUND TRIP / ERROR"],
            [_service_line("redis", status.redis), _service_line("postgres", status.postgres)],
        ),
        "",
        *_workers(status.workers, now),
        "",
        *_queue(status.queue, now),
        *_stuck(status.stuck, now),
        *_warnings(status),
    ]
    return "\n".join(out)
