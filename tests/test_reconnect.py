"""Guarantee 1: a client that reconnects with the last id it saw gets exactly the rest."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from runner.job_loop import JobLoop
from tests.sse import Received, read_events, reassemble
from tests.test_runs import submit

TEXT = " ".join(f"word{i}" for i in range(40))


async def finished_run(client: httpx.AsyncClient) -> tuple[str, list[Received]]:
    run = await submit(client, text=TEXT)
    events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
    assert events[-1].event == "done"
    return run["run_id"], events


class TestReconnectFinishedRun:
    """Reconnecting to a finished run with Last-Event-ID replays exactly what follows it."""

    @pytest.mark.parametrize("k", [0, 1, 2, 5, 20, -2, -1])
    async def test_reconnect_with_header_gets_exactly_the_rest(
        self, client: httpx.AsyncClient, worker: JobLoop, k: int
    ) -> None:
        run_id, full = await finished_run(client)
        k = k % len(full) if k < 0 else k
        first = await read_events(client, f"/v1/runs/{run_id}/events", limit=k)
        assert first == full[:k]
        headers = {"Last-Event-ID": first[-1].id} if first else {}
        rest = await read_events(client, f"/v1/runs/{run_id}/events", headers=headers)
        assert first + rest == full

    async def test_reconnect_with_query_parameter_gets_exactly_the_rest(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run_id, full = await finished_run(client)
        for k in (1, 7, len(full) - 1):
            rest = await read_events(
                client, f"/v1/runs/{run_id}/events", params={"last_event_id": full[k - 1].id}
            )
            assert rest == full[k:]

    async def test_header_wins_over_query_parameter(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run_id, full = await finished_run(client)
        rest = await read_events(
            client,
            f"/v1/runs/{run_id}/events",
            headers={"Last-Event-ID": full[10].id},
            params={"last_event_id": full[2].id},
        )
        assert rest == full[11:]

    async def test_reconnect_after_the_terminal_event_gets_nothing_and_ends(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run_id, full = await finished_run(client)
        rest = await read_events(
            client, f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": full[-1].id}
        )
        assert rest == []


class TestReconnectLiveRun:
    """Disconnecting mid-run, even mid-message, and coming back loses and repeats nothing."""

    @pytest.mark.parametrize("k", [0, 1, 3, 4, 12, 30])
    async def test_reconnect_mid_run_skips_nothing(
        self, client: httpx.AsyncClient, worker: JobLoop, k: int
    ) -> None:
        run = await submit(client, text=TEXT, config={"configurable": {"fake_token_delay_ms": 15}})
        url = f"/v1/runs/{run['run_id']}/events"
        seen = await read_events(client, url, limit=k)
        status = (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"]
        if k >= 4:  # the model was still streaming when the client left
            assert status == "running"
            assert seen[-1].event in ("token", "message")
        await asyncio.sleep(0.05)  # events keep coming while the client is away
        headers = {"Last-Event-ID": seen[-1].id} if seen else {}
        rest = await read_events(client, url, headers=headers)
        everything = seen + rest
        assert everything == await read_events(client, url)
        assert everything[-1].event == "done"
        assert list(reassemble(everything).values()) == [TEXT]

    async def test_many_reconnects_during_one_run_reassemble_the_message(
        self, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = await submit(client, text=TEXT, config={"configurable": {"fake_token_delay_ms": 5}})
        url = f"/v1/runs/{run['run_id']}/events"
        collected: list[Received] = []
        while not collected or collected[-1].event != "done":
            headers = {"Last-Event-ID": collected[-1].id} if collected else {}
            collected += await read_events(client, url, headers=headers, limit=3)
        assert collected == await read_events(client, url)
        assert list(reassemble(collected).values()) == [TEXT]
