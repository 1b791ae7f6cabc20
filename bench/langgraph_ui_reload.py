"""`python -m bench.langgraph_ui_reload`: agent-chat-ui, unmodified, in headless Chromium,
reloaded while an answer streams, once against `langgraph dev` and once against runstream
serving the same project (`bench/langgraph_ui_reload_project`), and what each page shows.

A one-off check kept for the next LangGraph or agent-chat-ui release, not a CI test: it needs a
built agent-chat-ui checkout, a venv with `langgraph-cli[inmem]` and Debian's Chromium.

The scenario, on each server: open the UI on the `slow_chat` graph (an answer streamed a
character every 100 ms, about 6.5 s), send a message, reload the page 1.5 s into the answer,
then record the page (a screenshot and what its text shows: the answer whole or in part, a
"Human Interrupt" card) right after the reload (the UI's history read answered, +0.5 s), 2 s
later, 2 s after the run ended, and after a second reload. Every request the page makes to the
server is logged with its answer (history, thread, runs), summarised.

agent-chat-ui: `--ui` (else RUNSTREAM_AGENT_CHAT_UI), a checkout with its packages installed
(`pnpm install --frozen-lockfile`, or `npx pnpm@10 ...`); without a `.next` build in it, this
builds one first (`next build`, with `next/font/google` answered offline by a stub, as the
build otherwise fetches the Inter font). It runs as `next start` on a free port; the page is
opened with the URL parameters `apiUrl` and `assistantId` (the UI calls the server from the
browser, so runstream gets the page's origin in RUNSTREAM_CORS_ORIGINS).

`langgraph dev`: `--langgraph-venv` (else RUNSTREAM_LANGGRAPH_VENV). runstream: `runstream
serve` and `runstream worker` children (`bench/launcher.py`) on `--redis-url`/`--database-url`
(else RUNSTREAM_TEST_*), else embedded services, in a schema and key prefix of their own.
Screenshots and `observations.json` go to `--out` (default a new temporary folder, printed).

Exit status: 0 when it ran or was skipped (what is missing is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from playwright.async_api import Browser, Page, Request, Response, async_playwright

from .langgraph_diff import api_version, langgraph_cli, langgraph_dev
from .launcher import ROOT, Cluster, ProcessError, free_port
from .processes import Namespace, Services, add_service_options

__all__ = ["main"]

PROJECT = ROOT / "bench" / "langgraph_ui_reload_project"
GRAPH = "slow_chat"
MESSAGE = "Tell me something slowly."
# the answer the project's fake model streams (bench/langgraph_ui_reload_project/graph.py)
ANSWER = "This answer streams slowly, one character every tenth of a second."
SHOWN_AT_LEAST = 10  # characters of ANSWER
RELOAD_AFTER_S = 1.5
SETTLE_S = 0.5
LATER_S = 2.0
AFTER_END_S = 2.0
RUN_END_TIMEOUT_S = 60.0
UI_READY_TIMEOUT_S = 60.0
FONT_STUB = """// next/font/google offline: every font URL answers one @font-face naming no file
const css = "@font-face { font-family: 'Inter'; font-style: normal; font-weight: 400; " +
  "font-display: swap; src: local('Inter'); }\\n";
