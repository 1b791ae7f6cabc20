"""A project's `store.index`, `store.ttl` and `checkpointer.ttl` (tests/projects/memory), served
as LangGraph's server serves them, driven by LangGraph's own Python SDK.

The project embeds with a deterministic hashed bag of words (`embeddings.py`), so texts that
share words are close. Its vectors live in pgvector on a database of each test's own
(`vector_settings`: the tests' Postgres when it has pgvector, else an embedded one).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.store.base import ensure_embeddings
from langgraph_sdk.client import LangGraphClient

from project.langgraph_json import ProjectError, load_project
from project.store_index import check_embeddings, store_options
from server.app import create_app
from server.processes.commands import migrate as migrate_command
from server.resources import open_resources
from stream_store.connections import open_pg_pool
from stream_store.migrations import migrate
from stream_store.services import open_services
from stream_store.settings import Settings
from stream_store.store import (
    SWEEP_LOCK,
    OwnerStore,
    StoreCaps,
    StoreOptions,
    VectorsUnavailable,
    index_config,
    open_store,
    sweep_expired_items,
)
from tests.conftest import (
    ServerHandle,
    launch_worker,
    schema_connection,
    serve_in_loop,
    stop_worker,
)
from tests.openai_compat import ReceivedRequests, running_in_thread
from tests.processes import ROOT
from tests.projects.memory.embeddings import embed_texts
from tests.test_langgraph_api import API_KEYS, client_for, human, messages_of

MEMORY = ROOT / "tests" / "projects" / "memory"
EMBED = f"{MEMORY / 'embeddings.py'}:embed_texts"
INDEX = {"dims": 128, "embed": EMBED, "fields": ["text"]}
GRAPHS = {"memory": f"{MEMORY / 'memory.py'}:graph", "waits": f"{MEMORY / 'memory.py'}:waits"}

Start = Callable[..., Awaitable[tuple[LangGraphClient, LangGraphClient]]]


def project(folder: Path, **keys: Any) -> Path:
    """A langgraph.json in `folder` serving the memory project's files with `keys` added."""
    path = folder / "langgraph.json"
    path.write_text(json.dumps({"graphs": GRAPHS, **keys}))
    return path


@pytest.fixture
async def start(vector_settings: Settings) -> Any:
    """Start a server and a worker in this loop on the project at `config` (default: the
    memory project); alice's and bob's SDK clients."""
    servers: list[ServerHandle] = []
    workers: list[Any] = []

    async def start(
        config: Path = MEMORY / "langgraph.json", **changes: Any
    ) -> tuple[LangGraphClient, LangGraphClient]:
        settings = replace(vector_settings, config_path=str(config), api_keys=API_KEYS, **changes)
        server = await serve_in_loop(create_app(settings))
        servers.append(server)
        workers.append(await launch_worker(settings))
        return client_for(server.url, "key-a"), client_for(server.url, "key-b")

    yield start
    for worker, task in workers:
        await stop_worker(worker, task)
    for server in servers:
        await server.stop()


async def ask(client: LangGraphClient, text: str, thread_id: str | None = None) -> str:
    out = await client.runs.wait(thread_id, "memory", input=human(text))
    assert isinstance(out, dict)
    return str(messages_of(out)[-1][1])


def keys_of(found: Any) -> list[str]:
    return [item["key"] for item in found["items"]]


async def test_a_graph_remembers_and_recalls_by_meaning_for_its_owner_only(start: Start) -> None:
    alice, bob = await start()
    for fact in ("I like hiking in the mountains", "my cat is called Tom", "the wifi is slow"):
        assert await ask(alice, f"remember {fact}") == "noted"
    assert await ask(bob, "remember my cat is called Felix") == "noted"

    # the graph's `asearch(query=...)` on the run owner's store: the closest memory first
    recalled = await ask(alice, "what is my cat called")
    assert recalled.split(" | ")[0] == "my cat is called Tom"
    assert "Felix" not in recalled
    assert (await ask(bob, "what is my cat called")).split(" | ") == ["my cat is called Felix"]

    # what the graph wrote is what the owner's search_items shows, ranked the same way
    found = await alice.store.search_items(["memories"], query="cat called", limit=10)
    texts = [item["value"]["text"] for item in found["items"]]
    assert texts[0] == "my cat is called Tom"
    assert sorted(texts) == sorted(
        ["I like hiking in the mountains", "my cat is called Tom", "the wifi is slow"]
    )
    scores = [item["score"] for item in found["items"]]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    theirs = await bob.store.search_items(["memories"], query="cat called")
    assert [item["value"]["text"] for item in theirs["items"]] == ["my cat is called Felix"]


