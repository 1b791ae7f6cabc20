"""`python -m bench.langgraph_diff`: the same `langgraph_sdk` calls against `langgraph dev` and
runstream serving the same project (`bench/langgraph_diff_project`), and a diff of the answers,
so that a new LangGraph release is checked rather than re-guessed (issue 35).

What it compares: the stream modes `debug`, `tasks` and `checkpoints` (event names, a
subgraph's `mode|ns` names, each payload with its ids and timestamps normalised and a config's
`configurable` shown as its keys), a join of the finished run, LangGraph's statuses
(`update_state` of a thread never run, malformed ids in paths and bodies, a run stopped at
`interrupt()`), the interrupt items on each route, the request-scoped keys a graph finds in its
`configurable`, `/mcp` through the official `mcp` client (`initialize`, `tools/list`,
`tools/call`) and `/a2a`'s JSON-RPC calls (`langgraph_diff_a2a.py`).

`langgraph dev` comes from a venv with `langgraph-cli[inmem]`: `--langgraph-venv`, else
RUNSTREAM_LANGGRAPH_VENV; without one it prints why and exits 0 (skipped). runstream runs as
`runstream serve` and `runstream worker` children (`bench/launcher.py`) on the services
`--redis-url`/`--database-url`, else RUNSTREAM_TEST_REDIS_URL / RUNSTREAM_TEST_DATABASE_URL,
else embedded ones, in a schema and key prefix of their own, dropped at the end. Neither CLI
takes port 0, so each listens on a port picked free just before.

Exit status: 0 when it ran (differences are printed, not failed on) or was skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import APIStatusError
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from .langgraph_diff_a2a import a2a_transcript
from .launcher import ROOT, Cluster, ProcessError, free_port
from .processes import Namespace, Services, add_service_options

__all__ = ["main"]

PROJECT = ROOT / "bench" / "langgraph_diff_project"
STEP_MODES = ["debug", "tasks", "checkpoints"]
READY_TIMEOUT_S = 120.0
SHOWN_WHEN_SAME = 40  # lines of an answer both servers gave alike

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX_ID = re.compile(r"\b[0-9a-f]{32}\b")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(\+00:00|Z)?")
_CONFIGS = ("config", "parent_config")

Observation = Any
Probe = Callable[[LangGraphClient, str], Awaitable[Observation]]


def normalised(value: Any) -> Any:
    """`value` with ids and timestamps replaced by placeholders, and each `config`'s
    `configurable` by its sorted keys (each server puts its own request data there)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in _CONFIGS and isinstance(item, dict):
                keys = ", ".join(sorted((item.get("configurable") or {}).keys()))
                out[key] = {"configurable (keys)": keys}
            else:
                out[_placeholders(key)] = normalised(item)
        return out
    if isinstance(value, list):
        return [normalised(item) for item in value]
    if isinstance(value, str):
        return _placeholders(value)
    return value


def _placeholders(text: str) -> str:
    text = _UUID.sub("<uuid>", text)
    text = _HEX_ID.sub("<id>", text)
    return _TIME.sub("<time>", text)


async def _stream(sdk: LangGraphClient, graph: str, modes: list[str], **kwargs: Any) -> Any:
    thread_id = (await sdk.threads.create())["thread_id"]
    parts = [
        part
        async for part in sdk.runs.stream(
            thread_id,
            graph,
            input={"steps": []},
            stream_mode=modes,  # type: ignore[arg-type]
            **kwargs,
        )
    ]
    return thread_id, parts


async def step_modes(sdk: LangGraphClient, url: str) -> Observation:
    """A run of `steps` streamed in the three modes: each part's name and payload."""
    _, parts = await _stream(sdk, "steps", STEP_MODES, metadata={"team": "blue"})
    return [{"event": p.event, "data": normalised(p.data)} for p in parts]


async def subgraph_names(sdk: LangGraphClient, url: str) -> Observation:
    """A run of `nested` with `stream_subgraphs`: the parts' names."""
    _, parts = await _stream(sdk, "nested", ["tasks", "checkpoints"], stream_subgraphs=True)
    return [re.sub(r"\|child:.*", "|child:<task id>", p.event) for p in parts]