module.exports = new Proxy({}, { get: () => css });
"""


@dataclass
class Exchange:
    """One request the page made to the server, and its answer, summarised."""

    at_s: float
    method: str
    path: str
    body: Any
    status: int | None = None
    answer: Any = None


@dataclass
class Moment:
    """What the page showed at one moment."""

    name: str
    at_s: float
    screenshot: str
    shows: dict[str, Any]


@dataclass
class Observation:
    server: str
    thread_id: str | None = None
    moments: list[Moment] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)
    run_ended_at_s: float | None = None


def summarised_answer(path: str, answer: Any) -> Any:
    """The part of a server's answer the page's display depends on: for a history, each
    state's `next`, interrupts and messages; for a thread, its status, interrupts and
    messages; for runs, each status."""
    if path == "/info" and isinstance(answer, dict):
        return {"version": answer.get("version")}
    if path.endswith("/history") and isinstance(answer, list):
        return [_state_summary(state) for state in answer]
    if isinstance(answer, dict) and "thread_id" in answer and "status" in answer:
        if "run_id" in answer:
            return {"run status": answer["status"]}
        return {
            "status": answer["status"],
            "interrupts": answer.get("interrupts", "<no key>"),
            "values.messages": _messages(answer.get("values")),
        }
    if isinstance(answer, list) and all(isinstance(item, dict) for item in answer):
        return [
            {key: item.get(key) for key in ("thread_id", "run_id", "status") if key in item}
            for item in answer
        ]
    return answer


def _state_summary(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "next": state.get("next"),
        "interrupts": state.get("interrupts", "<no key>"),
        "tasks[].interrupts": [task.get("interrupts") for task in state.get("tasks") or []],
        "values.messages": _messages(state.get("values")),
    }


def _messages(values: Any) -> list[str] | None:
    if not isinstance(values, dict):
        return None
    return [
        f"{message.get('type')}: {str(message.get('content'))[:40]}"
        for message in values.get("messages") or []
        if isinstance(message, dict)
    ]


SHOWS_SCRIPT = """() => {
  const text = document.body.innerText;
  const cards = [...document.querySelectorAll('h3')]
    .filter(h => h.textContent.trim() === 'Human Interrupt')
    .map(h => h.closest('div.rounded-lg')?.innerText ?? h.innerText);
  return {text, cards};
}"""


def _answer_shown(text: str) -> str:
    """The longest start of ANSWER the page's text holds, if a few words long (a shorter one
    could be any text of the page)."""
    for end in range(len(ANSWER), SHOWN_AT_LEAST - 1, -1):
        if ANSWER[:end] in text:
            return ANSWER[:end]
    return ""


async def _shows(page: Page) -> dict[str, Any]:
    seen = await page.evaluate(SHOWS_SCRIPT)
    text: str = seen["text"]
    shown = _answer_shown(text)
    return {
        "message shown": MESSAGE in text,
        "answer shown": (
            "whole" if shown == ANSWER else f"{len(shown)}/{len(ANSWER)} chars" if shown else "none"
        ),
        "interrupt cards": [" ".join(card.split()) for card in seen["cards"]],
        "text": " ".join(text.split())[:600],
    }


class Recorder:
    """The page's requests to `server_url`, with their answers, into `observation`."""

    def __init__(self, server_url: str, observation: Observation, started: float) -> None:
        self.origin = server_url.rstrip("/")
        self.observation = observation
        self.started = started
        self.pending: set[asyncio.Task[None]] = set()
        self.sent_at: dict[Request, float] = {}
        self.answered: dict[Request, Exchange] = {}

    def attach(self, page: Page) -> None:
        page.on("request", self._on_request)
        page.on("response", self._on_response)
        page.on("requestfailed", self._on_failed)

    def _on_request(self, request: Request) -> None:
        self.sent_at[request] = time.monotonic()

    def _on_response(self, response: Response) -> None:
        if response.url.startswith(self.origin) and response.request.method != "OPTIONS":
            exchange = self._exchange(response.request)
            exchange.status = response.status
            exchange.answer = response.headers.get("content-type")
            self.answered[response.request] = exchange
            self.observation.exchanges.append(exchange)
            task = asyncio.ensure_future(self._read(response, exchange))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    def _on_failed(self, request: Request) -> None:
        """A request that failed, or a stream the reload cut after its answer began."""
        if request.url.startswith(self.origin) and request.method != "OPTIONS":
            failure = f"{request.failure} at {time.monotonic() - self.started:.2f} s"
            answered = self.answered.get(request)
            if answered is not None:
                answered.answer = f"{answered.answer}, cut: {failure}"
                return
            exchange = self._exchange(request)
            exchange.answer = f"failed: {failure}"
            self.observation.exchanges.append(exchange)

    def _exchange(self, request: Request) -> Exchange:
        split = urlsplit(request.url)
        path = split.path + (f"?{split.query}" if split.query else "")
        body: Any = request.post_data
        with contextlib.suppress(ValueError):
            body = json.loads(body) if body else None
        if isinstance(body, dict) and "input" in body:
            body = {**body, "input": "<the message>"}
        sent_at = self.sent_at.get(request, time.monotonic())
        return Exchange(round(sent_at - self.started, 2), request.method, path, body)

    async def _read(self, response: Response, exchange: Exchange) -> None:
        """A JSON answer's body, summarised (a stream's is left as its content type)."""
        if "json" in (response.headers.get("content-type") or ""):
            try:
                exchange.answer = summarised_answer(exchange.path, await response.json())
            except Exception as exc:  # a page gone mid-read: note it, keep the rest
                exchange.answer = f"unread: {type(exc).__name__}"

    async def settle(self) -> None:
        if self.pending:
            await asyncio.wait(set(self.pending), timeout=10)


