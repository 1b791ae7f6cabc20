"""One run-scoped API for graph code (issue 34, runner/run_scope.py): `current_run`, `once`,
`record_evaluation` and `chat_model` answer for the one run the worker set once per attempt,
refuse outside a run, and the old import paths are deprecated aliases of them."""

from __future__ import annotations

import ast
import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from runner.models import EchoChatModel
from runner.run_scope import (
    NotInARun,
    RunScope,
    chat_model,
    current_run,
    once,
    record_evaluation,
    running,
)
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker
from tests.sse import read_events
from tests.test_evaluations import claimed_run
from tests.test_faults import body

GRAPHS = {"sees_its_run": "tests.custom_graphs:sees_its_run"}
RUNNER = Path(__file__).resolve().parents[1] / "runner"


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with open_services(settings) as opened:
        yield opened


async def test_the_four_functions_see_the_run_the_worker_runs(
    settings: Settings, start_server: StartServer, start_worker: StartWorker
) -> None:
    server = await start_server(graphs=GRAPHS)
    await start_worker(graphs=GRAPHS)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        submitted = await http.post("/v1/runs", json=body("two words", graph="sees_its_run"))
        assert submitted.status_code == 202, submitted.text
        run = submitted.json()
        run_id, thread_id = run["run_id"], run["thread_id"]
        events = await read_events(http, f"/v1/runs/{run_id}/events")
        assert events[-1].event == "done" and events[-1].data["status"] == "succeeded", events
        [seen] = [e.data for e in events if e.event == "custom"]
        graded = (await http.get(f"/v1/runs/{run_id}/evaluations")).json()["evaluations"]
    assert seen == {
        "current_run": [run_id, thread_id, "sees_its_run", 1],
        "once": {"run_id": run_id, "attempt": 1},
        "model": EchoChatModel.__name__,  # the worker's configured model (the fake here)
    }
    assert [(e["key"], e["detail"]) for e in graded] == [("seen", {"run_id": run_id, "attempt": 1})]
    assert events[-1].data["output"]["content"] == "two words"  # the fake model echoes
    async with open_services(settings) as services, services.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT tool_call_id, tool, attempt, result FROM runstream_tool_executions"
            " WHERE run_id = %s",
            (run_id,),
        )
        assert await cur.fetchall() == [
            {
                "tool_call_id": "seen",
                "tool": "seen",
                "attempt": 1,
                "result": {"run_id": run_id, "attempt": 1},
            }
        ]


async def test_each_function_refuses_outside_a_run() -> None:
    ran: list[int] = []

    async def effect() -> int:
        ran.append(1)
        return 1

    with pytest.raises(NotInARun, match=r"run_scope\.current_run is called from a node of a run"):
        current_run()
    with pytest.raises(NotInARun, match=r"run_scope\.once is called"):
        await once("k", effect)
    with pytest.raises(NotInARun, match=r"run_scope\.record_evaluation is called"):
        await record_evaluation("reply", 0.5, key="k")
    with pytest.raises(NotInARun, match="make a model yourself"):
        chat_model()
    assert ran == []


async def test_the_scope_holds_inside_its_block_only(services: Services) -> None:
    scope = RunScope.of(await claimed_run(services), services)
    with running(scope):
        assert current_run() is scope
    with pytest.raises(NotInARun):
        current_run()


def _called(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def test_the_worker_sets_the_scope_in_one_place() -> None:
    """One context variable for graph code, in runner/run_scope.py, entered by the worker in
    runner/execute.py only."""
    calls: list[tuple[str, str]] = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _called(node.func) in ("running", "ContextVar"):
                calls.append((_called(node.func), str(path.relative_to(RUNNER.parent))))
    assert sorted(calls) == [
        ("ContextVar", "runner/run_scope.py"),
        ("running", "runner/execute.py"),
    ]


def test_the_old_import_paths_are_deprecated_aliases_of_the_one_api() -> None:
    from runner import run_scope

    with pytest.warns(DeprecationWarning, match="runner.run_scope"):
        effects = importlib.reload(importlib.import_module("runner.effects"))
    assert (effects.once, effects.NotInARun) == (run_scope.once, run_scope.NotInARun)
    with pytest.warns(DeprecationWarning, match="runner.run_scope"):
        from runner.evaluations import record_evaluation as old_record
    assert old_record is run_scope.record_evaluation
    with pytest.warns(DeprecationWarning, match="runner.run_scope"):
        from runner.models import NoModelHere
        from runner.models import chat_model as old_chat_model
    assert (old_chat_model, NoModelHere) == (run_scope.chat_model, run_scope.NotInARun)
