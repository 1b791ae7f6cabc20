"""A user's LangGraph project (`--config langgraph.json`): its file read, its refusals, and the
tiny project of tests/projects/tiny served by a real server and worker through the SDK."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from project.langgraph_json import NOT_SERVED_YET, ProjectError, load_project
from runner.graph_registry import GraphRegistry
from stream_store.settings import Settings
from tests.processes import ROOT, Cluster
from tests.test_langgraph_api import client_for, human

TINY = ROOT / "tests" / "projects" / "tiny"


def write_project(folder: Path, config: dict[str, Any], **files: str) -> Path:
    """A langgraph.json with `config` in `folder`, beside `files` (name: source)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    path = folder / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def refusal(path: Path) -> ProjectError:
    """The error loading the project at `path` and importing its graphs ends in."""
    with pytest.raises(ProjectError) as caught:
        GraphRegistry(load_project(path).graphs).validate()
    return caught.value


GRAPH_FILE = "from tests.custom_graphs import builder\n"


class TestReadingTheFile:
    def test_the_tiny_project(self) -> None:
        project = load_project(TINY / "langgraph.json")
        assert set(project.graphs) == {"agent", "packaged", "per_run", "with_runtime"}
        assert project.graphs["agent"].path == TINY / "agent.py"
        assert project.graphs["agent"].key == "graphs.agent"
        assert project.graphs["agent"].module == "__agent"  # as LangGraph imports it
        assert project.graphs["packaged"].module == "tiny_pkg.graph"
        assert project.graphs["per_run"].description == "built for each run"
        assert project.env == {"TINY_GREETING": "hello from project.env"}
        assert project.import_paths == (TINY, TINY / "src")
        assert project.ignored == ("dockerfile_lines", "python_version")

    def test_env_as_a_mapping_replaces_values_but_not_runstreams_settings(
        self, tmp_path: Path
    ) -> None:
        path = write_project(
            tmp_path,
            {
                "graphs": {"g": "./g.py:builder"},
                "env": {"A": "from the project", "RUNSTREAM_API_KEYS": "k:owner"},
            },
            **{"g.py": GRAPH_FILE},
        )
        environ = {"A": "from the shell"}
        project = load_project(path)
        project.prepare(environ)
        assert environ == {"A": "from the project"}  # as `langgraph dev` does
        assert str(tmp_path) in sys.path

    def test_a_missing_env_file_is_no_error(self, tmp_path: Path) -> None:
        path = write_project(
            tmp_path, {"graphs": {"g": "./g.py:builder"}, "env": ".env"}, **{"g.py": GRAPH_FILE}
        )
        assert load_project(path).env == {}

    def test_the_registry_serves_project_graphs_beside_the_built_ins(self) -> None:
        registry = GraphRegistry(load_project(TINY / "langgraph.json").graphs)
        assert registry.names() == [
            "agent",
            "approval",
            "chat",
            "packaged",
            "per_run",
            "with_runtime",
        ]


def _cases() -> list[tuple[dict[str, Any], dict[str, str], str, str]]:
    """(langgraph.json, files, the key named, a part of the cause) of each refusal."""
    graph = {"g.py": GRAPH_FILE}
    cases = [
        ({}, {}, "graphs", "names no graph"),
        ({"graphs": {"g": "./g.py"}}, graph, "graphs.g", "names no attribute"),
        ({"graphs": {"g": "./missing.py:graph"}}, {}, "graphs.g", "is not a file"),
        ({"graphs": {"g": "./g.ts:graph"}}, {"g.ts": ""}, "graphs.g", "JavaScript"),
        ({"graphs": {"g": 3}}, {}, "graphs.g", "Expected `str | object`, got `int`"),
        ({"graphs": {"g": {"description": "x"}}}, {}, "graphs.g", "missing required field"),
        ({"graphs": {"g": "./g.py:builder"}, "env": 3}, graph, "env", "Expected"),
        (
            {"graphs": {"g": "./g.py:builder"}, "dependencies": ["./nowhere"]},
            graph,
            "dependencies[0]",
            "is not a directory",
        ),
        ({"graphs": {"g": "./g.py:builder"}, "project_root": ".."}, graph, "project_root", ""),
        # importing the graphs
        ({"graphs": {"g": "./g.py:nothing"}}, graph, "graphs.g", "has no 'nothing'"),
        (
            {"graphs": {"g": "./bad.py:graph"}},
            {"bad.py": "import not_a_module_anywhere\n"},
            "graphs.g",
            "ModuleNotFoundError: No module named 'not_a_module_anywhere'",
        ),
        (
            {"graphs": {"g": "./bad.py:graph"}},
            {"bad.py": "graph = (\n"},
            "graphs.g",
            "SyntaxError",
        ),
        ({"graphs": {"g": "./g.py:x"}}, {"g.py": "x = 3\n"}, "graphs.g", "is a int, not a"),
        (
            {"graphs": {"g": "./g.py:make"}},
            {"g.py": "def make(a, b, c):\n    pass\n"},
            "graphs.g",
            "graph factory make takes ['a', 'b', 'c']",
        ),
        ({"graphs": {"g": "no_such_package.mod:graph"}}, {}, "graphs.g", "ModuleNotFoundError"),
        # the routes a project turns off
        (
            {"graphs": {"g": "./g.py:builder"}, "http": {"disable_a2a": "yes"}},
            graph,
            "http.disable_a2a",
            "must be true or false",
        ),
    ]
    cases += [
        ({"graphs": {"g": "./g.py:builder"}, key: {"path": "./x.py:y"}}, graph, key, "not served")
        for key in NOT_SERVED_YET
    ]
    return cases