async def _run_ended(server_url: str, thread_id: str) -> None:
    deadline = time.monotonic() + RUN_END_TIMEOUT_S
    async with httpx.AsyncClient(base_url=server_url, timeout=10) as http:
        while time.monotonic() < deadline:
            runs = (await http.get(f"/threads/{thread_id}/runs")).json()
            if runs and all(run["status"] not in ("pending", "running") for run in runs):
                return
            await asyncio.sleep(0.2)
    raise ProcessError(f"the run on thread {thread_id} did not end in {RUN_END_TIMEOUT_S} s")


async def observe_reload(
    browser: Browser, ui_url: str, server: str, server_url: str, out: Path
) -> Observation:
    """The scenario on one server (module docstring)."""
    observation = Observation(server)
    context = await browser.new_context(viewport={"width": 1100, "height": 800})
    page = await context.new_page()
    started = time.monotonic()
    recorder = Recorder(server_url, observation, started)
    recorder.attach(page)
    query = urlencode({"apiUrl": server_url, "assistantId": GRAPH})

    async def moment(name: str) -> None:
        shot = out / f"{server.replace(' ', '-')}-{len(observation.moments) + 1}-{name}.png"
        await page.screenshot(path=shot)
        at_s = round(time.monotonic() - started, 2)
        observation.moments.append(Moment(name, at_s, shot.name, await _shows(page)))

    def is_history(response: Response) -> bool:
        return response.url.startswith(server_url) and response.url.endswith("/history")

    try:
        await page.goto(f"{ui_url}/?{query}")
        box = page.get_by_placeholder("Type your message...")
        await box.fill(MESSAGE)
        await box.press("Enter")
        await page.wait_for_url("**threadId=*", timeout=30_000)
        await page.get_by_text(ANSWER[:4]).first.wait_for(timeout=30_000)
        await asyncio.sleep(RELOAD_AFTER_S)
        await moment("before reload")
        observation.thread_id = dict(
            part.split("=", 1) for part in urlsplit(page.url).query.split("&") if "=" in part
        )["threadId"]
        async with page.expect_response(is_history, timeout=30_000):
            await page.reload()
        await asyncio.sleep(SETTLE_S)
        await moment("right after reload")
        await asyncio.sleep(LATER_S)
        await moment("2 s later")
        await _run_ended(server_url, observation.thread_id)
        observation.run_ended_at_s = round(time.monotonic() - started, 2)
        await asyncio.sleep(AFTER_END_S)
        await moment("run ended + 2 s")
        async with page.expect_response(is_history, timeout=30_000):
            await page.reload()
        await asyncio.sleep(SETTLE_S * 2)
        await moment("after a second reload")
    finally:
        await recorder.settle()
        await context.close()
    observation.exchanges.sort(key=lambda exchange: exchange.at_s)
    return observation