async def test_search_ranks_by_the_indexed_fields_with_filters_and_caps_kept(
    start: Start,
) -> None:
    alice, _ = await start(max_store_items=6)
    put = alice.store.put_item
    await put(["docs"], "sat", {"text": "the cat sat on the mat", "other": "zzz"})
    await put(["docs"], "dogs", {"text": "dogs chase cars", "other": "cat cat cat"})
    await put(["docs"], "both", {"text": "a cat and a dog", "kind": "pets"})
    await put(["docs"], "titled", {"title": "cat", "text": "nothing here"}, index=["title"])
    await put(["docs"], "unindexed", {"text": "cat"}, index=False)

    found = await alice.store.search_items(["docs"], query="cat", limit=10)
    ranked = keys_of(found)
    # `index` of the put replaces the project's fields; `other` is not embedded (fields)
    assert ranked[0] == "titled"
    assert set(ranked[1:3]) == {"sat", "both"}
    assert ranked.index("dogs") > ranked.index("sat")
    assert "unindexed" not in ranked  # put with index=False: nothing to rank it by
    by_key = {item["key"]: item["score"] for item in found["items"]}
    assert by_key["titled"] == pytest.approx(1.0)

    filtered = await alice.store.search_items(["docs"], query="cat", filter={"kind": "pets"})
    assert keys_of(filtered) == ["both"]
    paged = await alice.store.search_items(["docs"], query="cat", limit=1, offset=1)
    assert keys_of(paged) == [ranked[1]]
    plain = await alice.store.search_items(["docs"], limit=10)  # no query: no ranking, no score
    assert {item["score"] for item in plain["items"]} == {None}
    assert len(plain["items"]) == 5

    with pytest.raises(httpx.HTTPStatusError) as too_long:
        await alice.store.search_items(["docs"], query="cat " * 2049)
    assert too_long.value.response.status_code == 422

    await put(["docs"], "sixth", {"text": "one more"})
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await put(["docs"], "seventh", {"text": "one too many"})
    assert refused.value.response.status_code == 413


async def test_an_item_expires_after_the_projects_default_ttl(
    start: Start, tmp_path: Path, vector_settings: Settings
) -> None:
    ttl = {"default_ttl": 0.03, "sweep_interval_minutes": 0.01, "refresh_on_read": False}
    alice, _ = await start(project(tmp_path, store={"index": INDEX, "ttl": ttl}))
    await alice.store.put_item(["notes"], "short", {"text": "gone soon"})
    await alice.store.put_item(["notes"], "kept", {"text": "stays"}, ttl=10)
    assert await alice.store.get_item(["notes"], "short") is not None

    async def rows() -> list[str]:
        async with await schema_connection(vector_settings) as conn:
            cur = await conn.execute("SELECT key FROM store ORDER BY key")
            return [row[0] for row in await cur.fetchall()]

    for _ in range(100):  # 1.8 s to expire, then a worker's sweep (every 0.6 s) deletes it
        if await rows() == ["kept"]:
            break
        await asyncio.sleep(0.1)
    assert await rows() == ["kept"]
    assert await alice.store.get_item(["notes"], "short") is None
    found = await alice.store.search_items(["notes"], query="gone soon")
    assert keys_of(found) == ["kept"]


async def test_checkpointer_ttl_deletes_idle_threads_and_keeps_running_ones(
    start: Start, tmp_path: Path
) -> None:
    ttl = {"strategy": "delete", "default_ttl": 0.02, "sweep_interval_minutes": 0.005}
    alice, _ = await start(project(tmp_path, checkpointer={"ttl": ttl}))
    idle = (await alice.threads.create())["thread_id"]
    await ask(alice, "remember nothing", idle)
    busy = (await alice.threads.create())["thread_id"]
    run = await alice.runs.create(busy, "waits", input=human("4"))

    async def gone(thread_id: str) -> bool:
        try:
            await alice.threads.get(thread_id)
        except httpx.HTTPStatusError as exc:
            assert exc.response.status_code == 404
            return True
        return False

    for _ in range(60):  # idle for 1.2 s, then the next sweep (every 0.3 s)
        if await gone(idle):
            break
        await asyncio.sleep(0.1)
    assert await gone(idle)
    assert (await alice.runs.get(busy, run["run_id"]))["status"] in ("pending", "running")
    assert not await gone(busy)  # idle longer than the TTL, but its run is running
    await alice.runs.join(busy, run["run_id"])
    for _ in range(60):  # idle once its run ended
        if await gone(busy):
            break
        await asyncio.sleep(0.1)
    assert await gone(busy)


