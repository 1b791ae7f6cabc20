"""Many viewers of one run, in one server process or several, see the same sequence."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from runner.job_loop import JobLoop
from server.streaming.attach import BlockedWrite
from server.streaming.feed import Frame, RunFeed, Viewer, sse_frame
from stream_store.log import StoredEvent
from tests.conftest import ServerHandle, StartServer
from tests.sse import Received, read_events
from tests.test_runs import run_body

TEXT = " ".join(f"tok{i}" for i in range(60))
SLOW = {"configurable": {"fake_token_delay_ms": 10}}


async def watch(url: str, path: str, delay_s: float) -> list[Received]:
    await asyncio.sleep(delay_s)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        return await read_events(http, path)


class TestManyViewers:
    """Viewers joining at different moments of a live run receive identical sequences."""

    async def test_three_viewers_attached_at_different_moments_agree(
        self, server: ServerHandle, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = (await client.post("/v1/runs", json=run_body(TEXT, config=SLOW))).json()
        path = f"/v1/runs/{run['run_id']}/events"
        results = await asyncio.gather(
            watch(server.url, path, 0.0), watch(server.url, path, 0.2), watch(server.url, path, 0.4)
        )
        assert results[0][-1].event == "done"
        assert results[0] == results[1] == results[2]
        assert len(results[0]) > len(TEXT.split())

    async def test_viewers_on_two_server_processes_agree(
        self, start_server: StartServer, worker: JobLoop
    ) -> None:
        a, b = await start_server(), await start_server()
        async with httpx.AsyncClient(base_url=a.url) as http:
            run = (await http.post("/v1/runs", json=run_body(TEXT, config=SLOW))).json()
        path = f"/v1/runs/{run['run_id']}/events"
        on_a, on_b, late_b = await asyncio.gather(
            watch(a.url, path, 0.0), watch(b.url, path, 0.1), watch(b.url, path, 0.3)
        )
        assert on_a[-1].event == "done"
        assert on_a == on_b == late_b

    async def test_reconnect_to_another_server_process_skips_nothing(
        self, start_server: StartServer, worker: JobLoop
    ) -> None:
        a, b = await start_server(), await start_server()
        async with (
            httpx.AsyncClient(base_url=a.url) as on_a,
            httpx.AsyncClient(base_url=b.url) as on_b,
        ):
            run = (await on_a.post("/v1/runs", json=run_body(TEXT, config=SLOW))).json()
            path = f"/v1/runs/{run['run_id']}/events"
            first = await read_events(on_a, path, limit=10)
            rest = await read_events(on_b, path, headers={"Last-Event-ID": first[-1].id})
            assert first + rest == await read_events(on_a, path)

    async def test_hundred_viewers_of_one_run_each_get_every_event(
        self, server: ServerHandle, client: httpx.AsyncClient, worker: JobLoop
    ) -> None:
        run = (await client.post("/v1/runs", json=run_body(TEXT, config=SLOW))).json()
        path = f"/v1/runs/{run['run_id']}/events"
        results = await asyncio.gather(*(watch(server.url, path, i * 0.005) for i in range(100)))
        reference = results[0]
        assert reference[-1].event == "done"
        assert all(result == reference for result in results)


class TestViewersArrivingTogether:
    """Viewers that attach together to a live run read its start from Redis once."""

    async def test_one_reads_the_stream_start_the_others_replay_it_from_memory(
        self, start_server: StartServer, worker: JobLoop
    ) -> None:
        server = await start_server()
        assert server.app is not None
        events = server.app.state.resources.events
        reads: list[str] = []
        read_range = events.read_range

        async def counted(run_id: str, after: str, count: int) -> Any:
            reads.append(after)
            return await read_range(run_id, after, count=count)

        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            run = (await http.post("/v1/runs", json=run_body(TEXT, config=SLOW))).json()
            path = f"/v1/runs/{run['run_id']}/events"
            await read_events(http, path, limit=20)  # the run is under way; its feed is gone
            events.read_range = counted  # type: ignore[method-assign]
            try:
                results = await asyncio.gather(*(watch(server.url, path, 0) for _ in range(20)))
            finally:
                events.read_range = read_range  # type: ignore[method-assign]
        assert results[0][-1].event == "done" and all(r == results[0] for r in results)
        assert reads.count("0-0") == 1, reads


class TestSlowViewer:
    """A client that reads slower than the run writes gets every event, once, in order."""

    async def test_a_viewer_slower_than_its_socket_gets_every_event_once_in_order(
        self, start_server: StartServer, worker: JobLoop
    ) -> None:
        # 6 MB of events that the client leaves unread for a second: more than the sockets'
        # buffers hold, so the server's writes wait on the client (a direct write the viewer's
        # task finishes, server/streaming/attach.py), then the client reads as fast as it can.
        server = await start_server(
            max_body_bytes=8 << 20, max_message_chars=8 << 20, viewer_queue_size=4096
        )
        text = " ".join(f"t{i}-" + "x" * 1000 for i in range(6000))
        host, port = server.url.removeprefix("http://").split(":")
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            run = (await http.post("/v1/runs", json=run_body(text))).json()
            path = f"/v1/runs/{run['run_id']}/events"
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            await asyncio.sleep(1)
            raw = b""
            while chunk := await asyncio.wait_for(reader.read(1 << 16), 30):
                raw += chunk
            writer.close()
            expected = await read_events(http, path)
        _, _, stream = raw.partition(b"\r\n\r\n")
        ids = [
            line.removeprefix(b"id: ").decode()
            for line in stream.split(b"\r\n")
            if line.startswith(b"id: ")
        ]
        assert expected[-1].event == "done" and len(expected) > 6000
        assert ids == [event.id for event in expected]
        assert stream.count(b"event: done") == 1


class TestBlockedDirectWrite:
    """A direct write that the client's socket cannot take yet is finished by the viewer's
    task, in order, or closed with it."""

    @staticmethod
    def blocked_send(gate: asyncio.Event, written: list[bytes]) -> BlockedWrite:
        async def send(message: dict[str, Any]) -> None:
            await gate.wait()  # as uvicorn's send waits on its flow control
            written.append(message["body"])

        sending = send({"type": "http.response.body", "body": b"first", "more_body": True})
        blocked = sending.send(None)  # as `_write_directly` starts it
        return BlockedWrite(sending, blocked, 0, [(b"second", 0)])

    async def test_the_task_finishes_it_once_the_socket_takes_it(self) -> None:
        gate, written = asyncio.Event(), []
        write = self.blocked_send(gate, written)
        finishing = asyncio.create_task(write.finish())
        await asyncio.sleep(0.01)
        assert not finishing.done() and written == []
        gate.set()
        await asyncio.wait_for(finishing, 1)
        assert written == [b"first"] and write.rest == [(b"second", 0)]

    async def test_cancelling_the_task_closes_the_send(self) -> None:
        gate, written = asyncio.Event(), []
        write = self.blocked_send(gate, written)
        finishing = asyncio.create_task(write.finish())
        await asyncio.sleep(0.01)
        finishing.cancel()
        await asyncio.gather(finishing, return_exceptions=True)
        assert finishing.cancelled() and write.sending.cr_frame is None  # closed
        gate.set()
        await asyncio.sleep(0.01)
        assert written == []


class TestCutOffCounting:
    """A viewer is cut off for its client's wait, never for the server's own stalls."""

    async def test_a_write_waiting_across_sweeps_adds_one_interval_per_sweep(self) -> None:
        viewer = Viewer(RunFeed(8))
        viewer.write_started()
        assert viewer.swept(0.25) == 0.0  # the sweep that first sees a write starts its clock
        assert viewer.swept(0.25) == 0.25
        assert viewer.swept(0.25) == 0.5

    async def test_a_stalled_event_loop_counts_as_one_interval(self) -> None:
        viewer = Viewer(RunFeed(8))
        viewer.write_started()
        viewer.swept(0.25)
        # the sweep after a stall of the whole process still adds one interval only
        time.sleep(0.6)  # noqa: ASYNC251 - the event loop stalls, as on a busy machine
        assert viewer.swept(0.25) == 0.25

    async def test_a_finished_write_restarts_the_count(self) -> None:
        viewer = Viewer(RunFeed(8))
        viewer.write_started()
        viewer.swept(0.25)
        viewer.swept(0.25)
        viewer.write_ended()
        assert viewer.swept(0.25) == 0.0
        viewer.write_started()
        assert viewer.swept(0.25) == 0.0


def frames_of(feed: RunFeed, count: int) -> None:
    start = feed.head
    for n in range(start, start + count):
        feed.append(sse_frame(StoredEvent(f"1-{n}", "token", b"{}", 1)))


class TestRunFeed:
    """Viewers read a run's one buffer by position; one too far behind catches up from Redis."""

    async def test_a_viewer_reads_every_frame_after_it_joined_once_in_order(self) -> None:
        feed = RunFeed(4)
        frames_of(feed, 3)
        viewer = Viewer(feed)
        taken: list[str] = []
        for _ in range(5):  # the buffer is trimmed as it grows past twice its size
            frames_of(feed, 3)
            taken += [frame.id for frame in viewer.take() or []]
        assert taken == [f"1-{n}" for n in range(3, 18)]
        assert viewer.take() == []

    async def test_a_viewer_more_than_the_size_behind_lags_then_rejoins_at_the_head(self) -> None:
        feed = RunFeed(4)
        viewer = Viewer(feed)
        frames_of(feed, 5)
        assert viewer.take() is None and viewer.lagging
        viewer.rejoin()
        frames_of(feed, 1)
        assert [frame.id for frame in viewer.take() or []] == ["1-5"]

    async def test_a_cancelled_waiter_leaves_the_others_waiting(self) -> None:
        feed = RunFeed(4)
        gone, staying = Viewer(feed), Viewer(feed)
        cancelled = asyncio.create_task(gone.wait())
        waiting = asyncio.create_task(staying.wait())
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        assert not waiting.done()
        frames_of(feed, 1)
        feed.wake()
        await asyncio.wait_for(waiting, 1)
        assert cancelled.cancelled()


