"""Bounds on what a caller sends, and the `configurable` allow-list (issue 9).

Every refusal here is a 400 or 413 with the `{"error": {"code", "message"}}` shape, names the
field and the limit, and records nothing: the caller's thread list stays empty (or the thread's
run list, or the run's state, where the request named one).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from langgraph._internal import _constants as langgraph_constants
from psycopg.types.json import Jsonb

from runner.graph_registry import GraphRegistry
from stream_store.settings import Settings, SettingsError
from tests.conftest import StartServer, StartWorker, schema_connection
from tests.sse import read_events
from tests.test_bad_input import assert_error

PERSONA_GRAPHS = {"persona": "tests.custom_graphs:persona", "words": "tests.custom_graphs:builder"}
BIG_BODY_BYTES = 8 * 1024 * 1024  # room for bodies the field limits refuse before the body limit


def run_body(text: str = "hello there", **extra: Any) -> dict[str, Any]:
    return {"input": {"messages": [{"role": "user", "content": text}]}, **extra}


def with_configurable(configurable: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return run_body(config={"configurable": configurable}, **extra)


async def no_threads(client: httpx.AsyncClient) -> None:
    listing = await client.get("/v1/threads")
    assert listing.status_code == 200, listing.text
    assert listing.json()["threads"] == []


async def wait_status(client: httpx.AsyncClient, run_id: str, status: str) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while True:
            run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
            if run["status"] == status:
                return run
            await asyncio.sleep(0.05)


def langgraph_reserved_keys() -> set[str]:
    """Every `configurable` key the installed LangGraph reserves or reads for itself."""
    names = vars(langgraph_constants)
    keys = {value for name, value in names.items() if name.startswith("CONFIG_KEY_")}
    keys |= set(langgraph_constants._CHECKPOINT_COORDINATE_KEYS)
    keys |= {key for key in langgraph_constants.RESERVED if key != langgraph_constants.CONF}
    return keys


class TestConfigurableAllowList:
    """`config.configurable` takes only its graph's declared keys; LangGraph's keys are refused."""

    @pytest.mark.parametrize(
        "key",
        [
            "__pregel_checkpointer",
            "__pregel_send",
            "__pregel_not_yet_invented",
            "__anything",
            "thread_id",
            "checkpoint_id",
            "checkpoint_ns",
            "checkpoint_map",
            "run_id",
            "task_id",
            "assistant_id",
            "graph_id",
            "langgraph_auth_user",
        ],
    )
    async def test_reserved_key_is_refused_naming_the_key(
        self, client: httpx.AsyncClient, key: str
    ) -> None:
        response = await client.post("/v1/runs", json=with_configurable({key: None}))
        error = assert_error(response, 400)
        assert error["code"] == "invalid_request"
        assert key in error["message"] and "reserved" in error["message"]
        await no_threads(client)

    async def test_every_key_the_installed_langgraph_reserves_is_refused(
        self, client: httpx.AsyncClient
    ) -> None:
        keys = langgraph_reserved_keys()
        assert {"__pregel_checkpointer", "thread_id", "checkpoint_ns"} <= keys
        for key in sorted(keys):
            response = await client.post("/v1/runs", json=with_configurable({key: "x"}))
            error = assert_error(response, 400)
            assert key in error["message"], error
        await no_threads(client)

    async def test_unknown_key_is_refused_naming_the_allowed_keys(
        self, client: httpx.AsyncClient
    ) -> None:
        body = with_configurable({"fake_token_delay_ms": 5, "temperature": 0.2})
        error = assert_error(await client.post("/v1/runs", json=body), 400)
        assert error["code"] == "invalid_request"
        assert "temperature" in error["message"] and "fake_token_delay_ms" in error["message"]
        await no_threads(client)

    async def test_reserved_key_is_refused_on_the_thread_route(
        self, client: httpx.AsyncClient
    ) -> None:
        thread_id = (await client.post("/v1/threads", json={})).json()["thread_id"]
        body = with_configurable({"__pregel_checkpointer": None})
        response = await client.post(f"/v1/threads/{thread_id}/runs", json=body)
        assert "__pregel_checkpointer" in assert_error(response, 400)["message"]
        assert (await client.get(f"/v1/threads/{thread_id}/runs")).json()["runs"] == []

    async def test_declared_key_of_a_user_graph_reaches_the_graph(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        server = await start_server(graphs=PERSONA_GRAPHS)
        await start_worker(graphs=PERSONA_GRAPHS)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = with_configurable({"persona": "pirate"}, graph="persona")
            response = await client.post("/v1/runs", json=body)
            assert response.status_code == 202, response.text
            events = await read_events(client, f"/v1/runs/{response.json()['run_id']}/events")
            assert events[-1].data["output"]["content"] == "as pirate"

            body = with_configurable({"mood": "grumpy"}, graph="persona")
            error = assert_error(await client.post("/v1/runs", json=body), 400)
            assert "mood" in error["message"] and "persona" in error["message"]

    async def test_user_graph_that_declares_nothing_takes_any_key_not_reserved(
        self, start_server: StartServer
    ) -> None:
        """As on LangGraph's server; LangGraph's and runstream's own keys stay refused."""
        server = await start_server(graphs=PERSONA_GRAPHS)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = with_configurable({"checkpoint_ns": "x"}, graph="words")
            error = assert_error(await client.post("/v1/runs", json=body), 400)
            assert "checkpoint_ns" in error["message"] and "reserved" in error["message"]
            await no_threads(client)
            body = with_configurable({"persona": "pirate"}, graph="words")
            assert (await client.post("/v1/runs", json=body)).status_code == 202

    def test_graph_declaring_a_reserved_key_fails_at_start_up(self) -> None:
        registry = GraphRegistry({"bad": "tests.custom_graphs:declares_reserved"})
        with pytest.raises(ValueError, match="checkpoint_id"):
            registry.validate()

    async def test_worker_passes_the_graph_only_its_keys_whatever_the_record_holds(
        self, settings: Settings, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        """Defence in depth: a run record holding LangGraph's keys still runs on runstream's
        checkpointer and thread, and the graph never sees a key it did not declare."""
        server = await start_server(graphs=PERSONA_GRAPHS)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = with_configurable({"persona": "pirate"}, graph="persona")
            run = (await client.post("/v1/runs", json=body)).json()
            forged = {
                "configurable": {
                    "persona": "pirate",
                    "injected": True,
                    "thread_id": "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50",
                    "checkpoint_ns": "elsewhere",
                    "__pregel_checkpointer": None,
                }
            }
            async with await schema_connection(settings) as conn:
                await conn.execute(
                    "UPDATE runstream_runs SET config = %s WHERE run_id = %s",
                    (Jsonb(forged), run["run_id"]),
                )
            await start_worker(graphs=PERSONA_GRAPHS)
            events = await read_events(client, f"/v1/runs/{run['run_id']}/events")
            assert events[-1].event == "done", events[-1]
            seen = [e.data for e in events if e.event == "custom"]
            assert seen == [{"persona": "pirate", "thread_id": run["thread_id"], "injected": False}]
            thread = (await client.get(f"/v1/threads/{run['thread_id']}")).json()
            assert [m["content"] for m in thread["messages"]] == ["hello there", "as pirate"]


class TestFakeTokenDelayBound:
    """`fake_token_delay_ms` is 0..1000 ms, so a caller cannot hold a worker slot for long."""

    @pytest.mark.parametrize("delay", [1001, 10**12, -1, 2.5e9, "20", True, None, [20]])
    async def test_delay_outside_the_bound_is_refused(
        self, client: httpx.AsyncClient, delay: Any
    ) -> None:
        body = with_configurable({"fake_token_delay_ms": delay})
        error = assert_error(await client.post("/v1/runs", json=body), 400)
        assert error["code"] == "invalid_request"
        assert "fake_token_delay_ms" in error["message"] and "1000" in error["message"]
        await no_threads(client)

    @pytest.mark.parametrize("delay", [0, 1000, 12.5])
    async def test_delay_within_the_bound_is_accepted(
        self, client: httpx.AsyncClient, delay: Any
    ) -> None:
        response = await client.post(
            "/v1/runs", json=with_configurable({"fake_token_delay_ms": delay})
        )
        assert response.status_code == 202, response.text


class TestMessageBounds:
    """Characters per message and messages per run are bounded (413), with generous defaults."""

    async def test_message_over_the_default_character_limit_is_refused(
        self, start_server: StartServer
    ) -> None:
        server = await start_server(max_body_bytes=BIG_BODY_BYTES)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = {
                "input": {
                    "messages": [
                        {"role": "user", "content": "short"},
                        {"role": "user", "content": "a" * 100_001},
                    ]
                }
            }
            error = assert_error(await client.post("/v1/runs", json=body), 413)
            assert error["code"] == "input_too_large"
            message = error["message"]
            assert "input.messages[1].content" in message and "100000" in message, message
            assert "RUNSTREAM_MAX_MESSAGE_CHARS" in message
            await no_threads(client)
            response = await client.post("/v1/runs", json=run_body("a" * 100_000))
            assert response.status_code == 202, response.text

    async def test_more_messages_than_the_default_limit_are_refused(
        self, start_server: StartServer
    ) -> None:
        server = await start_server(max_body_bytes=BIG_BODY_BYTES)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            message = {"role": "user", "content": "hi"}
            body = {"input": {"messages": [message] * 1001}}
            error = assert_error(await client.post("/v1/runs", json=body), 413)
            assert error["code"] == "input_too_large"
            assert "1001" in error["message"] and "1000" in error["message"]
            assert "RUNSTREAM_MAX_RUN_MESSAGES" in error["message"]
            await no_threads(client)
            body = {"input": {"messages": [message] * 1000}}
            response = await client.post("/v1/runs", json=body)
            assert response.status_code == 202, response.text

    async def test_operator_set_limits_apply_on_both_run_routes(
        self, start_server: StartServer
    ) -> None:
        server = await start_server(max_message_chars=10, max_run_messages=2)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            thread_id = (await client.post("/v1/threads", json={})).json()["thread_id"]
            for url in ("/v1/runs", f"/v1/threads/{thread_id}/runs"):
                assert_error(await client.post(url, json=run_body("a" * 11)), 413)
                three = {"input": {"messages": [{"role": "user", "content": "hi"}] * 3}}
                assert_error(await client.post(url, json=three), 413)
            assert (await client.get(f"/v1/threads/{thread_id}/runs")).json()["runs"] == []
            listing = (await client.get("/v1/threads")).json()["threads"]
            assert [t["thread_id"] for t in listing] == [thread_id]
            two = {"input": {"messages": [{"role": "user", "content": "a" * 10}] * 2}}
            response = await client.post(f"/v1/threads/{thread_id}/runs", json=two)
            assert response.status_code == 202, response.text


class TestMetadataBounds:
    """Run and thread metadata are bounded in encoded bytes, keys and key length (413)."""

    @pytest.mark.parametrize(
        "metadata",
        [
            {"note": "x" * (16 * 1024)},
            {f"k{i}": 1 for i in range(65)},
            {"k" * 256: 1},
        ],
        ids=["over-16-kib", "65-keys", "256-char-key"],
    )
    @pytest.mark.parametrize("target", ["runs", "threads"])
    async def test_metadata_over_a_limit_is_refused(
        self, client: httpx.AsyncClient, metadata: dict[str, Any], target: str
    ) -> None:
        if target == "runs":
            response = await client.post("/v1/runs", json=run_body(metadata=metadata))
        else:
            response = await client.post("/v1/threads", json={"metadata": metadata})
        error = assert_error(response, 413)
        assert error["code"] == "input_too_large" and "metadata" in error["message"]
        await no_threads(client)

    @pytest.mark.parametrize("target", ["runs", "threads"])
    async def test_metadata_at_the_limits_is_accepted(
        self, client: httpx.AsyncClient, target: str
    ) -> None:
        metadata: dict[str, Any] = {f"k{i}": 1 for i in range(63)}
        metadata["k" * 255] = ""
        overhead = len(json.dumps(metadata, separators=(",", ":")).encode())
        metadata["k" * 255] = "x" * (16 * 1024 - overhead)
        if target == "runs":
            response = await client.post("/v1/runs", json=run_body(metadata=metadata))
        else:
            response = await client.post("/v1/threads", json={"metadata": metadata})
        assert response.status_code in (201, 202), response.text

    async def test_operator_set_metadata_limits_apply(self, start_server: StartServer) -> None:
        server = await start_server(max_metadata_bytes=64, max_metadata_keys=2)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for metadata in ({"a": 1, "b": 2, "c": 3}, {"note": "x" * 64}):
                response = await client.post("/v1/runs", json=run_body(metadata=metadata))
                assert_error(response, 413)
            await no_threads(client)
            response = await client.post("/v1/runs", json=run_body(metadata={"a": 1, "b": 2}))
            assert response.status_code == 202, response.text


class TestResumeBound:
    """A resume value over `RUNSTREAM_MAX_RESUME_BYTES` is a 413; the run stays interrupted."""

    async def test_oversize_resume_is_refused_and_the_run_can_still_be_resumed(
        self, client: httpx.AsyncClient, start_worker: StartWorker
    ) -> None:
        await start_worker()
        run = (await client.post("/v1/runs", json=run_body("note this", graph="approval"))).json()
        before = await wait_status(client, run["run_id"], "interrupted")
        url = f"/v1/runs/{run['run_id']}/resume"
        big = {"approve": True, "why": "x" * (64 * 1024)}
        error = assert_error(await client.post(url, json={"resume": big}), 413)
        assert error["code"] == "input_too_large"
        assert "resume" in error["message"] and "RUNSTREAM_MAX_RESUME_BYTES" in error["message"]
        after = (await client.get(f"/v1/runs/{run['run_id']}")).json()
        assert after["status"] == "interrupted" and after["interrupt"] == before["interrupt"]
        response = await client.post(url, json={"resume": {"approve": True}})
        assert response.status_code == 202, response.text
        await wait_status(client, run["run_id"], "succeeded")

    async def test_operator_set_resume_limit_applies(
        self, start_server: StartServer, start_worker: StartWorker
    ) -> None:
        server = await start_server(max_resume_bytes=32)
        await start_worker()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            body = run_body("note this", graph="approval")
            run = (await client.post("/v1/runs", json=body)).json()
            await wait_status(client, run["run_id"], "interrupted")
            url = f"/v1/runs/{run['run_id']}/resume"
            assert_error(
                await client.post(url, json={"resume": {"approve": True, "x": "y" * 32}}), 413
            )
            assert (await client.get(f"/v1/runs/{run['run_id']}")).json()["status"] == "interrupted"
            response = await client.post(url, json={"resume": {"approve": True}})
            assert response.status_code == 202, response.text


class TestLimitSettings:
    """The operator's limits are read from `RUNSTREAM_MAX_*`, with generous defaults."""

    def test_defaults_are_generous_for_chat(self) -> None:
        settings = Settings.from_env({}, env_file="")
        assert settings.max_message_chars == 100_000
        assert settings.max_run_messages == 1000
        assert settings.max_metadata_bytes == 16 * 1024
        assert settings.max_metadata_keys == 64
        assert settings.max_resume_bytes == 64 * 1024

    def test_limits_are_read_from_the_environment(self) -> None:
        env = {
            "RUNSTREAM_MAX_MESSAGE_CHARS": "10",
            "RUNSTREAM_MAX_RUN_MESSAGES": "2",
            "RUNSTREAM_MAX_METADATA_BYTES": "64",
            "RUNSTREAM_MAX_METADATA_KEYS": "3",
            "RUNSTREAM_MAX_RESUME_BYTES": "128",
        }
        settings = Settings.from_env(env, env_file="")
        limits = (
            settings.max_message_chars,
            settings.max_run_messages,
            settings.max_metadata_bytes,
            settings.max_metadata_keys,
            settings.max_resume_bytes,
        )
        assert limits == (10, 2, 64, 3, 128)

    @pytest.mark.parametrize("name", ["RUNSTREAM_MAX_MESSAGE_CHARS", "RUNSTREAM_MAX_RUN_MESSAGES"])
    def test_a_limit_of_zero_is_a_settings_error(self, name: str) -> None:
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: "0"}, env_file="")