class TestRefusedAtStart:
    """A `store.index` that cannot be served stops the process before it serves anything,
    naming the file, the key and the cause."""

    @pytest.mark.parametrize(
        ("store", "key", "cause"),
        [
            ({"index": {"embed": EMBED}}, "store.index", "missing required field `dims`"),
            ({"index": {"dims": 0, "embed": EMBED}}, "store.index.dims", ">= 1"),
            ({"index": {"dims": 8, "embed": "./nowhere.py:f"}}, "store.index.embed", "nowhere"),
            (
                {"index": {"dims": 8, "embed": f"{MEMORY / 'embeddings.py'}:missing"}},
                "store.index.embed",
                "has no 'missing'",
            ),
            (
                {"index": {"dims": 8, "embed": f"{MEMORY / 'embeddings.py'}:not_a_function"}},
                "store.index.embed",
                "is a int, not Embeddings or a function",
            ),
            (
                {"index": {"dims": 8, "embed": EMBED, "ann_index_config": {"kind": "hnsw"}}},
                "store.index",
                "unknown field `ann_index_config`",
            ),
            ({"path": "./store.py:make"}, "store.path", "custom store (store.path) is not"),
            ({"ttl": {"default_ttl": -1}}, "store.ttl.default_ttl", "> 0"),
        ],
    )
    def test_a_bad_store_is_refused_naming_the_key(
        self, tmp_path: Path, store: dict[str, Any], key: str, cause: str
    ) -> None:
        path = project(tmp_path, store=store)
        with pytest.raises(ProjectError) as caught:
            store_options(load_project(path))
        assert (caught.value.key, caught.value.file) == (key, str(path))
        assert cause in caught.value.cause

    @pytest.mark.parametrize(
        ("checkpointer", "key", "cause"),
        [
            ({"serde": {"allowed_json_modules": True}}, "checkpointer.serde", "not served"),
            ({"path": "./saver.py:make"}, "checkpointer.path", "custom checkpointer"),
            ({"ttl": {"strategy": "keep_latest"}}, "checkpointer.ttl.strategy", "keep_latest"),
            ({"ttl": {"default_ttl": 5, "every": 1}}, "checkpointer.ttl", "unknown field"),
        ],
    )
    def test_what_runstream_does_not_serve_of_checkpointer_is_refused(
        self, tmp_path: Path, checkpointer: dict[str, Any], key: str, cause: str
    ) -> None:
        path = project(tmp_path, checkpointer=checkpointer)
        with pytest.raises(ProjectError) as caught:
            load_project(path)
        assert caught.value.key == key
        assert cause in caught.value.cause

    def test_a_provider_and_model_without_langchain_names_the_package(self, tmp_path: Path) -> None:
        path = project(tmp_path, store={"index": {"dims": 8, "embed": "openai:text-e-3"}})
        try:
            import langchain  # noqa: F401
        except ImportError:
            with pytest.raises(ProjectError, match="pip install langchain") as caught:
                store_options(load_project(path))
            assert caught.value.key == "store.index.embed"
        else:  # with langchain, init_embeddings makes them (or says why not)
            try:
                store_options(load_project(path))
            except ProjectError as refused:
                assert refused.key == "store.index.embed"

    async def test_embeddings_of_other_dimensions_are_refused(self, tmp_path: Path) -> None:
        short = f"{MEMORY / 'embeddings.py'}:embed_short"
        loaded = load_project(project(tmp_path, store={"index": {**INDEX, "embed": short}}))
        with pytest.raises(ProjectError, match="makes vectors of 32 dimensions") as caught:
            await check_embeddings(store_options(loaded), loaded)
        assert caught.value.key == "store.index.dims"

    @pytest.mark.slow
    @pytest.mark.parametrize("command", ["serve", "worker"])
    async def test_the_command_refuses_in_one_line_and_exits_2(
        self, tmp_path: Path, vector_settings: Settings, command: str
    ) -> None:
        short = f"{MEMORY / 'embeddings.py'}:embed_short"
        path = project(tmp_path, store={"index": {**INDEX, "embed": short}})
        env = {
            **os.environ,
            "RUNSTREAM_REDIS_URL": str(vector_settings.redis_url),
            "RUNSTREAM_DATABASE_URL": str(vector_settings.database_url),
            "RUNSTREAM_DATABASE_SCHEMA": vector_settings.database_schema,
            "RUNSTREAM_REDIS_PREFIX": vector_settings.redis_prefix,
        }
        argv = [sys.executable, "-m", "server.processes.cli", command, "--config", str(path)]
        done = await asyncio.to_thread(
            subprocess.run, argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(f"runstream: {path}: store.index.dims: is 128, but ")

    async def test_a_server_does_not_start_on_bad_dims(
        self, tmp_path: Path, vector_settings: Settings
    ) -> None:
        short = f"{MEMORY / 'embeddings.py'}:embed_short"
        path = project(tmp_path, store={"index": {**INDEX, "embed": short}})
        with pytest.raises(ProjectError, match=r"store\.index\.dims"):
            async with open_resources(replace(vector_settings, config_path=str(path))):
                pass


async def _migrate(settings: Settings, options: StoreOptions) -> None:
    pool = await open_pg_pool(settings)
    try:
        await migrate(pool, settings.database_schema, options)
    finally:
        await pool.close()


def _padded(texts: list[str]) -> list[list[float]]:
    """The memory project's embeddings, padded to 3072 dimensions."""
    return [vector + [0.0] * (3072 - len(vector)) for vector in embed_texts(texts)]


def _options(dims: int) -> StoreOptions:
    project = load_project(MEMORY / "langgraph.json")
    embeddings = store_options(project).index
    assert embeddings is not None
    return StoreOptions(index=index_config(dims, embeddings["embed"], ["text"]))


class TestTheDatabase:
    async def test_vectors_of_other_dims_than_those_stored_are_refused(
        self, vector_settings: Settings
    ) -> None:
        await _migrate(vector_settings, _options(128))
        with pytest.raises(VectorsUnavailable, match="dims is 64, but the store's vectors"):
            await _migrate(vector_settings, _options(64))

    async def test_vectors_above_hnsws_limit_for_vector_are_kept_as_halfvec(
        self, vector_settings: Settings
    ) -> None:
        await _migrate(vector_settings, _options(3072))  # text-embedding-3-large's size
        async with await schema_connection(vector_settings) as conn:
            cur = await conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'store_vectors'"
                " AND indexdef ILIKE '%hnsw%'"
            )
            assert "halfvec_cosine_ops" in (await cur.fetchone())[0]
        options = StoreOptions(index=index_config(3072, ensure_embeddings(_padded), ["text"]))
        pool = await open_pg_pool(vector_settings)
        try:
            async with open_store(pool, options) as store:
                alice = OwnerStore(store, "alice", StoreCaps())
                await alice.aput(("docs",), "cat", {"text": "a cat"})
                await alice.aput(("docs",), "car", {"text": "a fast car"})
                found = await alice.asearch(("docs",), query="cat")
        finally:
            await pool.close()
        assert [item.key for item in found] == ["cat", "car"]

    async def test_an_extension_out_of_the_search_path_is_refused(
        self, vector_settings: Settings
    ) -> None:
        async with await schema_connection(vector_settings) as conn:
            await conn.execute("CREATE SCHEMA elsewhere")
            await conn.execute("CREATE EXTENSION vector SCHEMA elsewhere")
        with pytest.raises(VectorsUnavailable, match="in schema 'elsewhere'"):
            await _migrate(vector_settings, _options(128))

    async def test_a_role_that_cannot_create_the_extension_is_told_what_to_run(
        self, vector_settings: Settings, test_id: str
    ) -> None:
        role, database = f"r_{test_id}", f"v_{test_id}"  # the database `vector_settings` made
        async with await schema_connection(vector_settings) as conn:
            await conn.execute(f'CREATE ROLE "{role}"')
            await conn.execute(f'GRANT CREATE ON DATABASE "{database}" TO "{role}"')
            await conn.execute(f'ALTER DATABASE "{database}" SET role TO "{role}"')
        try:
            with pytest.raises(VectorsUnavailable, match="CREATE EXTENSION vector"):
                await _migrate(vector_settings, _options(128))
        finally:
            async with await schema_connection(vector_settings) as conn:
                await conn.execute("SET ROLE NONE")  # back to the superuser the tests log in as
                await conn.execute(f'ALTER DATABASE "{database}" RESET role')
                await conn.execute(f'DROP OWNED BY "{role}"')
                await conn.execute(f'DROP ROLE "{role}"')

    async def test_runstream_migrate_makes_the_projects_index_tables(
        self, vector_settings: Settings
    ) -> None:
        config = str(MEMORY / "langgraph.json")
        await asyncio.to_thread(migrate_command, replace(vector_settings, config_path=config))
        async with await schema_connection(vector_settings) as conn:
            cur = await conn.execute(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid ="
                " to_regclass('store_vectors') AND attname = 'embedding'"
            )
            assert (await cur.fetchone())[0] == 128

    async def test_the_tests_database_serves_an_index_or_says_how_to_install_pgvector(
        self, settings: Settings
    ) -> None:
        """The tests' own Postgres: with pgvector the index's tables are made; without it
        (Debian's postgresql-15 has none) the start is refused, saying how to get it."""
        async with await schema_connection(settings) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'"
            )
            available = (await cur.fetchone())[0] == 1
        if available:
            await _migrate(settings, _options(128))
            async with await schema_connection(settings) as conn:
                cur = await conn.execute("SELECT to_regclass('store_vectors') IS NOT NULL")
                assert (await cur.fetchone())[0]
        else:
            with pytest.raises(VectorsUnavailable, match="pgvector") as caught:
                await _migrate(settings, _options(128))
            assert "apt-get install postgresql-<major>-pgvector" in str(caught.value)