CASES = _cases()


@pytest.mark.parametrize(("config", "files", "key", "cause"), CASES)
def test_a_project_that_cannot_be_served_is_refused_naming_file_key_and_cause(
    tmp_path: Path, config: dict[str, Any], files: dict[str, str], key: str, cause: str
) -> None:
    path = write_project(tmp_path, config, **files)
    error = refusal(path)
    assert error.key == key
    assert error.file == str(path)
    assert cause in error.cause
    assert str(error).startswith(f"{path}: {key}: ")
    assert "\n" not in str(error)


def test_a_graph_that_fails_to_import_keeps_the_users_traceback_and_names_its_line(
    tmp_path: Path,
) -> None:
    failing = "import json\n\ndef build():\n    raise RuntimeError('no model key')\n\nbuild()\n"
    path = write_project(tmp_path, {"graphs": {"g": "./bad.py:graph"}}, **{"bad.py": failing})
    error = refusal(path)
    user_file = str(tmp_path / "bad.py")
    # The one line `runstream` prints: where in the user's file, and what.
    assert f"failed at {user_file}:4: RuntimeError: no model key" in error.cause
    assert "\n" not in str(error)
    # The user's exception is chained, with its traceback through their file.
    assert isinstance(error.__cause__, RuntimeError)
    frames = traceback.extract_tb(error.__cause__.__traceback__)
    assert [(f.filename, f.lineno) for f in frames if f.filename == user_file] == [
        (user_file, 6),
        (user_file, 4),
    ]


def test_a_graph_with_a_syntax_error_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = write_project(
        tmp_path, {"graphs": {"g": "./bad.py:graph"}}, **{"bad.py": "x = 1\ngraph = )\n"}
    )
    error = refusal(path)
    assert f"failed at {tmp_path / 'bad.py'}:2: SyntaxError" in error.cause
    assert isinstance(error.__cause__, SyntaxError)


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "langgraph.json"
    path.write_text("{ not json")
    assert "is not JSON" in refusal(path).cause
    assert "cannot be read" in refusal(tmp_path / "missing.json").cause


def test_a_graph_named_in_the_project_and_in_runstream_graphs_is_refused() -> None:
    settings = Settings(
        graphs={"agent": "tests.custom_graphs:builder"},
        config_path=str(TINY / "langgraph.json"),
    )
    with pytest.raises(ProjectError, match=r"graphs\.agent: is also named in RUNSTREAM_GRAPHS"):
        GraphRegistry.from_settings(settings)


