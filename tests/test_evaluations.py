"""Evaluations as data (issue 22, `runner.run_scope.record_evaluation`, runner/evaluations.py):
a graph's grades of its own work are recorded once per run and key across attempts and a
worker's SIGKILL, read back by their owner only, refused with a clear message when malformed,
gone with their run and thread, and counted in /metrics."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from runner.recovery import expire_idle_threads
from runner.run_scope import EvaluationRefused, NotInARun, RunScope, record_evaluation, running
from stream_store.limits import EVALUATION_KINDS_PER_GRAPH_IN_METRICS, EVALUATIONS_MAX_PER_RUN
from stream_store.run_records import RunRecord
from stream_store.run_submit import NewRun
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker
from tests.processes import Cluster
from tests.sse import read_events
from tests.test_faults import WatchedRun, body, wait_for
from tests.test_isolation import API_KEYS, bearer
from tests.test_metrics import scrape, until, value
from wire.events import RunStatus

GRAPHS = {"grades_itself": "tests.custom_graphs:grades_itself"}
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with open_services(settings) as opened:
        yield opened


async def claimed_run(services: Services, owner: str = "o") -> RunRecord:
    """A run submitted and claimed by a first attempt, as the worker would."""
    new = NewRun(owner=owner, graph="chat", input={"messages": []})
    new.traceparent = f"00-{TRACE_ID}-b7ad6b7169203331-01"
    run = await services.lifecycle.claim((await services.lifecycle.submit(new)).run.run_id)
    assert run is not None
    return run


def recorded(services: Services, run: RunRecord) -> Any:
    """Inside `run`'s current attempt, as its graph's nodes are."""
    return running(RunScope.of(run, services))


async def totals(services: Services) -> dict[str, tuple[int, int, int, float, list[int]]]:
    """`runstream_evaluation_totals` by kind: written, passed, failed, score sum, buckets."""
    async with services.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM runstream_evaluation_totals")
        rows = await cur.fetchall()
    return {
        r["kind"]: (r["evaluations"], r["passed"], r["failed"], r["score_sum"], r["at_most"])
        for r in rows
    }


class TestRecordedOnce:
    async def test_a_key_is_recorded_once_across_two_attempts(self, services: Services) -> None:
        first = await claimed_run(services)
        with recorded(services, first):
            await record_evaluation("reply", 0.5, key="reply", passed=False, detail={"why": "x"})
            await record_evaluation("reply", 0.9, key="reply", passed=True)  # the same attempt
        # The first attempt dies; a second one takes the run and runs the grading node again.
        assert await services.run_records.requeue_attempt(first.run_id, first.attempt)
        second = await services.lifecycle.claim(first.run_id)
        assert second is not None and second.attempt == 2
        with recorded(services, second):
            await record_evaluation("reply", 1.0, key="reply", passed=True)
            await record_evaluation("brevity", 0.25, key="brevity")
        with recorded(services, first):  # the first attempt, still going after it lost the run
            await record_evaluation("reply", 0.0, key="late")

        found = await services.evaluations.for_run(first.run_id, "o")
        assert [(e.key, e.kind, e.score, e.passed, e.detail, e.attempt) for e in found] == [
            ("reply", "reply", 0.5, False, {"why": "x"}, 1),
            ("brevity", "brevity", 0.25, None, None, 2),
        ]
        assert {(e.thread_id, e.owner, e.graph, e.trace_id) for e in found} == {
            (first.thread_id, "o", "chat", TRACE_ID)
        }
        assert await services.evaluations.for_thread(first.thread_id, "o") == found
        # counted as written: the replays and the fenced one not at all
        assert await totals(services) == {
            "reply": (1, 0, 1, 0.5, [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]),
            "brevity": (1, 0, 0, 0.25, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]),
        }

    async def test_outside_a_run_it_is_refused(self) -> None:
        with pytest.raises(NotInARun, match="record_evaluation is called from a node of a run"):
            await record_evaluation("reply", 0.5, key="reply")

    async def test_a_run_holds_a_bounded_number_and_a_replay_at_the_bound_is_no_error(
        self, services: Services
    ) -> None:
        run = await claimed_run(services)
        async with services.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO runstream_evaluations (run_id, key, thread_id, owner, graph, kind,"
                " score, attempt) SELECT %s, 'k' || n, %s, 'o', 'chat', 'reply', 0.5, 1"
                " FROM generate_series(1, %s) AS n",
                (run.run_id, run.thread_id, EVALUATIONS_MAX_PER_RUN),
            )
        with recorded(services, run):
            await record_evaluation("reply", 1.0, key="k1")  # recorded already: no error
            with pytest.raises(EvaluationRefused, match=r"holds 1000 evaluations.*'k1001'"):
                await record_evaluation("reply", 1.0, key="k1001")
        assert len(await services.evaluations.for_run(run.run_id, "o")) == EVALUATIONS_MAX_PER_RUN


BAD_INPUTS: list[tuple[dict[str, Any], str]] = [
    ({"kind": ""}, "kind must be a lowercase identifier"),
    ({"kind": "Reply"}, "kind must be a lowercase identifier"),
    ({"kind": "reply-score"}, "kind must be a lowercase identifier"),
    ({"kind": "k" * 33}, "at most 32 characters"),
    ({"kind": 3}, "kind must be"),
    ({"score": math.nan}, "score must be a finite number from 0 to 1, not nan"),
    ({"score": math.inf}, "score must be a finite number from 0 to 1"),
    ({"score": -0.01}, "score must be a finite number from 0 to 1, not -0.01"),
    ({"score": 1.5}, "score must be a finite number from 0 to 1, not 1.5"),
    ({"score": True}, "score must be a number from 0 to 1, not True"),
    ({"score": "0.5"}, "score must be a number from 0 to 1, not '0.5'"),
    ({"key": ""}, "key must be a non-empty string of at most 255 characters"),
    ({"key": "k" * 256}, "key must be a non-empty string of at most 255 characters"),
    ({"key": None}, "key must be a non-empty string"),
    ({"key": "a\x00b"}, "key must not contain the NUL character"),
    ({"passed": "yes"}, "passed must be true, false or None, not 'yes'"),
    ({"detail": ["a"]}, "detail must be a JSON object"),
    ({"detail": {"at": object()}}, "detail must be JSON"),
    ({"detail": {"x": math.nan}}, "detail must be JSON"),
    ({"detail": {"text": "x" * 20_000}}, "detail is 20011 bytes as compact JSON; at most 16384"),
    ({"detail": {"text": "a\x00b"}}, "detail must not contain the NUL character"),
]


class TestBadInputs:
    @pytest.mark.parametrize(("change", "message"), BAD_INPUTS)
    async def test_refused_with_a_clear_message_and_nothing_written(
        self, services: Services, change: dict[str, Any], message: str
    ) -> None:
        run = await claimed_run(services)
        arguments: dict[str, Any] = {"kind": "reply", "score": 0.5, "key": "k", **change}
        kind, score = arguments.pop("kind"), arguments.pop("score")
        with recorded(services, run), pytest.raises(EvaluationRefused, match=_escaped(message)):
            await record_evaluation(kind, score, **arguments)
        assert await services.evaluations.for_run(run.run_id, "o") == []

    async def test_an_escaped_nul_in_text_is_kept_and_integers_are_scores(
        self, services: Services
    ) -> None:
        run = await claimed_run(services)
        with recorded(services, run):
            await record_evaluation("reply", 1, key="k", detail={"text": "\\u0000", "n": 1})
        [found] = await services.evaluations.for_run(run.run_id, "o")
        assert (found.score, found.detail) == (1.0, {"text": "\\u0000", "n": 1})


def _escaped(message: str) -> str:
    return "".join(f"\\{c}" if c in r".^$*+?{}[]\|()" else c for c in message)


class TestDeletion:
    async def test_evaluations_go_with_their_run_and_their_thread(self, services: Services) -> None:
        by_run, by_thread, by_retention = [await claimed_run(services) for _ in range(3)]
        for run in (by_run, by_thread, by_retention):
            with recorded(services, run):
                await record_evaluation("reply", 0.5, key="reply")
            await services.run_records.finish_run(run.run_id, run.attempt, RunStatus.SUCCEEDED)
        assert await services.run_records.delete_run(by_run.run_id, "o")
        assert await services.evaluations.for_thread(by_run.thread_id, "o") == []
        await services.thread_records.delete_thread(by_thread.thread_id, "o")
        assert await services.evaluations.for_thread(by_thread.thread_id, "o") == []
        # retention: the threads idle for a millisecond (by_run's, now without runs, and this one)
        await asyncio.sleep(0.01)
        assert await expire_idle_threads(services, 0.001) == 2
        async with services.pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM runstream_evaluations")
            assert await cur.fetchone() == {"n": 0}


async def test_a_graphs_kinds_past_the_first_twenty_are_counted_as_other(
    services: Services,
) -> None:
    run = await claimed_run(services)
    with recorded(services, run):
        for n in range(EVALUATION_KINDS_PER_GRAPH_IN_METRICS + 2):
            await record_evaluation(f"kind{n}", 1.0, key=f"k{n}")
        await record_evaluation("kind0", 1.0, key="again")  # one of the first twenty
    counted = await totals(services)
    assert len(counted) == EVALUATION_KINDS_PER_GRAPH_IN_METRICS + 1
    assert counted["kind0"][0] == 2 and counted["other"][0] == 2
    assert len(await services.evaluations.for_run(run.run_id, "o")) == 23  # each kept as it is


@pytest.fixture
async def api(
    settings: Settings, start_server: StartServer, start_worker: StartWorker
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, str]]:
    """alice's and bob's clients on a server (and a worker) with the grading graph; the URL of
    the server's /metrics."""
    server = await start_server(api_keys=API_KEYS, graphs=GRAPHS)
    await start_worker(graphs=GRAPHS)
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30, headers=bearer("key-a")) as alice,
        httpx.AsyncClient(base_url=server.url, timeout=30, headers=bearer("key-b")) as bob,
    ):
        yield alice, bob, f"{server.url}/metrics"


