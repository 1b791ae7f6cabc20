"""LangGraph's thread status is one set of rules over storage's facts, named the same in Python
(a thread read) and in Postgres (a search's filter and sort)."""

from __future__ import annotations

import itertools

import psycopg
from psycopg.types.json import Jsonb

from server.langgraph.statuses import THREAD_STATUS
from stream_store.settings import Settings
from stream_store.thread_facts import LatestRun
from wire.run_status import RunStatus


def langgraph_thread_status(status: str, latest: LatestRun) -> str:
    """LangGraph's server's thread status, written out case by case (docs/langgraph.md)."""
    if status in ("busy", "interrupted"):  # a run queued or running; one at its interrupt
        return status
    if latest.status == RunStatus.FAILED:
        return "error"
    if latest.status == RunStatus.CANCELLED or latest.breakpoint:
        return "interrupted"
    return "idle"


FACTS = [
    (status, LatestRun(status=latest, breakpoint=breakpoint))
    for status, latest, breakpoint in itertools.product(
        ["busy", "interrupted", "idle"], [None, *RunStatus], [False, True]
    )
    if latest is not None or not breakpoint  # no started run, no breakpoint
]


class TestThreadStatus:
    def test_every_combination_of_facts_is_named_as_langgraph_names_it(self) -> None:
        for status, latest in FACTS:
            expected = langgraph_thread_status(status, latest)
            assert THREAD_STATUS.name(status, latest) == expected, (status, latest)

    async def test_postgres_names_every_combination_as_python_does(
        self, settings: Settings
    ) -> None:
        name, params = THREAD_STATUS.sql("facts")
        async with await psycopg.AsyncConnection.connect(str(settings.database_url)) as conn:
            for status, latest in FACTS:
                row = {"status": latest.status, "breakpoint": latest.breakpoint}
                cur = await conn.execute(
                    f"SELECT {name} FROM (SELECT %s::text AS status, %s::jsonb AS latest_run)"
                    " facts",
                    [*params, status, Jsonb(row)],
                )
                found = await cur.fetchone()
                assert found is not None
                assert found[0] == THREAD_STATUS.name(status, latest), (status, latest)
