"""A cron's schedule: a standard 5-field cron expression, read in UTC or the cron's timezone.

`cronsim` reads the expression as Debian's cron does (day-of-month and day-of-week both
restricted: either matches; daylight-saving transitions as cron handles them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from server.errors import ApiError

__all__ = ["checked_schedule", "checked_timezone", "next_run"]


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def checked_timezone(name: str | None) -> str | None:
    """An IANA timezone name the server knows, or 422."""
    if name is None:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise _unprocessable(f"timezone {name[:80]!r} is not a known IANA timezone") from None
    return name


def checked_schedule(schedule: str) -> str:
    """A 5-field cron expression that has a next slot (within 50 years), or 422 saying why."""
    fields = schedule.split()
    if len(fields) != 5:
        raise _unprocessable(
            f"schedule {schedule[:80]!r} is not a cron expression: it needs 5 fields"
            " (minute hour day-of-month month day-of-week), it has"
            f" {len(fields)}"
        )
    try:
        next(CronSim(schedule, datetime.now(UTC)))
    except CronSimError as exc:
        raise _unprocessable(
            f"schedule {schedule[:80]!r} is not a cron expression: {exc}"
        ) from None
    except StopIteration:
        raise _unprocessable(f"schedule {schedule[:80]!r} never comes round") from None
    return " ".join(fields)


_MAX_SLOTS_PASSED = 120  # an every-minute schedule over a repeated hour, twice over


def _local(moment: datetime, timezone: str | None) -> datetime:
    return moment.astimezone(ZoneInfo(timezone) if timezone else UTC)


def next_run(
    schedule: str, timezone: str | None, after: datetime, end_time: datetime | None
) -> datetime | None:
    """The schedule's first slot after `after`, in UTC; None when it comes after `end_time` (or
    not at all).

    cronsim counts in local wall-clock time: in the hour a timezone repeats when its clocks go
    back, it gives the hour's first reading, which can be before `after` (a scheduler would
    fire that slot again and again). Such slots are passed over.
    """
    try:
        slots = CronSim(schedule, _local(after, timezone))
        slot = next(slots).astimezone(UTC)
        for _ in range(_MAX_SLOTS_PASSED):
            if slot > after:
                break
            slot = next(slots).astimezone(UTC)
        else:
            return None
    except (CronSimError, StopIteration):
        return None
    if end_time is not None and slot > end_time:
        return None
    return slot