async def test_one_worker_at_a_time_deletes_expired_items(settings: Settings) -> None:
    async with open_services(settings) as services:
        await services.store.aput(("notes",), "old", {"v": 1}, ttl=1)
        await services.store.aput(("notes",), "new", {"v": 2})
        async with await schema_connection(settings) as conn:
            await conn.execute("UPDATE store SET expires_at = now() WHERE key = 'old'")
            async with conn.transaction():  # another worker is sweeping
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SWEEP_LOCK,))
                assert await sweep_expired_items(services.pool) is None
        assert await sweep_expired_items(services.pool) == 1
        assert [item.key for item in await services.store.asearch(("notes",))] == ["new"]


@pytest.mark.slow
async def test_the_memory_agent_example_remembers_across_threads(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/memory-agent, unchanged, on the local OpenAI-compatible server: ChatOpenAI calls
    the `remember` tool, the fact is embedded by OpenAIEmbeddings, and another thread's turn
    recalls it into the system prompt; the store shows it to its owner only."""
    received = ReceivedRequests()
    with running_in_thread(received=received) as compat:
        monkeypatch.setenv("OPENAI_BASE_URL", compat.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "local")
        alice, bob = await start(ROOT / "examples" / "memory-agent" / "langgraph.json")

        async def say(client: LangGraphClient, text: str) -> str:
            out = await client.runs.wait(None, "memory_agent", input=human(text))
            assert isinstance(out, dict)
            return str(messages_of(out)[-1][1])

        kept = await say(alice, "remember my cat is called Tom")
        assert kept == "The remember tool returned: kept: my cat is called Tom"
        await say(alice, "remember I drink green tea")
        assert await say(alice, "what is my cat called") == "You said: what is my cat called"
        prompt = received.for_path("/v1/chat/completions")[-1]["messages"][0]
        assert prompt["role"] == "system"
        recalled = prompt["content"].split("most relevant first:\n")[1].splitlines()
        assert recalled == ["- my cat is called Tom", "- I drink green tea"]

        await say(bob, "what is my cat called")  # bob remembers nothing of alice's
        assert (
            "(nothing yet)"
            in received.for_path("/v1/chat/completions")[-1]["messages"][0]["content"]
        )
        found = await alice.store.search_items(["memories"], query="cat")
        assert found["items"][0]["value"]["text"] == "my cat is called Tom"
        assert (await bob.store.search_items(["memories"], query="cat"))["items"] == []
        embedded = received.for_path("/v1/embeddings")
        assert embedded and all(isinstance(body["input"][0], str) for body in embedded)

    # the provider gone: a search that needs an embedding is 503 (the cause is logged)
    with pytest.raises(httpx.HTTPStatusError) as unavailable:
        await alice.store.search_items(["memories"], query="cat")
    assert unavailable.value.response.status_code == 503
    assert (await alice.store.search_items(["memories"]))["items"]  # no query: no embedding
