"""A project's own auth (`auth.path` in langgraph.json), through LangGraph's Python SDK: its
`authenticate` names the caller, its `@auth.on` handlers refuse, stamp and filter, as on
LangGraph's server (docs/langgraph.md, "Auth"). The project is tests/projects/auth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, PermissionDeniedError

from project.langgraph_json import ProjectError, load_project
from server.callers.project_auth import ProjectAuth
from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.processes import ROOT
from tests.test_project import write_project

PROJECT = ROOT / "tests" / "projects" / "auth" / "langgraph.json"
ASK = {"question": "who am I?"}
AUTH_FILE = {"path": "./a.py:auth"}


def as_user(url: str, token: str | None) -> LangGraphClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return get_client(url=url, api_key=None, headers=headers)


@pytest.fixture
async def served(start_server: StartServer, start_worker: StartWorker) -> ServerHandle:
    await start_worker(config_path=str(PROJECT))
    return await start_server(config_path=str(PROJECT))


class TestSigningIn:
    async def test_no_token_is_a_401_with_the_handlers_detail(self, served: ServerHandle) -> None:
        async with httpx.AsyncClient(base_url=served.url) as http:
            answer = await http.post("/threads/search", json={})
            assert answer.status_code == 401
            assert answer.json()["detail"] == "sign in first"  # LangGraph's body: {"detail": ...}
            wrong = await http.post(
                "/threads/search", json={}, headers={"Authorization": "Bearer nope"}
            )
            assert (wrong.status_code, wrong.json()["detail"]) == (401, "unknown token")

    async def test_the_identity_owns_what_the_caller_makes(self, served: ServerHandle) -> None:
        alice, bob = as_user(served.url, "token-alice"), as_user(served.url, "token-bob")
        thread = await alice.threads.create(metadata={"topic": "plans"})

        with pytest.raises(NotFoundError):
            await bob.threads.get(thread["thread_id"])
        assert await bob.threads.search() == []
        with pytest.raises(httpx.HTTPStatusError) as missing:  # `wait` raises httpx's own
            await bob.runs.wait(thread["thread_id"], "whoami", input=ASK)
        assert missing.value.response.status_code == 404
        assert [t["thread_id"] for t in await alice.threads.search()] == [thread["thread_id"]]

    @pytest.mark.parametrize("path", ["/threads/search", "/v1/threads"])
    @pytest.mark.parametrize(
        ("token", "detail"),
        [
            ("token-value-error", "that token is not of our shape"),
            ("token-none", "authenticate must return a user id"),
        ],
        ids=["value-error", "none"],
    )
    async def test_an_authenticate_that_names_no_user_is_a_400_on_every_route(
        self, served: ServerHandle, path: str, token: str, detail: str
    ) -> None:
        """As LangGraph's server answers (docs/langgraph.md, "Auth"): 400, on its routes and
        on /v1 alike (a ValueError was a 422 on LangGraph's routes, None a 500)."""
        async with httpx.AsyncClient(base_url=served.url) as http:
            if path == "/v1/threads":
                answer = await http.get(path, headers={"Authorization": f"Bearer {token}"})
            else:
                answer = await http.post(
                    path, json={}, headers={"Authorization": f"Bearer {token}"}
                )
        assert answer.status_code == 400, answer.text[:200]
        body = answer.json()
        message = body["detail"] if "detail" in body else body["error"]["message"]
        assert detail in message

    @pytest.mark.parametrize("token", ["token-nul", "token-long"])
    async def test_an_identity_no_owner_can_carry_is_a_401(
        self, served: ServerHandle, token: str
    ) -> None:
        """A NUL in the identity was a 500 on a create, 3,000 characters a 503 on every write
        (the owner indexes' row size): refused where the caller is made."""
        async with httpx.AsyncClient(base_url=served.url) as http:
            for method, path in [("POST", "/threads"), ("POST", "/v1/threads")]:
                answer = await http.request(
                    method, path, json={}, headers={"Authorization": f"Bearer {token}"}
                )
                assert answer.status_code == 401, answer.text[:200]
                assert "identity is refused" in answer.text


class TestResourceRules:
    async def test_a_create_handler_stamps_the_threads_metadata(self, served: ServerHandle) -> None:
        alice = as_user(served.url, "token-alice")
        thread = await alice.threads.create(metadata={"topic": "plans"})
        assert thread["metadata"] == {"topic": "plans", "created_by": "alice"}
        assert (await alice.threads.get(thread["thread_id"]))["metadata"]["created_by"] == "alice"

    async def test_a_handler_returning_false_is_a_403(self, served: ServerHandle) -> None:
        alice = as_user(served.url, "token-alice")
        thread = await alice.threads.create()
        with pytest.raises(PermissionDeniedError) as refused:
            await alice.threads.delete(thread["thread_id"])
        assert refused.value.response.json()["detail"] == "Forbidden"
        assert (await alice.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]

    async def test_an_assertion_refuses_with_its_message(self, served: ServerHandle) -> None:
        victor = as_user(served.url, "token-victor")
        thread = await victor.threads.create(metadata={"visibility": "public"})
        with pytest.raises(PermissionDeniedError) as refused:
            await victor.runs.create(thread["thread_id"], "whoami", input=ASK)
        assert refused.value.response.json()["detail"] == "viewers cannot start runs"
        assert await victor.runs.list(thread["thread_id"]) == []

    async def test_a_filter_narrows_search_and_hides_the_rest(self, served: ServerHandle) -> None:
        victor = as_user(served.url, "token-victor")
        public = await victor.threads.create(metadata={"visibility": "public"})
        private = await victor.threads.create(metadata={"visibility": "private"})

        found = await victor.threads.search()
        assert [t["thread_id"] for t in found] == [public["thread_id"]]
        assert await victor.threads.count() == 1
        assert (await victor.threads.get(public["thread_id"]))["thread_id"] == public["thread_id"]
        with pytest.raises(NotFoundError):
            await victor.threads.get(private["thread_id"])
        with pytest.raises(NotFoundError):
            await victor.threads.get_state(private["thread_id"])

    async def test_v1_asks_the_same_handlers_as_langgraphs_routes(
        self, served: ServerHandle
    ) -> None:
        """Issue 31's finding: `/v1` let through what the handlers refuse on LangGraph's
        routes. A thread `never_delete` keeps is kept on `/v1` too; victor's filter (public
        threads only) hides a private thread's runs, events and listing on `/v1` as well."""
        alice = as_user(served.url, "token-alice")
        thread = await alice.threads.create()
        async with httpx.AsyncClient(base_url=served.url) as http:
            kept = await http.delete(
                f"/v1/threads/{thread['thread_id']}",
                headers={"Authorization": "Bearer token-alice"},
            )
            assert (kept.status_code, kept.json()["error"]["message"]) == (403, "Forbidden")
            assert (await alice.threads.get(thread["thread_id"]))["thread_id"] == thread[
                "thread_id"
            ]

            victor = {"Authorization": "Bearer token-victor"}
            made = [
                (await http.post("/v1/threads", json={"metadata": m}, headers=victor)).json()
                for m in ({"visibility": "public"}, {"visibility": "private"})
            ]
            public, private = (t["thread_id"] for t in made)
            listing = (await http.get("/v1/threads", headers=victor)).json()["threads"]
            assert [t["thread_id"] for t in listing] == [public]
            hidden = await http.get(f"/v1/threads/{private}", headers=victor)
            assert hidden.status_code == 404

    async def test_the_graph_sees_the_user(self, served: ServerHandle) -> None:
        alice = as_user(served.url, "token-alice")
        thread = await alice.threads.create()
        values = await alice.runs.wait(thread["thread_id"], "whoami", input=ASK)
        assert isinstance(values, dict)
        assert values["seen"] == {
            "user_id": "alice",
            "identity": "alice",
            "display_name": "Alice",
            "team": "red",
            "permissions": ["threads:write"],
            "server_info_user": "alice",
        }
        (run,) = await alice.runs.list(thread["thread_id"])
        assert run["metadata"]["run_by"] == "alice"  # stamped by `threads.create_run`

    async def test_the_store_routes_through_the_handlers_namespace(
        self, served: ServerHandle
    ) -> None:
        alice, bob = as_user(served.url, "token-alice"), as_user(served.url, "token-bob")
        await alice.store.put_item(["notes"], "todo", {"text": "buy milk"})
        item = await alice.store.get_item(["notes"], "todo")
        assert item is not None and item["namespace"] == ["alice", "notes"]
        assert await bob.store.get_item(["notes"], "todo") is None
        found = await alice.store.search_items(["notes"])
        assert [i["key"] for i in found["items"]] == ["todo"]
        listed = await alice.store.list_namespaces()
        assert listed["namespaces"] == [["alice", "notes"]]

    async def test_assistants_are_stamped_and_filtered(self, served: ServerHandle) -> None:
        alice = as_user(served.url, "token-alice")
        victor = as_user(served.url, "token-victor")
        mine = await alice.assistants.create("whoami", metadata={"purpose": "demo"})
        assert mine["metadata"] == {"purpose": "demo", "made_by": "alice"}
        made = await victor.assistants.create("whoami")  # allowed, but outside his filter
        assert made["metadata"]["made_by"] == "victor"

        found = await victor.assistants.search(limit=50)
        assert {a["graph_id"] for a in found} >= {"whoami"}  # the graphs' own are his to see
        assert {a["metadata"]["created_by"] for a in found} == {"system"}
        with pytest.raises(NotFoundError):
            await victor.assistants.get(made["assistant_id"])
        assert (await alice.assistants.get(mine["assistant_id"]))["name"] == mine["name"]

    async def test_crons_are_stamped_refused_and_filtered(self, served: ServerHandle) -> None:
        alice = as_user(served.url, "token-alice")
        cron = await alice.crons.create("whoami", schedule="0 0 1 1 *", input=ASK)
        assert cron["metadata"] == {"made_by": "alice"}
        with pytest.raises(PermissionDeniedError):
            await alice.crons.delete(cron["cron_id"])
        assert [c["cron_id"] for c in await alice.crons.search()] == [cron["cron_id"]]


class TestLoadingTheAuth:
    def test_the_auth_of_the_test_project_loads(self) -> None:
        source = load_project(PROJECT).auth
        assert source is not None and source.key == "auth.path"
        assert ProjectAuth.load(source).description == "the project's auth (auth.path)"

    @pytest.mark.parametrize(
        ("auth", "files", "key", "cause"),
        [
            (
                {"path": "./a.py:auth"},
                {"a.py": "import nope\n"},
                "auth.path",
                "ModuleNotFoundError",
            ),
            (
                {"path": "./a.py:auth"},
                {"a.py": "auth = 3\n"},
                "auth.path",
                "not a langgraph_sdk.Auth",
            ),
            (
                {"path": "./a.py:auth"},
                {"a.py": "from langgraph_sdk import Auth\nauth = Auth()\n"},
                "auth.path",
                "has no @auth.authenticate handler",
            ),
            ({"path": "./missing.py:auth"}, {}, "auth.path", "is not a file"),
            ({"openapi": {}}, {}, "auth.path", "required"),
            ({"path": "./a.py:auth", "colour": 1}, {}, "auth.colour", "not a key"),
            (
                {"path": "./a.py:auth", "allow_langsmith_api_keys": True},
                {},
                "auth.allow_langsmith_api_keys",
                "not served",
            ),
        ],
    )
    def test_an_auth_that_cannot_be_served_refuses_start(
        self, tmp_path: Path, auth: dict[str, Any], files: dict[str, str], key: str, cause: str
    ) -> None:
        path = write_project(
            tmp_path, {"graphs": {"g": "./g.py:graph"}, "auth": auth}, **{"g.py": ""}, **files
        )
        with pytest.raises(ProjectError) as refused:
            source = load_project(path).auth
            assert source is not None
            ProjectAuth.load(source)
        assert (refused.value.file, refused.value.key) == (str(path), key)
        assert cause in refused.value.cause

    def test_keys_without_effect_are_accepted(self, tmp_path: Path) -> None:
        auth = {"path": "./a.py:auth", "disable_studio_auth": True, "openapi": {}, "cache": {}}
        path = write_project(
            tmp_path, {"graphs": {"g": "./g.py:graph"}, "auth": auth}, **{"g.py": "", "a.py": ""}
        )
        source = load_project(path).auth
        assert source is not None and source.path == tmp_path / "a.py"