async def test_a_factory_is_built_per_run_with_the_config_and_for_reading_once() -> None:
    """In-process: each run's factory call sees its config; the structure is built once."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    project = load_project(TINY / "langgraph.json")
    project.prepare({})  # its import paths (the env into a throwaway mapping)
    registry = GraphRegistry(project.graphs)
    registry.validate()
    saver, store = InMemorySaver(), InMemoryStore()
    replies = []
    for thread in ("t1", "t2"):
        config: Any = {"configurable": {"thread_id": thread}}
        async with registry.graph_for_run("per_run", config, saver, store) as graph:
            out = await graph.ainvoke(human("hi"), config)
            replies.append(out["messages"][-1].content)
    first, second = (int(r.split()[1]) for r in replies)
    assert second == first + 1
    assert replies[1].endswith("for thread t2 | you said: hi")
    drawn = await registry.graph_for_reading("per_run", saver)
    assert drawn is await registry.graph_for_reading("per_run", saver)
    assert "reply" in drawn.nodes


def _runstream(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    environ.update(
        RUNSTREAM_REDIS_URL="redis://127.0.0.1:1/0",  # never reached: refused before
        RUNSTREAM_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "server.processes.cli", *argv],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["serve", "worker", "up"])
def test_runstream_refuses_a_bad_project_with_one_line_and_exit_2(
    tmp_path: Path, command: str
) -> None:
    webhooks = {"url": {"allowed_domains": ["ex*ample.com"]}}
    config = {"graphs": {"g": "./g.py:graph"}, "webhooks": webhooks}
    path = write_project(tmp_path, config, **{"g.py": ""})
    done = _runstream(command, "--config", str(path))
    assert done.returncode == 2, done.stderr
    assert f"runstream: {path}: webhooks.url.allowed_domains: " in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_runstream_config_names_the_project_too(tmp_path: Path) -> None:
    path = write_project(tmp_path, {"graphs": {"g": "./g.py:nothing"}}, **{"g.py": ""})
    done = _runstream("serve", RUNSTREAM_CONFIG=str(path))
    assert done.returncode == 2, done.stderr
    assert f"runstream: {path}: graphs.g: {tmp_path / 'g.py'} has no 'nothing'" in done.stderr
    assert "Traceback" not in done.stderr


def test_langgraph_json_in_the_working_folder_is_served_when_nothing_is_named(
    tmp_path: Path,
) -> None:
    from server.processes.cli import with_project

    write_project(tmp_path, {"graphs": {"g": "./g.py:graph"}})
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert with_project(Settings(), None).config_path == str(tmp_path / "langgraph.json")
        assert with_project(Settings(), "other.json").config_path == str(tmp_path / "other.json")
    finally:
        os.chdir(here)


def test_with_no_project_named_the_commands_serve_the_bundled_assistant(tmp_path: Path) -> None:
    from server.processes.cli import BUNDLED_PROJECT, with_project

    here = os.getcwd()
    os.chdir(tmp_path)  # no langgraph.json here
    try:
        resolved = with_project(Settings(), None).config_path
        assert resolved == BUNDLED_PROJECT == str(ROOT / "runner" / "assistant" / "langgraph.json")
        assert "assistant" in load_project(resolved).graphs  # a project runstream can serve
        # what is named still wins; `none` serves only the built-in graphs
        named = with_project(Settings(config_path="mine.json"), None).config_path
        assert named == str(tmp_path / "mine.json")
        assert with_project(Settings(), "none").config_path is None
        assert with_project(Settings(config_path="none"), None).config_path is None
        # a process given its Settings directly (the tests' servers and workers) is not changed
        assert Settings().config_path is None
    finally:
        os.chdir(here)


async def _last_reply(sdk: LangGraphClient, graph: str, text: str) -> tuple[str, str]:
    thread = await sdk.threads.create()
    values = await sdk.runs.wait(thread["thread_id"], graph, input=human(text))
    assert isinstance(values, dict), values
    return thread["thread_id"], values["messages"][-1]["content"]


@pytest.mark.slow
async def test_the_tiny_project_served_by_a_real_server_and_worker(cluster: Cluster) -> None:
    env = {"RUNSTREAM_CONFIG": str(TINY / "langgraph.json")}
    (_, url), _ = await asyncio.gather(cluster.server(**env), cluster.ready_worker(**env))
    sdk = client_for(url)
    graphs = {a["graph_id"] for a in await sdk.assistants.search(limit=50)}
    assert graphs == {"agent", "packaged", "per_run", "with_runtime", "chat", "approval"}

    assert (await _last_reply(sdk, "agent", "hi"))[1] == "hello from project.env"
    assert (await _last_reply(sdk, "packaged", "hi"))[1] == "from the package"
    assert (await _last_reply(sdk, "with_runtime", "yo"))[1] == (
        "built for threads.create_run | you said: yo"
    )
    assert (await _last_reply(sdk, "chat", "echo me"))[1] == "echo me"

    builds = []
    for text in ("one", "two"):
        thread_id, reply = await _last_reply(sdk, "per_run", text)
        assert reply.endswith(f"for thread {thread_id} | you said: {text}")
        builds.append(int(reply.split()[1]))
    assert builds[1] == builds[0] + 1  # the worker called the factory for each run

    drawn = await sdk.assistants.get_graph("per_run")
    assert {n["id"] for n in drawn["nodes"]} >= {"reply"}
    schemas = await sdk.assistants.get_schemas("with_runtime")
    assert schemas["graph_id"] == "with_runtime"


# Imported first by every Python process whose PYTHONPATH starts with its folder (spawned
# children too): a line for each opening of the file COUNT_OPENS_OF names, with the pid.
_COUNT_OPENS = """\
import os
import sys

_watched = os.environ.get("COUNT_OPENS_OF")


def _hook(event, args):
    if event == "open" and isinstance(args[0], (str, os.PathLike)):
        if os.fspath(args[0]) == _watched:
            sys.stderr.write(f"PROJECT FILE READ pid={os.getpid()}\\n")