async def finished_run(client: httpx.AsyncClient, text: str, **extra: Any) -> dict[str, Any]:
    submitted = await client.post("/v1/runs", json=body(text, graph="grades_itself", **extra))
    assert submitted.status_code == 202, submitted.text
    run: dict[str, Any] = submitted.json()
    events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
    assert events[-1].event == "done" and events[-1].data["status"] == "succeeded", events[-1]
    return run


class TestThroughTheApi:
    async def test_read_by_run_and_thread_by_their_owner_only_and_counted_in_metrics(
        self, api: tuple[httpx.AsyncClient, httpx.AsyncClient, str]
    ) -> None:
        alice, bob, metrics = api
        first = await finished_run(alice, "one two three")
        second = await finished_run(alice, " ".join(["w"] * 20), thread_id=first["thread_id"])

        answer = await alice.get(f"/v1/runs/{first['run_id']}/evaluations")
        assert answer.status_code == 200, answer.text
        evaluations = answer.json()["evaluations"]
        assert [(e["key"], e["kind"], e["score"], e["passed"]) for e in evaluations] == [
            ("reply", "reply", 0.75, True),
            ("brevity", "brevity", 0.3, True),
        ]
        assert evaluations[0]["detail"] == {"words": 3}
        for e in evaluations:
            assert (e["run_id"], e["thread_id"]) == (first["run_id"], first["thread_id"])
            assert (e["graph"], e["attempt"], e["trace_id"]) == ("grades_itself", 1, None)
            assert e["message_id"] == f"answer-{first['run_id']}"  # the answer they grade
            assert e["created_at"]

        thread = await alice.get(f"/v1/threads/{first['thread_id']}/evaluations")
        assert thread.status_code == 200, thread.text
        assert [(e["run_id"], e["key"]) for e in thread.json()["evaluations"]] == [
            (first["run_id"], "reply"),
            (first["run_id"], "brevity"),
            (second["run_id"], "reply"),
            (second["run_id"], "brevity"),
        ]

        for path in (
            f"/v1/runs/{first['run_id']}/evaluations",
            f"/v1/threads/{first['thread_id']}/evaluations",
        ):
            refused = await bob.get(path)
            assert refused.status_code == 404, refused.text
            assert refused.json()["error"]["code"] == "not_found"

        labels = {"graph": "grades_itself"}
        counted = "runstream_evaluations_total"
        text = await until(
            metrics, lambda t: value(t, counted, kind="reply", passed="true", **labels) == 2
        )
        assert value(text, counted, kind="reply", passed="false", **labels) == 0
        assert value(text, counted, kind="brevity", passed="true", **labels) == 1
        assert value(text, counted, kind="brevity", passed="false", **labels) == 1
        assert value(text, "runstream_evaluation_score_count", kind="reply", **labels) == 2
        assert value(text, "runstream_evaluation_score_sum", kind="reply", **labels) == 1.5
        scores = "runstream_evaluation_score_bucket"
        assert value(text, scores, kind="brevity", le="0.2", **labels) == 0
        assert value(text, scores, kind="brevity", le="0.3", **labels) == 1
        assert value(text, scores, kind="brevity", le="0.9", **labels) == 1
        assert value(text, scores, kind="brevity", le="+Inf", **labels) == 2

        deleted = await alice.delete(f"/v1/threads/{first['thread_id']}")
        assert deleted.status_code == 204, deleted.text
        for path in (
            f"/v1/runs/{first['run_id']}/evaluations",
            f"/v1/threads/{first['thread_id']}/evaluations",
        ):
            assert (await alice.get(path)).status_code == 404
        await asyncio.sleep(1.1)  # past the deployment figures' one-second cache
        kept = await scrape(metrics)  # a counter never goes down
        assert value(kept, counted, kind="reply", passed="true", **labels) == 2