def frame(n: int) -> Frame:
    return sse_frame(StoredEvent(f"1-{n}", "token", b"{}", 1))


class TestReplayFromTheFeed:
    """A viewer's replay comes from the feed's buffer only when it holds every event the
    viewer lacks up to its place, and only for the stream the viewer was told of."""

    async def test_a_viewer_after_the_floor_replays_from_memory_one_before_it_does_not(
        self,
    ) -> None:
        feed = RunFeed(8)
        feed.start_at("1-2")  # the stream had 1-0..1-2 when the feed opened
        for n in (3, 4, 5):
            feed.append(frame(n))
        viewer = Viewer(feed)
        feed.append(frame(6))  # live for the viewer: not part of its replay
        held = feed.history((1, 3), "1-0", viewer.position)
        assert held is not None
        assert [f.id for f in held[0]] == ["1-4", "1-5"] and held[1].id == "1-5"
        assert feed.history((1, 1), "1-0", viewer.position) is None  # 1-2 is not held

    async def test_a_replay_from_the_start_joins_the_buffer_only_at_its_floor(self) -> None:
        feed = RunFeed(8)
        feed.start_at("1-2")
        feed.append(frame(3))
        viewer = Viewer(feed)
        feed.add_history([frame(0), frame(1)])  # does not reach the floor: a gap
        assert feed.history((0, 0), "1-0", viewer.position) is None
        feed.add_history([frame(0), frame(1), frame(2)])
        held = feed.history((0, 0), "1-0", viewer.position)
        assert held is not None and [f.id for f in held[0]] == ["1-0", "1-1", "1-2", "1-3"]
        assert feed.history((0, 0), "2-0", viewer.position) is None  # another stream
        feed.append(frame(4))
        assert [f.id for f in viewer.take() or []] == ["1-4"]  # its place is unchanged

    async def test_history_past_the_bound_is_refused_and_trimming_raises_the_floor(
        self,
    ) -> None:
        feed = RunFeed(2)
        feed.start_at("1-2")
        feed.append(frame(3))
        feed.add_history([frame(0), frame(1), frame(2)])  # 4 frames: twice the size
        assert feed.history((0, 0), "1-0", feed.head) is None
        for n in (4, 5, 6):
            feed.append(frame(n))  # trimmed to the newest 2 (1-5, 1-6) at 4 frames
        assert feed.history((1, 3), "1-0", feed.head) is None  # 1-4 was dropped
        held = feed.history((1, 4), "1-0", feed.head)
        assert held is not None and [f.id for f in held[0]] == ["1-5", "1-6"]
