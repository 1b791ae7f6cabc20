"""`runner.run_scope.chat_model()`: the worker's configured model for any graph's node, the one
the built-in graphs get (the fake offline), refused outside a run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from runner.models import EchoChatModel
from runner.run_scope import NotInARun, RunScope, chat_model, running
from stream_store.services import Services, open_services
from stream_store.settings import Settings
from tests.conftest import StartServer, StartWorker
from tests.test_evaluations import claimed_run
from tests.test_langgraph_api import chunks_text, client_for, human


@pytest.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with open_services(replace(settings, model="fake")) as opened:
        yield opened


def test_outside_a_run_it_is_refused_with_a_clear_error() -> None:
    with pytest.raises(NotInARun, match="outside one"):
        chat_model()


async def test_inside_a_run_it_is_the_run_model_with_the_runs_configurable(
    services: Services,
) -> None:
    run = await claimed_run(services)
    with running(RunScope.of(run, services, {"fake_token_delay_ms": 7})):
        model = chat_model()
        assert isinstance(model, EchoChatModel) and model.token_delay_s == 0.007
        # a node's own config names the factory's key: it wins; other keys are not the model's
        mine = chat_model({"configurable": {"fake_token_delay_ms": 1, "other": 2}})
        assert isinstance(mine, EchoChatModel) and mine.token_delay_s == 0.001
    with pytest.raises(NotInARun):
        chat_model()  # the block left, the model is gone


async def test_a_user_graph_streams_the_workers_model_token_by_token(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    graphs = {"mine": "tests.custom_graphs:with_public_model"}
    server = await start_server(graphs=graphs)
    await start_worker(graphs=graphs)
    sdk = client_for(server.url)
    thread = (await sdk.threads.create())["thread_id"]
    parts = [
        part
        async for part in sdk.runs.stream(
            thread, "mine", input=human("three small words"), stream_mode="messages-tuple"
        )
    ]
    chunks = [p for p in parts if p.event == "messages"]
    assert len(chunks) == 3  # the fake model's tokens, one event each
    assert chunks_text(parts) == "three small words"
    state = await sdk.threads.get_state(thread)
    assert state["values"]["messages"][-1]["content"] == "three small words"