async def join_finished(sdk: LangGraphClient, url: str) -> Observation:
    """A run streamed in the three modes (`stream_resumable`, which LangGraph's server needs
    to keep a run's events), then joined once it ended: the join's part names."""
    thread_id, parts = await _stream(sdk, "steps", STEP_MODES, stream_resumable=True)
    run_id = parts[0].data["run_id"]
    joins = {}
    for last_event_id in (None, "-1"):
        joined = sdk.runs.join_stream(
            thread_id,
            run_id,
            stream_mode=STEP_MODES,  # type: ignore[arg-type]
            last_event_id=last_event_id,
        )
        joins[f"Last-Event-ID {last_event_id}"] = " ".join([p.event async for p in joined])
    return joins


async def update_state_never_run(sdk: LangGraphClient, url: str) -> Observation:
    """`threads.update_state` of a thread no run has named a graph for."""
    thread_id = (await sdk.threads.create())["thread_id"]
    try:
        await sdk.threads.update_state(thread_id, {"steps": ["x"]})
    except APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return {"status": exc.status_code, "detail": normalised(body.get("detail"))}
    return {"status": 200}


MALFORMED = [
    ("GET", "/threads/not-a-uuid"),
    ("GET", "/threads/not-a-uuid/state"),
    ("POST", "/threads/not-a-uuid/state"),
    ("GET", "/threads/not-a-uuid/state/abc"),
    ("POST", "/threads/not-a-uuid/state/checkpoint"),
    ("PATCH", "/threads/not-a-uuid"),
    ("DELETE", "/threads/not-a-uuid"),
    ("GET", "/threads/not-a-uuid/history"),
    ("POST", "/threads/not-a-uuid/history"),
    ("POST", "/threads/not-a-uuid/copy"),
    ("GET", "/threads/not-a-uuid/runs"),
    ("POST", "/threads/not-a-uuid/runs"),
    ("POST", "/threads/not-a-uuid/runs/stream"),
    ("POST", "/threads/not-a-uuid/runs/wait"),
    ("GET", "/threads/not-a-uuid/stream"),
    ("GET", "/threads/{thread}/runs/not-a-uuid"),
    ("GET", "/threads/{thread}/runs/not-a-uuid/join"),
    ("GET", "/threads/{thread}/runs/not-a-uuid/stream"),
    ("POST", "/threads/{thread}/runs/not-a-uuid/cancel"),
    ("DELETE", "/threads/{thread}/runs/not-a-uuid"),
]


# a malformed id in a body
MALFORMED_IN_BODY: list[tuple[str, dict[str, Any]]] = [
    ("/threads", {"thread_id": "not-a-uuid"}),
    ("/threads/search", {"ids": ["not-a-uuid"]}),
    ("/assistants", {"graph_id": "steps", "assistant_id": "not-a-uuid"}),
]


async def malformed_ids(sdk: LangGraphClient, url: str) -> Observation:
    """A malformed thread or run id in a path (and a few in bodies): each status and
    `detail`."""
    thread_id = (await sdk.threads.create())["thread_id"]
    answers = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        for method, path in MALFORMED:
            body: dict[str, Any] | None = (
                {"values": {}, "metadata": {}} if method in ("POST", "PATCH") else None
            )
            if path.endswith(("/runs", "/runs/stream", "/runs/wait")):
                body = {"assistant_id": "steps", "input": {"steps": []}}
            elif path.endswith("/state/checkpoint"):
                body = {"checkpoint": {}}
            answer = await http.request(method, path.format(thread=thread_id), json=body)
            answers.append(f"{method} {path} -> {_status_and_detail(answer)}")
        for path, body in MALFORMED_IN_BODY:
            answer = await http.post(path, json=body)
            answers.append(f"POST {path} {json.dumps(body)} -> {_status_and_detail(answer)}")
    return answers


def _status_and_detail(answer: httpx.Response) -> str:
    try:
        detail = answer.json().get("detail") if answer.content else None
    except ValueError:
        detail = answer.text[:200]
    return f"{answer.status_code} {detail!r}"


async def interrupted_run(sdk: LangGraphClient, url: str) -> Observation:
    """A run stopped at `interrupt()`: `wait`'s answer, the run's and the thread's status, the
    interrupt items streamed (`updates`, `values`), in the state and in a join of the run."""
    thread_id = (await sdk.threads.create())["thread_id"]
    answer = await sdk.runs.wait(thread_id, "asks", input={"steps": []})
    runs = await sdk.runs.list(thread_id)
    thread = await sdk.threads.get(thread_id)
    streamed_thread = (await sdk.threads.create())["thread_id"]
    streamed = [
        {"event": part.event, "data": normalised(part.data)}
        async for part in sdk.runs.stream(
            streamed_thread, "asks", input={"steps": []}, stream_mode=["updates", "values"]
        )
        if part.event != "metadata"
    ]
    state = await sdk.threads.get_state(thread_id)
    return {
        "wait": normalised(answer),
        "run status": [run["status"] for run in runs],
        "thread status": thread["status"],
        "thread interrupts": normalised(thread["interrupts"]),
        "state interrupts": normalised(state["interrupts"]),
        "state task interrupts": normalised([t["interrupts"] for t in state["tasks"]]),
        "join of the run, over": normalised(await sdk.runs.join(thread_id, runs[0]["run_id"])),
        "streamed (updates, values)": streamed,
    }