if _watched:
    sys.addaudithook(_hook)
"""
_READ = "PROJECT FILE READ"
_PREPARED = "the project's env sets runstream settings"  # logged by each `Project.prepare()`


def counted_project(folder: Path) -> tuple[Path, dict[str, str]]:
    """A project that uses every reader of its file (graphs, its own auth, a custom app, an
    env file), and the environment that counts its file's reads in each process."""
    projects = ROOT / "tests" / "projects"
    (folder / "project.env").write_text("RUNSTREAM_NOT_A_SETTING=1\nPROJECT_ONCE=yes\n")
    path = write_project(
        folder / "project",
        {
            "graphs": {"whoami": f"{projects / 'auth' / 'graph.py'}:graph"},
            "auth": {"path": f"{projects / 'auth' / 'auth.py'}:auth"},
            "http": {"app": f"{projects / 'http' / 'app.py'}:app"},
            "env": "../project.env",
        },
    )
    hook = folder / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_COUNT_OPENS)
    env = {"COUNT_OPENS_OF": str(path), "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    return path, env


def test_an_app_reads_its_project_once_and_prepares_it_once(tmp_path: Path) -> None:
    path, env = counted_project(tmp_path)
    script = (
        "from server.app import create_app\n"
        "from stream_store.settings import Settings\n"
        f"create_app(Settings(config_path={str(path)!r}))\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNSTREAM_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(_READ) == 1, done.stderr
    assert (done.stdout + done.stderr).count(_PREPARED) == 1, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
async def test_runstream_serve_reads_the_project_once_and_its_processes_prepare_it_once(
    cluster: Cluster, tmp_path: Path, processes: int
) -> None:
    """The server's sign-in decision, its graphs, its project's auth and custom app come from
    one read of the file, in the parent; each process puts its env and paths in place once."""
    path, env = counted_project(tmp_path)
    server, _ = await cluster.server(processes=processes, RUNSTREAM_CONFIG=str(path), **env)
    worker = await cluster.ready_worker(RUNSTREAM_CONFIG=str(path), **env)
    for _ in range(600):  # each server process started (one answering is not all of them)
        if server.output().count("server ready") == processes:
            break
        await asyncio.sleep(0.1)
    for process, prepared in ((server, processes + (processes > 1)), (worker, 1)):
        lines = process.output().splitlines()
        reads = [line for line in lines if _READ in line]
        assert reads == [f"{_READ} pid={process.pid}"], process.tail()
        assert sum(_PREPARED in line for line in lines) == prepared, process.tail()


def test_webhooks_are_read_with_their_headers_resolved_from_the_environment(
    tmp_path: Path,
) -> None:
    webhooks = {
        "url": {"allowed_domains": ["*.example.com"], "allowed_ports": [443]},
        "headers": {"X-Static": "s", "Authorization": "Bearer ${{ env.LG_WEBHOOK_TOKEN }}"},
        "allowed_fields": ["run_id", "status"],
    }
    config = {"graphs": {"g": "./g.py:graph"}, "webhooks": webhooks}
    config["http"] = {"disable_webhooks": True}
    path = write_project(tmp_path, config, **{"g.py": ""})
    project = load_project(path, environ={"LG_WEBHOOK_TOKEN": "t0k"})
    assert project.webhook_headers == {"X-Static": "s", "Authorization": "Bearer t0k"}
    assert project.webhooks is not None and project.webhooks.url is not None
    assert project.webhooks.url.require_https  # LangGraph's default once `url` is given
    assert project.webhooks.allowed_fields == ["run_id", "status"]
    assert project.http.disable_webhooks


@pytest.mark.parametrize(
    ("webhooks", "key", "cause"),
    [
        ({"headers": {"X": "${{ env.LG_WEBHOOK_MISSING }}"}}, "webhooks.headers", "not set"),
        ({"headers": {"X": "${{ env.HOME }}"}}, "webhooks.headers", "env_prefix"),
        ({"allowed_fields": ["secrets"]}, "webhooks.allowed_fields", "'secrets'"),
        ({"url": {"allowed_domains": ["a.*.com"]}}, "webhooks.url.allowed_domains", "wildcard"),
        ({"url": {"require_http": True}}, "webhooks.url", "require_http"),
    ],
)
def test_a_bad_webhooks_key_is_refused_naming_it(
    tmp_path: Path, webhooks: dict[str, Any], key: str, cause: str
) -> None:
    config = {"graphs": {"g": "./g.py:graph"}, "webhooks": webhooks}
    path = write_project(tmp_path, config, **{"g.py": ""})
    with pytest.raises(ProjectError) as refused:
        load_project(path, environ={})
    assert refused.value.key.startswith(key) and cause in refused.value.cause
