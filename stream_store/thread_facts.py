"""What storage knows of a thread's state beside its own status, and names given by rules over
those facts, the same in Python and in SQL.

Storage keeps facts, not a dialect's words: a thread's own status (busy while a run is queued
or running, interrupted while one waits at its interrupt, else idle) and its latest started
run (`LatestRun`: that run's status, whether it was submitted with a breakpoint). A dialect
names threads by its own rules over them (`ThreadNaming`; LangGraph's: server/langgraph/
statuses.py); storage applies the rules in SQL, so a search filters and sorts by the name
before its page is cut, and the dialect in Python, for a thread it read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ["LATEST_RUN", "LatestRun", "ThreadFacts", "ThreadNaming"]


class LatestRun(msgspec.Struct, frozen=True):
    """The thread's latest run that started (a run cancelled before it started changes
    nothing): its status (None: no run started yet), and whether it was submitted with a
    breakpoint (`interrupt_before`/`after`, kept in its kwargs)."""

    status: str | None = None
    breakpoint: bool = False


# `LatestRun` as a column of a thread row aliased `t` (one subquery, as a JSON object).
LATEST_RUN = (
    "coalesce((SELECT jsonb_build_object('status', r.status, 'breakpoint', r.kwargs ? 'breakpoint')"
    " FROM runstream_runs r WHERE r.thread_id = t.thread_id AND r.started_at IS NOT NULL"
    """ ORDER BY r.created_at DESC LIMIT 1), '{"status": null, "breakpoint": false}'::jsonb)"""
)


@dataclass(frozen=True)
class ThreadFacts:
    """One rule's condition: each fact given must hold (None: any)."""

    status: str | None = None  # the thread's own status
    latest_status: str | None = None
    latest_breakpoint: bool | None = None

    def holds(self, status: str, latest: LatestRun) -> bool:
        return (
            self.status in (None, status)
            and self.latest_status in (None, latest.status)
            and self.latest_breakpoint in (None, latest.breakpoint)
        )

    def sql(self, row: str) -> tuple[str, list[Any]]:
        """The condition on the columns `status` and `latest_run` of `row`, with its params."""
        terms: list[str] = []
        params: list[Any] = []
        if self.status is not None:
            terms.append(f"{row}.status = %s")
            params.append(self.status)
        if self.latest_status is not None:
            terms.append(f"{row}.latest_run ->> 'status' = %s")
            params.append(self.latest_status)
        if self.latest_breakpoint is not None:
            terms.append(f"({row}.latest_run -> 'breakpoint') = %s::jsonb")
            params.append("true" if self.latest_breakpoint else "false")
        return " AND ".join(terms) or "true", params


@dataclass(frozen=True)
class ThreadNaming:
    """A dialect's names for threads: the first rule whose facts hold names the thread, else
    `otherwise`."""

    rules: tuple[tuple[str, ThreadFacts], ...]
    otherwise: str

    def name(self, status: str, latest: LatestRun) -> str:
        for name, facts in self.rules:
            if facts.holds(status, latest):
                return name
        return self.otherwise

    def sql(self, row: str) -> tuple[str, list[Any]]:
        """The name as an SQL expression over `row`'s `status` and `latest_run`, with its
        params."""
        cases: list[str] = []
        params: list[Any] = []
        for name, facts in self.rules:
            condition, condition_params = facts.sql(row)
            cases.append(f"WHEN {condition} THEN %s::text")
            params += [*condition_params, name]
        return f"(CASE {' '.join(cases)} ELSE %s::text END)", [*params, self.otherwise]