# what LangGraph's server adds to a run's `configurable`, beside the ids both servers set
REQUEST_SCOPED = ("langgraph_request_id", "__request_start_time_ms__", "__after_seconds__")


async def request_scoped_configurable(sdk: LangGraphClient, url: str) -> Observation:
    """The `configurable` a graph finds (the `configured` graph writes it down): each key with
    its value's type; the request's id and start, `__after_seconds__` and `user_id` with what
    they hold (the request's `X-Request-ID`, whether the start is within the request)."""
    headers = {"X-Request-ID": "diff-request-1"}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as http:
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        before_ms = int(time.time() * 1000)
        answer = await http.post(
            f"/threads/{thread_id}/runs/wait",
            json={"assistant_id": "configured", "input": {"seen": {}}},
        )
        after_ms = int(time.time() * 1000)
    seen = answer.json().get("seen") or {}
    started = seen.get("__request_start_time_ms__")
    return {
        "keys (value type)": {k: type(v).__name__ for k, v in sorted(seen.items())},
        "langgraph_request_id": seen.get("langgraph_request_id"),
        "__request_start_time_ms__ within the request": isinstance(started, int)
        and before_ms <= started <= after_ms,
        "__after_seconds__": seen.get("__after_seconds__"),
        "user_id": seen.get("user_id"),
        "user_id is langgraph_auth_user_id": seen.get("user_id")
        == seen.get("langgraph_auth_user_id"),
    }


async def mcp_calls(sdk: LangGraphClient, url: str) -> Observation:
    """`/mcp` through the official `mcp` client over streamable HTTP: `initialize`, `tools/list`
    (each tool's name, description and input schema), `tools/call` of a reply, a failure, a
    graph without messages and an unknown tool."""
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        started = await session.initialize()
        tools = (await session.list_tools()).tools
        calls: dict[str, Any] = {}
        asked: list[tuple[str, dict[str, Any]]] = [
            ("echo", {"messages": "hello"}),
            ("fails", {"messages": "x"}),
            ("plain", {"x": 1}),
            ("no_such_tool", {}),
        ]
        for name, arguments in asked:
            try:
                called = await session.call_tool(name, arguments)
            except MCPError as exc:
                calls[name] = {"JSON-RPC error": exc.error.code, "message": exc.error.message}
                continue
            calls[name] = normalised(_wire(called))
    return {
        "initialize": {
            "protocolVersion": started.protocol_version,
            "capabilities": _wire(started.capabilities),
            "serverInfo.name": started.server_info.name,
        },
        "tools/list": [normalised(_wire(tool)) for tool in tools],
        "tools/call": calls,
    }


def _wire(model: Any) -> Any:
    """An `mcp` result as it came over the wire (camelCase names, no unset fields)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def a2a_calls(sdk: LangGraphClient, url: str) -> Observation:
    """`/a2a`'s JSON-RPC calls (`langgraph_diff_a2a.py`), one transcript line each answer."""
    return await asyncio.to_thread(a2a_transcript, url)


PROBES: list[tuple[str, Probe]] = [
    ("stream modes debug, tasks, checkpoints (steps)", step_modes),
    ("subgraph part names (nested, stream_subgraphs)", subgraph_names),
    ("join of a finished run in those modes", join_finished),
    ("update_state of a thread never run", update_state_never_run),
    ("malformed ids in paths", malformed_ids),
    ("a run stopped at interrupt()", interrupted_run),
    ("request-scoped configurable keys", request_scoped_configurable),
    ("/mcp (official mcp client)", mcp_calls),
    ("/a2a (JSON-RPC)", a2a_calls),
]


