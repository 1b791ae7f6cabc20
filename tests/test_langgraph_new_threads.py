"""LangGraph's `if_not_exists: "create"`: a run on a thread id nobody has yet creates the
thread with it, in the run's one statement (stream_store/run_submit.py); a thread that exists
is run on as it is, and one that another key owns is not found.

Several creates of one new thread at once get what submits on a thread that exists get: the
first runs, the others are refused as busy (`reject`) or queued behind it (`enqueue`), never
an error of their own.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError
from langgraph_sdk.schema import MultitaskStrategy

from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.test_langgraph_api import API_KEYS, client_for, human, messages_of, slow, words

CREATES = 8  # submits of one new thread at once
LONG = words(100)  # 2 s of tokens 20 ms apart


@pytest.fixture
async def sdk(server: ServerHandle, worker: Any) -> LangGraphClient:
    return client_for(server.url)


async def test_a_run_on_a_new_thread_id_creates_the_thread(sdk: LangGraphClient) -> None:
    thread_id = str(uuid.uuid4())
    await sdk.runs.wait(thread_id, "chat", input=human("hello there"), if_not_exists="create")
    thread = await sdk.threads.get(thread_id)
    assert thread["thread_id"] == thread_id
    assert thread["metadata"]["graph_id"] == "chat"
    state = await sdk.threads.get_state(thread_id)
    assert [kind for kind, _ in messages_of(state["values"])] == ["human", "ai"]


async def test_create_on_a_thread_that_exists_runs_on_it(sdk: LangGraphClient) -> None:
    thread_id = (await sdk.threads.create(metadata={"kept": "yes"}))["thread_id"]
    await sdk.runs.wait(thread_id, "chat", input=human("one"), if_not_exists="create")
    await sdk.runs.wait(thread_id, "chat", input=human("two"), if_not_exists="create")
    thread = await sdk.threads.get(thread_id)
    assert thread["metadata"]["kept"] == "yes"
    state = await sdk.threads.get_state(thread_id)
    assert [kind for kind, _ in messages_of(state["values"])] == ["human", "ai", "human", "ai"]
    assert len(await sdk.runs.list(thread_id)) == 2


async def test_without_create_a_new_thread_id_is_not_found(sdk: LangGraphClient) -> None:
    thread_id = str(uuid.uuid4())
    with pytest.raises(NotFoundError):
        await sdk.runs.create(thread_id, "chat", input=human("hello"))
    with pytest.raises(NotFoundError):
        await sdk.threads.get(thread_id)


async def _creates_at_once(
    sdk: LangGraphClient,
    thread_id: str,
    multitask: MultitaskStrategy,
    text: str,
    config: dict[str, Any],
) -> list[Any]:
    """`CREATES` runs of one thread id sent together, with `if_not_exists: create`: each
    answer, or the error it raised."""
    return await asyncio.gather(
        *(
            sdk.runs.create(
                thread_id,
                "chat",
                input=human(f"{i} {text}"),
                config=config,
                if_not_exists="create",
                multitask_strategy=multitask,
            )
            for i in range(CREATES)
        ),
        return_exceptions=True,
    )


async def test_creates_of_one_new_thread_at_once_run_one_and_refuse_the_rest(
    sdk: LangGraphClient,
) -> None:
    thread_id = str(uuid.uuid4())
    # the first still runs when the last comes
    answers = await _creates_at_once(sdk, thread_id, "reject", LONG, slow())
    created = [a for a in answers if isinstance(a, dict)]
    refused = [a for a in answers if isinstance(a, ConflictError)]
    assert len(created) == 1, answers
    assert len(refused) == CREATES - 1, answers
    run = created[0]
    await sdk.runs.join(thread_id, run["run_id"])
    assert [r["run_id"] for r in await sdk.runs.list(thread_id)] == [run["run_id"]]
    assert (await sdk.runs.get(thread_id, run["run_id"]))["status"] == "success"


async def test_creates_of_one_new_thread_at_once_with_enqueue_all_run_in_turn(
    sdk: LangGraphClient,
) -> None:
    thread_id = str(uuid.uuid4())
    runs = await _creates_at_once(sdk, thread_id, "enqueue", "turn", slow(5))
    assert all(isinstance(run, dict) for run in runs), runs
    for run in runs:
        await sdk.runs.join(thread_id, run["run_id"])
    listed = await sdk.runs.list(thread_id, limit=CREATES + 1)
    assert sorted(r["run_id"] for r in listed) == sorted(r["run_id"] for r in runs)
    assert {r["status"] for r in listed} == {"success"}
    state = await sdk.threads.get_state(thread_id)
    assert [kind for kind, _ in messages_of(state["values"])] == ["human", "ai"] * CREATES


async def test_create_on_another_keys_thread_is_not_found_and_changes_nothing(
    start_server: StartServer, start_worker: StartWorker
) -> None:
    server = await start_server(api_keys=API_KEYS)
    await start_worker()
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")
    thread_id = str(uuid.uuid4())
    await alice.runs.wait(thread_id, "chat", input=human("mine"), if_not_exists="create")
    with pytest.raises(NotFoundError):
        await bob.runs.create(thread_id, "chat", input=human("theirs"), if_not_exists="create")
    assert len(await alice.runs.list(thread_id)) == 1
    state = await alice.threads.get_state(thread_id)
    assert [kind for kind, _ in messages_of(state["values"])] == ["human", "ai"]