@pytest.fixture
def cluster_settings(settings: Settings) -> Settings:
    """A short lease, so the killed worker's run is handed over at once."""
    return replace(
        settings, lease_s=1.0, reaper_interval_s=0.2, shutdown_grace_s=2.0, graphs=GRAPHS
    )


@pytest.mark.slow
async def test_grading_recorded_once_across_a_worker_kill(cluster: Cluster) -> None:
    _, url = await cluster.server()
    first = await cluster.ready_worker(RUNSTREAM_TEST_LINGER_S="5")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        watched = await WatchedRun.submit(http, url, body("one two", graph="grades_itself"))
        events = watched.events
        await wait_for(lambda: any(e.event == "custom" for e in events), what="the grading")
        first.kill()  # SIGKILL, after the grades committed and before the node's checkpoint
        await cluster.ready_worker(RUNSTREAM_TEST_LINGER_S="0")
        await watched.end()
        assert events[-1].event == "done", events[-1]
        assert [e.data for e in events if e.event == "custom"] == [{"graded": True}] * 2
        run = (await http.get(f"/v1/runs/{watched.run['run_id']}")).json()
        assert run["attempt"] == 2
        found = (await http.get(f"/v1/runs/{run['run_id']}/evaluations")).json()["evaluations"]
    assert [(e["key"], e["attempt"]) for e in found] == [("reply", 1), ("brevity", 1)]
    text = await scrape(f"{url}/metrics")
    assert value(text, "runstream_evaluations_total", graph="grades_itself", kind="reply") == 1