async def observe(url: str) -> dict[str, Observation]:
    sdk = get_client(url=url, api_key=None, headers={})
    seen: dict[str, Observation] = {}
    for name, probe in PROBES:
        try:
            seen[name] = await probe(sdk, url)
        except Exception as exc:  # a probe's failure is an answer to compare, not a crash
            seen[name] = {"probe failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return seen


def report(langgraph: dict[str, Observation], runstream: dict[str, Observation]) -> str:
    """Each probe: `same`, or both answers and a unified diff of them."""
    lines: list[str] = []
    for name, _ in PROBES:
        theirs = json.dumps(langgraph[name], indent=1, sort_keys=False).splitlines()
        ours = json.dumps(runstream[name], indent=1, sort_keys=False).splitlines()
        lines.append(f"=== {name}: {'same' if theirs == ours else 'DIFFERENT'}")
        if theirs == ours:
            lines += ["  " + line for line in theirs[:SHOWN_WHEN_SAME]]
            if len(theirs) > SHOWN_WHEN_SAME:
                lines.append(f"  ... ({len(theirs) - SHOWN_WHEN_SAME} more lines)")
            continue
        lines += list(
            difflib.unified_diff(theirs, ours, "langgraph dev", "runstream", n=2, lineterm="")
        )
    return "\n".join(lines)


def langgraph_cli(venv: str | None) -> Path | None:
    if not venv:
        return None
    cli = Path(venv) / "bin" / "langgraph"
    return cli if cli.exists() else None


def _start_langgraph(
    cli: Path, workdir: Path, port: int, project: Path = PROJECT
) -> subprocess.Popen[bytes]:
    """`langgraph dev` on a copy of `project` (it writes its state beside it), its output
    in `workdir/langgraph-dev.log`."""
    copy = workdir / "project"
    shutil.copytree(project, copy)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))}
    env["LANGSMITH_TRACING"] = "false"
    with open(workdir / "langgraph-dev.log", "wb") as out:
        return subprocess.Popen(
            [str(cli), "dev", "--no-browser", "--no-reload", "--port", str(port)],
            cwd=copy,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _log_tail(workdir: Path) -> str:
    return (workdir / "langgraph-dev.log").read_text(errors="replace")[-3000:]


@contextlib.asynccontextmanager
async def langgraph_dev(cli: Path, workdir: Path, project: Path = PROJECT) -> AsyncIterator[str]:
    """A ready `langgraph dev` serving `project` on a free port: its URL, until the block
    ends."""
    port = free_port()
    process = _start_langgraph(cli, workdir, port, project)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        async with httpx.AsyncClient(base_url=url) as http:
            while True:
                if process.poll() is not None:
                    raise ProcessError(f"langgraph dev exited\n{_log_tail(workdir)}")
                try:
                    if (await http.get("/ok")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ProcessError(f"langgraph dev not ready\n{_log_tail(workdir)}")
                await asyncio.sleep(0.2)
        yield url
    finally:
        _stop(process)


async def observe_langgraph(cli: Path, workdir: Path) -> dict[str, Observation]:
    async with langgraph_dev(cli, workdir) as url:
        return await observe(url)


async def observe_runstream(services: Services) -> dict[str, Observation]:
    await services.wait_ready()
    namespace = Namespace.new(services, secrets.token_hex(4), "lgdiff")
    config = {**namespace.config(), "RUNSTREAM_CONFIG": str(PROJECT / "langgraph.json")}
    cluster = Cluster(lambda: config, log_prefix="rs-lgdiff-")
    try:
        server = await cluster.server()
        await cluster.ready_worker()
        return await observe(server.url)
    finally:
        cluster.stop()
        await namespace.drop()


def api_version(cli: Path) -> str:
    script = "import langgraph_api; print(langgraph_api.__version__)"
    python = str(cli.parent / "python")
    answer = subprocess.run([python, "-c", script], capture_output=True, text=True, check=False)
    return answer.stdout.strip() or "?"


async def run(args: argparse.Namespace) -> int:
    cli = langgraph_cli(args.langgraph_venv)
    if cli is None:
        print(
            "skipped: no `langgraph` CLI (give a venv with langgraph-cli[inmem] by"
            " --langgraph-venv or RUNSTREAM_LANGGRAPH_VENV)"
        )
        return 0
    services = Services.resolve(args.redis_url, args.database_url)
    workdir = Path(tempfile.mkdtemp(prefix="rs-lgdiff-"))
    try:
        langgraph = await observe_langgraph(cli, workdir)
        runstream = await observe_runstream(services)
    finally:
        services.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"langgraph dev (langgraph-api {api_version(cli)}) vs runstream, same SDK calls\n")
    print(report(langgraph, runstream))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.langgraph_diff", description=__doc__)
    parser.add_argument("--langgraph-venv", default=os.environ.get("RUNSTREAM_LANGGRAPH_VENV"))
    add_service_options(parser)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
