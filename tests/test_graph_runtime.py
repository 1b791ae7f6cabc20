"""The runtime a user graph sees, as on LangGraph's server: `runtime.context` built into its
`context_schema` from the assistant's and the run's context, `configurable` with the caller's
keys and the server's, and `runtime.store` the run owner's (tests/projects/runtime)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, TypedDict

import pytest
from langgraph_sdk.client import LangGraphClient
from pydantic import BaseModel

from project.graph_context import ContextRefused, graph_context
from stream_store.assistant_ids import assistant_id_for
from tests.processes import ROOT, Cluster
from tests.test_langgraph_api import client_for, human
from tests.test_langgraph_assistants import refused

PROJECT = {"RUNSTREAM_CONFIG": str(ROOT / "tests" / "projects" / "runtime" / "langgraph.json")}
KEYS = {"RUNSTREAM_API_KEYS": "key-a:alice,key-b:bob"}


@dataclasses.dataclass
class Defaults:
    name: str
    tone: str = "plain"


class Typed(TypedDict):
    name: str


class Model(BaseModel):
    level: int = 1


class TestGraphContext:
    def test_a_dataclass_is_built_with_its_defaults_and_unknown_keys_dropped(self) -> None:
        built = graph_context(Defaults, {"name": "ann", "other": 1})
        assert built == Defaults(name="ann", tone="plain")

    def test_a_typeddict_gets_its_keys_and_no_schema_gets_everything(self) -> None:
        assert graph_context(Typed, {"name": "ann", "other": 1}) == {"name": "ann"}
        assert graph_context(None, {"other": 1}) == {"other": 1}

    def test_pydantic_coerces_and_refuses_with_its_message(self) -> None:
        assert graph_context(Model, {"level": "2"}) == Model(level=2)
        with pytest.raises(ContextRefused, match="level"):
            graph_context(Model, {"level": "high"})
        with pytest.raises(ContextRefused, match="name"):
            graph_context(Defaults, {})  # a required field missing


async def _seen(sdk: LangGraphClient, thread_id: str, assistant: str, **kwargs: Any) -> Any:
    """What the graph's node streamed about its runtime, for one run."""
    parts = [
        part.data
        async for part in sdk.runs.stream(
            thread_id, assistant, input=human("hi"), stream_mode="custom", **kwargs
        )
        if part.event == "custom"
    ]
    assert len(parts) == 1, parts
    return parts[0]


async def test_context_and_configurable_as_on_langgraphs_server(cluster: Cluster) -> None:
    (_, url), _ = await asyncio.gather(cluster.server(**PROJECT), cluster.ready_worker(**PROJECT))
    sdk = client_for(url)
    made = await sdk.assistants.create("dated", context={"user_name": "ann", "tone": "warm"})
    thread = (await sdk.threads.create())["thread_id"]

    seen = await _seen(
        sdk, thread, made["assistant_id"], context={"tone": "dry"}, config=None
    )  # the run's context over the assistant's, the schema's default for the rest
    assert seen["context"] == {"type": "dataclass", "user_name": "ann", "tone": "dry", "limit": 3}
    runs = await sdk.runs.list(thread)
    run_id = runs[0]["run_id"]
    assert seen["configurable"] == {
        "thread_id": thread,
        "run_id": run_id,
        "assistant_id": made["assistant_id"],
        "graph_id": "dated",
        "team": None,
        "langgraph_auth_user_id": seen["configurable"]["langgraph_auth_user_id"],
    }
    assert seen["server_info"] == [made["assistant_id"], "dated"]
    assert seen["same_store"] is True
    assert runs[0]["kwargs"]["context"] == {"user_name": "ann", "tone": "dry"}  # recorded

    # the caller's own configurable keys pass through; LangGraph's and runstream's are refused
    seen = await _seen(
        sdk, thread, "dated", config={"configurable": {"team": "blue"}}, context={"user_name": "b"}
    )
    assert seen["configurable"]["team"] == "blue"
    assert seen["configurable"]["assistant_id"] == assistant_id_for("dated")
    for key in ("run_id", "graph_id", "langgraph_auth_user_id"):
        error = await refused(
            sdk.runs.create(thread, "dated", input=human("x"), config={"configurable": {key: 1}}),
            422,  # the LangGraph API's status for a refused request body, as before
        )
        assert key in str(error) and "reserved" in str(error)

    typed = await _seen(sdk, thread, "typed", context={"user_name": "cy", "stray": 1})
    assert typed["context"] == {"type": "dict", "user_name": "cy"}
    modelled = await _seen(sdk, thread, "modelled", context={"level": "4"})
    assert modelled["context"] == {"type": "pydantic", "level": 4}
    assert (await _seen(sdk, thread, "modelled"))["context"]["level"] == 1  # its default

    # a context the schema cannot take: a 422 at submit, and no run recorded
    before = len(await sdk.runs.list(thread))
    error = await refused(
        sdk.runs.create(thread, "modelled", input=human("x"), context={"level": "high"}), 422
    )
    assert "Modelled" in str(error) and "level" in str(error)
    error = await refused(sdk.runs.create(thread, "dated", input=human("x")), 422)
    assert "user_name" in str(error)  # a required field, given by neither assistant nor run
    assert len(await sdk.runs.list(thread)) == before


async def test_the_graphs_store_is_the_run_owners(cluster: Cluster) -> None:
    (_, url), _ = await asyncio.gather(
        cluster.server(**PROJECT, **KEYS), cluster.ready_worker(**PROJECT)
    )
    alice, bob = client_for(url, "key-a"), client_for(url, "key-b")
    thread = (await alice.threads.create())["thread_id"]
    await alice.runs.wait(thread, "typed", input=human("from alice"))

    items = (await alice.store.search_items(("notes",)))["items"]
    assert [(i["key"], i["value"]) for i in items] == [(thread, {"note": "from alice"})]
    assert (await bob.store.search_items(("notes",)))["items"] == []
    bob_thread = (await bob.threads.create())["thread_id"]
    await bob.runs.wait(bob_thread, "typed", input=human("from bob"))
    assert [i["key"] for i in (await bob.store.search_items(("notes",)))["items"]] == [bob_thread]
    assert [i["key"] for i in (await alice.store.search_items(("notes",)))["items"]] == [thread]