@dataclass
class Ui:
    """agent-chat-ui served by `next start`."""

    checkout: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = ""

    def build_if_needed(self, workdir: Path) -> None:
        if (self.checkout / ".next" / "BUILD_ID").exists():
            return
        stub = workdir / "google-fonts-offline.cjs"
        stub.write_text(FONT_STUB)
        env = {
            **os.environ,
            "NEXT_TELEMETRY_DISABLED": "1",
            "NEXT_FONT_GOOGLE_MOCKED_RESPONSES": str(stub),
        }
        print("building agent-chat-ui (next build, a few minutes)...", flush=True)
        subprocess.run(["npx", "next", "build"], cwd=self.checkout, env=env, check=True)

    def _spawn(self, workdir: Path, port: int) -> subprocess.Popen[bytes]:
        """`next start` in a session of its own (npx starts next as its child)."""
        with open(workdir / "agent-chat-ui.log", "wb") as log:
            return subprocess.Popen(
                ["npx", "next", "start", "-p", str(port), "-H", "127.0.0.1"],
                cwd=self.checkout,
                env={**os.environ, "NEXT_TELEMETRY_DISABLED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def start(self, workdir: Path) -> str:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = self._spawn(workdir, port)
        deadline = time.monotonic() + UI_READY_TIMEOUT_S
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise ProcessError("next start exited (agent-chat-ui.log)")
                try:
                    if (await http.get(self.url)).status_code == 200:
                        return self.url
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.3)
        raise ProcessError("agent-chat-ui did not answer")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # npx and its child, next
            self.process.wait(20)


def report(observations: list[Observation]) -> str:
    lines: list[str] = []
    for seen in observations:
        lines.append(
            f"=== {seen.server}: thread {seen.thread_id}, its run seen ended at"
            f" {seen.run_ended_at_s} s (times from opening the page)"
        )
        for moment in seen.moments:
            shows = moment.shows
            cards = shows["interrupt cards"] or "none"
            lines.append(
                f"  {moment.at_s:6.2f} s {moment.name}: message shown {shows['message shown']},"
                f" answer {shows['answer shown']}, interrupt cards {cards}  [{moment.screenshot}]"
            )
        lines.append("  the page's requests to the server (sent at), and the answers:")
        for exchange in seen.exchanges:
            body = f" {json.dumps(exchange.body)}" if exchange.body is not None else ""
            lines.append(f"  {exchange.at_s:6.2f} s {exchange.method} {exchange.path}{body}")
            lines.append(f"           -> {exchange.status} {json.dumps(exchange.answer)[:700]}")
    return "\n".join(lines)


async def run(args: argparse.Namespace, cli: Path, out: Path) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="rs-ui-reload-work-"))
    ui = Ui(Path(args.ui))
    services = Services.resolve(args.redis_url, args.database_url)
    observations: list[Observation] = []
    try:
        ui.build_if_needed(workdir)
        ui_url = await ui.start(workdir)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=args.chromium, args=["--no-sandbox"]
            )
            try:
                async with langgraph_dev(cli, workdir, PROJECT) as url:
                    observations.append(
                        await observe_reload(browser, ui_url, "langgraph dev", url, out)
                    )
                observations.append(await _observe_runstream(browser, ui_url, services, out))
            finally:
                await browser.close()
    finally:
        ui.stop()
        services.close()
        shutil.rmtree(workdir, ignore_errors=True)
    (out / "observations.json").write_text(
        json.dumps([_as_json(seen) for seen in observations], indent=1)
    )
    print(f"agent-chat-ui reloaded mid-answer: langgraph dev (langgraph-api {api_version(cli)})")
    print(f"vs runstream; screenshots and observations.json in {out}\n")
    print(report(observations))
    return 0


async def _observe_runstream(
    browser: Browser, ui_url: str, services: Services, out: Path
) -> Observation:
    await services.wait_ready()
    namespace = Namespace.new(services, secrets.token_hex(4), "uireload")
    config = {
        **namespace.config(),
        "RUNSTREAM_CONFIG": str(PROJECT / "langgraph.json"),
        "RUNSTREAM_CORS_ORIGINS": ui_url,
    }
    cluster = Cluster(lambda: config, log_prefix="rs-uireload-")
    try:
        server = await cluster.server()
        await cluster.ready_worker()
        return await observe_reload(browser, ui_url, "runstream", server.url, out)
    finally:
        cluster.stop()
        await namespace.drop()


def _as_json(seen: Observation) -> dict[str, Any]:
    return {
        "server": seen.server,
        "thread_id": seen.thread_id,
        "run_ended_at_s": seen.run_ended_at_s,
        "moments": [vars(moment) for moment in seen.moments],
        "exchanges": [vars(exchange) for exchange in seen.exchanges],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.langgraph_ui_reload", description=__doc__
    )
    parser.add_argument("--ui", default=os.environ.get("RUNSTREAM_AGENT_CHAT_UI"))
    parser.add_argument("--langgraph-venv", default=os.environ.get("RUNSTREAM_LANGGRAPH_VENV"))
    parser.add_argument("--chromium", default=shutil.which("chromium"))
    parser.add_argument("--out", help="folder for the screenshots and observations.json")
    add_service_options(parser)
    args = parser.parse_args(argv)
    cli = langgraph_cli(args.langgraph_venv)
    missing = [
        what
        for what, there in (
            ("a `langgraph` CLI (--langgraph-venv)", cli is not None),
            ("an agent-chat-ui checkout (--ui)", bool(args.ui) and Path(args.ui).is_dir()),
            ("chromium (--chromium)", bool(args.chromium) and Path(args.chromium).exists()),
        )
        if not there
    ]
    if missing or cli is None:
        print("skipped, missing: " + "; ".join(missing))
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="rs-ui-reload-"))
    out.mkdir(parents=True, exist_ok=True)
    return asyncio.run(run(args, cli, out))


if __name__ == "__main__":
    sys.exit(main())
