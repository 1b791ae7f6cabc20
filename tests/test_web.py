"""The web page (`/`, server/web/) in a real headless chromium, driven by Playwright.

Debian's chromium is launched (`/usr/bin/chromium`); no browser is ever downloaded. Without it
these tests fail loudly, unless `RUNSTREAM_SKIP_BROWSER=1` says to skip them. Screenshots go
to tests/artifacts/ (ignored by git).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.async_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Locator,
    Page,
    async_playwright,
    expect,
)

from runner.job_loop import JobLoop
from server.page import WEB_DIR
from tests.conftest import ServerHandle, StartServer, StartWorker
from tests.processes import Cluster
from tests.sse import read_events

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
NO_CHROMIUM = "chromium is not installed: ./scripts/test installs it (apt-get install chromium)"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
TIMEOUT_MS = 30_000  # generous: the machine is shared, and EventSource waits ~3 s to reconnect

expect.set_options(timeout=TIMEOUT_MS)


STREAMING = re.compile(r"\bstreaming\b")
VENDOR_DIR = WEB_DIR / "vendor"


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


@pytest.fixture
def chromium() -> str:
    """Debian's chromium: missing, the tests fail, unless RUNSTREAM_SKIP_BROWSER=1."""
    if not CHROMIUM.exists():
        if os.environ.get("RUNSTREAM_SKIP_BROWSER") == "1":
            pytest.skip(NO_CHROMIUM)
        pytest.fail(NO_CHROMIUM)
    return str(CHROMIUM)


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        # As root, chromium's sandbox cannot start.
        launched = await playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


class Tabs:
    """Tabs of one browser profile (they share local storage), with their script errors."""

    def __init__(self, context: BrowserContext, name: str) -> None:
        self.context = context
        self.name = name
        self.errors: list[str] = []

    async def new(self) -> Page:
        page = await self.context.new_page()
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("console", self._console)
        return page

    async def open(self, url: str) -> Page:
        page = await self.new()
        await page.goto(url)
        return page

    def _console(self, message: ConsoleMessage) -> None:
        # Failed requests (a 401 before the key is given, a dead server) are logged by the
        # browser itself; anything else at error level is the page's own fault.
        text = message.text
        if message.type == "error" and "Failed to load resource" not in text:
            self.errors.append(f"console: {text}")

    async def screenshot(self, page: Page, what: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{self.name}-{what}.png"
        await page.screenshot(path=str(path))
        print(f"screenshot: {path}")
        return path

    def assert_no_errors(self) -> None:
        assert self.errors == [], "the page had script errors:\n" + "\n".join(self.errors)


@pytest.fixture
async def tabs(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Tabs]:
    context = await browser.new_context(viewport={"width": 1100, "height": 700})
    try:
        yield Tabs(context, request.node.name.removeprefix("test_"))
    finally:
        await context.close()


# ---- what a tab shows ------------------------------------------------------------------------


async def send(page: Page, text: str, graph: str = "chat") -> None:
    await page.select_option("#graph", graph)
    await page.fill("#input", text)
    await page.click("#send")


def status(page: Page, value: str) -> Awaitable[None]:
    return expect(page.locator("#run-status")).to_have_attribute("data-status", value)


async def roles_and_texts(page: Page) -> list[list[str]]:
    """Every message on screen, in order, with its exact text."""
    return await page.eval_on_selector_all(
        "#messages .message", "els => els.map(e => [e.dataset.role, e.textContent])"
    )


async def shown_words(page: Page) -> int:
    """How many words of the streaming answer the tab shows so far."""
    text = await page.eval_on_selector_all(
        "#messages .message[data-role=assistant]", "els => els.map(e => e.textContent).join(' ')"
    )
    return len(str(text).split())


async def wait_for_words(page: Page, at_least: int) -> None:
    await page.wait_for_function(
        """n => [...document.querySelectorAll('#messages .message[data-role=assistant]')]
                .map(e => e.textContent).join(' ').split(/\\s+/).filter(Boolean).length >= n""",
        arg=at_least,
        timeout=TIMEOUT_MS,
    )


def query(page: Page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}


async def run_status(base_url: str, run_id: str) -> str:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        response = await http.get(f"/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        return str(response.json()["status"])


async def last_run(page: Page, server: ServerHandle) -> str:
    """The id of the latest run of the thread the tab shows."""
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        runs = (await http.get(f"/v1/threads/{query(page)['thread']}/runs")).json()["runs"]
    return str(runs[-1]["run_id"])


async def assert_whole_answer_once(page: Page, text: str) -> None:
    """Succeeded, and exactly the question and its whole answer, each once."""
    await status(page, "succeeded")
    await expect(page.locator("#messages .message")).to_have_count(2)
    await expect(page.locator("#messages .message.streaming")).to_have_count(0)
    assert await roles_and_texts(page) == [["user", text], ["assistant", text]]
    await expect(page.locator("#connection")).to_have_attribute("data-state", "idle")
    assert "run" not in query(page)  # the address forgets a finished run


def attempt(page: Page, value: int) -> Awaitable[None]:
    return expect(page.locator("#run-attempt")).to_have_attribute("data-attempt", str(value))


async def record_connection_states(page: Page) -> None:
    """From now on, `window.connectionStates` lists the states `#connection` shows, in order."""
    await page.evaluate(
        """() => {
            const el = document.getElementById('connection');
            const states = window.connectionStates = [el.dataset.state];
            new MutationObserver(() => {
                if (states[states.length - 1] !== el.dataset.state) states.push(el.dataset.state);
            }).observe(el, {attributes: true, attributeFilter: ['data-state']});
        }"""
    )


async def connection_states(page: Page) -> list[str]:
    return list(await page.evaluate("window.connectionStates"))


# A long answer's Markdown: the fake model echoes it back, token by token.
CODE_LINE = f'print("{words(40, "long")}")'
MARKDOWN = f"""# Shopping list

Buy these **today**, see [the docs](https://example.com/docs):

- apples
- pears

Run `make list` first, then:

```python
{CODE_LINE}
```

| fruit | count |
|---|---|
| apples | 3 |
| pears | 2 |"""

# Raw HTML a model (or whoever wrote its prompt) could put in an answer: none of it may run.
HOSTILE = (
    "Look: <img src=x onerror=\"window.pwned = 'img'\"> "
    "<script>window.pwned = 'script'</script> "
    "<svg onload=\"window.pwned = 'svg'\"></svg> "
    "[a link](javascript:window.pwned='link') "
    "<a href=\"javascript:window.pwned='href'\" onclick=\"window.pwned='click'\">click me</a> "
    '<iframe src="/"></iframe> <form action="/"><button>go</button></form> **still bold**'
)


# ---- tests -----------------------------------------------------------------------------------


async def test_two_tabs_and_a_reload_show_the_whole_answer_once(
    server: ServerHandle, start_worker: StartWorker, tabs: Tabs
) -> None:
    await start_worker(fake_token_delay_ms=80)
    text = words(60, "tok")  # about 5 s of tokens
    one = await tabs.open(server.url)
    await send(one, text)

    await wait_for_words(one, 3)
    await expect(one.locator(".message[data-role=assistant]")).to_have_class(STREAMING)
    address = query(one)
    assert set(address) == {"thread", "run"}
    assert await run_status(server.url, address["run"]) == "running"

    two = await tabs.open(one.url)
    await wait_for_words(two, await shown_words(one) + 1)  # caught up, then live
    await status(two, "running")
    await tabs.screenshot(two, "tab2-mid-stream")

    assert await run_status(server.url, address["run"]) == "running"
    assert await shown_words(one) < 60
    await one.reload()

    for page in (one, two):
        await assert_whole_answer_once(page, text)
        assert query(page) == {"thread": address["thread"]}
    await tabs.screenshot(two, "tab2-end")
    tabs.assert_no_errors()


async def test_answer_finishes_in_both_tabs_after_the_server_is_killed(
    cluster: Cluster, start_worker: StartWorker, tabs: Tabs
) -> None:
    await start_worker(fake_token_delay_ms=100)
    started = await cluster.server()
    first, url = started
    text = words(80, "piece")  # about 8 s of tokens
    one = await tabs.open(url)
    await send(one, text)
    await wait_for_words(one, 2)
    two = await tabs.open(one.url)
    await wait_for_words(two, 3)
    for page in (one, two):
        await expect(page.locator("#connection")).to_have_attribute("data-state", "live")

    first.kill()
    for page in (one, two):
        connection = page.locator("#connection")
        await expect(connection).to_have_attribute("data-state", "reconnecting")
        await expect(connection).to_be_visible()
        await expect(connection).to_have_text("reconnecting…")
    await tabs.screenshot(one, "tab1-reconnecting")
    await tabs.screenshot(two, "tab2-reconnecting")

    _, again = await cluster.server(port=started.port)
    assert again == url
    for page in (one, two):
        await assert_whole_answer_once(page, text)
    await tabs.screenshot(two, "tab2-end")
    tabs.assert_no_errors()


async def ask_approval(page: Page, text: str) -> Locator:
    """Send `text` to the approval graph; the review card of its one proposed call."""
    await send(page, text, graph="approval")
    await expect(page.locator("#approval")).to_be_visible()
    await status(page, "interrupted")
    review = page.locator("#approval .review")
    await expect(review).to_have_count(1)
    await expect(review.locator(".review-description")).to_have_text("Run save_note?")
    await expect(review.locator(".review-call")).to_contain_text(text)
    # the decisions the graph's review config allows, as agent-chat-ui draws them
    buttons = review.locator(".review-buttons button")
    assert await buttons.all_text_contents() == ["Approve", "Edit", "Reject"]
    return review


async def answered(page: Page) -> list[list[str]]:
    """The conversation once the resumed run has ended, with the card gone."""
    await status(page, "succeeded")
    await expect(page.locator("#approval")).to_be_hidden()
    await expect(page.locator("#messages .message")).to_have_count(4)
    shown = await roles_and_texts(page)
    assert [role for role, _ in shown] == ["user", "assistant", "tool", "assistant"]
    return shown


async def test_approve_runs_the_proposed_call(
    server: ServerHandle, worker: JobLoop, tabs: Tabs
) -> None:
    text = "remember to water the plants"
    page = await tabs.open(server.url)
    review = await ask_approval(page, text)
    await tabs.screenshot(page, "pending")

    await review.locator("[data-decision=approve]").click()
    shown = await answered(page)
    assert shown[0][1] == text
    assert shown[1][1].startswith("→ save_note(") and text in shown[1][1]
    assert shown[2][1] == f"saved note ({len(text)} characters)"
    assert shown[3][1] == text  # the model's answer after the tool ran
    tabs.assert_no_errors()


async def test_edit_runs_the_call_with_the_edited_arguments(
    server: ServerHandle, worker: JobLoop, tabs: Tabs
) -> None:
    page = await tabs.open(server.url)
    review = await ask_approval(page, "buy milk")

    await review.locator("[data-decision=edit]").click()
    field = review.locator("textarea[data-arg=content]")
    await expect(field).to_have_value("buy milk")
    await field.fill("buy oat milk")
    await tabs.screenshot(page, "editing")
    await review.locator(".send-edit").click()
    shown = await answered(page)
    assert shown[2][1] == (
        'saved note (12 characters); a reviewer edited the call, it ran with {"content":'
        ' "buy oat milk"}'
    )
    tabs.assert_no_errors()


async def test_reject_runs_nothing_and_the_reason_goes_to_the_model(
    server: ServerHandle, worker: JobLoop, tabs: Tabs
) -> None:
    page = await tabs.open(server.url)
    review = await ask_approval(page, "buy milk")

    await review.locator("[data-decision=reject]").click()
    await review.locator("textarea.reject-message").fill("we have milk")
    await review.locator(".send-reject").click()
    shown = await answered(page)
    assert shown[2][1] == "User rejected the tool call for `save_note` with reason: we have milk"
    run_id = await last_run(page, server)
    async with httpx.AsyncClient(base_url=server.url) as http:
        events = await read_events(http, f"/v1/runs/{run_id}/events")
    assert [e.data["executed"] for e in events if e.event == "custom"] == [False]
    tabs.assert_no_errors()


async def test_cancel_button_stops_the_run(
    server: ServerHandle, start_worker: StartWorker, tabs: Tabs
) -> None:
    await start_worker(fake_token_delay_ms=200)
    text = words(50, "slow")  # 10 s if nobody stops it
    page = await tabs.open(server.url)
    await send(page, text)
    await wait_for_words(page, 2)
    await expect(page.locator("#cancel")).to_be_visible()
    await expect(page.locator("#send")).to_be_disabled()

    await page.click("#cancel")
    await status(page, "cancelled")
    await expect(page.locator("#cancel")).to_be_hidden()
    await expect(page.locator("#send")).to_be_enabled()
    await expect(page.locator("#messages .message.streaming")).to_have_count(0)
    assert await run_status(server.url, await last_run(page, server)) == "cancelled"
    answer = [t for role, t in await roles_and_texts(page) if role == "assistant"]
    assert len(answer) <= 1 and len("".join(answer).split()) < 50  # stopped early
    tabs.assert_no_errors()


async def test_sidebar_lists_opens_and_deletes_threads(
    server: ServerHandle, worker: JobLoop, client: httpx.AsyncClient, tabs: Tabs
) -> None:
    api_text = "a conversation started over the API"
    response = await client.post(
        "/v1/runs", json={"input": {"messages": [{"role": "user", "content": api_text}]}}
    )
    assert response.status_code == 202, response.text
    api_thread = response.json()["thread_id"]

    page = await tabs.open(server.url)
    page_text = "a conversation started on the page"
    await send(page, page_text)
    await status(page, "succeeded")
    page_thread = query(page)["thread"]

    threads = page.locator("#threads li")
    await expect(threads).to_have_count(2)
    api_item = page.locator(f'#threads li[data-thread-id="{api_thread}"]')
    page_item = page.locator(f'#threads li[data-thread-id="{page_thread}"]')
    await expect(api_item.locator(".title")).to_have_text(api_text)
    await expect(page_item.locator(".title")).to_have_text(page_text)
    await expect(page_item).to_have_attribute("aria-current", "true")

    await api_item.click()
    await expect(api_item).to_have_attribute("aria-current", "true")
    await expect(page.locator("#thread-title")).to_have_text(api_text)
    await expect(page.locator("#messages .message")).to_have_count(2)
    assert await roles_and_texts(page) == [["user", api_text], ["assistant", api_text]]
    assert query(page) == {"thread": api_thread}
    await tabs.screenshot(page, "opened")

    await page.click("#new-thread")
    await expect(page.locator("#messages .message")).to_have_count(0)
    await expect(page.locator("#thread-title")).to_have_text("New chat")
    assert query(page) == {}
    # The list is rebuilt for the new chat (nothing current); a rebuild between the two clicks
    # below would replace the armed button.
    await expect(api_item).to_have_attribute("aria-current", "false")

    await page_item.hover()
    delete = page_item.locator(".delete")
    await delete.click()
    await expect(delete).to_have_text("delete?")
    await expect(threads).to_have_count(2)  # one click only arms it
    await delete.click()
    await expect(page_item).to_have_count(0)
    await expect(threads).to_have_count(1)
    assert (await client.get(f"/v1/threads/{page_thread}")).status_code == 404
    assert (await client.get(f"/v1/threads/{api_thread}")).status_code == 200
    tabs.assert_no_errors()


async def test_page_asks_for_the_api_key_when_the_server_needs_one(
    start_server: StartServer, worker: JobLoop, tabs: Tabs
) -> None:
    server = await start_server(api_keys={"k1": "alice"})
    streams: list[str] = []
    page = await tabs.new()
    page.on("request", lambda r: streams.append(r.url) if "/events" in r.url else None)
    await page.goto(server.url)

    dialog = page.locator("#key-dialog")
    await expect(dialog).to_be_visible()
    await tabs.screenshot(page, "key-dialog")
    await page.fill("#key-input", "k1")
    await dialog.locator("button").click()
    await expect(dialog).to_be_hidden()
    assert await page.evaluate("localStorage.getItem('runstream.apiKey')") == "k1"

    text = "hello with a key"
    await send(page, text)
    await assert_whole_answer_once(page, text)
    assert streams and all("token=" in url for url in streams), streams
    tabs.assert_no_errors()


async def test_answer_is_rendered_as_markdown(
    server: ServerHandle, start_worker: StartWorker, tabs: Tabs
) -> None:
    await start_worker(fake_token_delay_ms=60)  # about 4 s of tokens
    page = await tabs.open(server.url)
    await send(page, MARKDOWN)
    answer = page.locator(".message[data-role=assistant]")

    # Rendered while it streams, not only at the end.
    await expect(answer.locator("h1")).to_have_text("Shopping list")
    await expect(answer).to_have_class(STREAMING)
    await tabs.screenshot(page, "streaming")

    await status(page, "succeeded")
    for shown in (page, await tabs.open(page.url)):  # streamed, then loaded from the thread
        answer = shown.locator(".message[data-role=assistant]")
        await expect(answer.locator("h1")).to_have_text("Shopping list")
        await expect(answer.locator("strong")).to_have_text("today")
        await expect(answer.locator("ul > li")).to_have_text(["apples", "pears"])
        await expect(answer.locator("p > code")).to_have_text("make list")
        await expect(answer.locator("pre > code")).to_have_text(CODE_LINE)
        await expect(answer.locator("td")).to_have_text(["apples", "3", "pears", "2"])
        link = answer.locator("a")
        await expect(link).to_have_attribute("href", "https://example.com/docs")
        await expect(link).to_have_attribute("target", "_blank")
        await expect(link).to_have_attribute("rel", "noopener noreferrer")
        # The code block: monospace, and a long line scrolls inside it instead of wrapping.
        pre = answer.locator("pre")
        style = await pre.evaluate(
            """pre => {
                const code = getComputedStyle(pre.firstElementChild);
                return {font: code.fontFamily, overflow: getComputedStyle(pre).overflowX,
                        scrolls: pre.scrollWidth > pre.clientWidth,
                        lines: pre.firstElementChild.getBoundingClientRect().height
                               / parseFloat(code.lineHeight)};
            }"""
        )
        assert "monospace" in style["font"], style
        assert style["overflow"] == "auto" and style["scrolls"] and style["lines"] < 1.5, style
        # The user's own message stays plain text, exactly as typed.
        user = shown.locator(".message[data-role=user]")
        await expect(user).to_have_text(MARKDOWN)
        assert await user.evaluate("e => e.children.length") == 0
    await tabs.screenshot(page, "end")
    tabs.assert_no_errors()


async def test_raw_html_in_an_answer_stays_inert(
    server: ServerHandle, worker: JobLoop, tabs: Tabs
) -> None:
    page = await tabs.open(server.url)
    await send(page, HOSTILE)
    await status(page, "succeeded")
    answer = page.locator(".message[data-role=assistant]")
    await expect(answer.locator("strong")).to_have_text("still bold")  # Markdown still renders
    # Raw HTML is shown as the text it is.
    await expect(answer).to_contain_text("""<img src=x onerror="window.pwned = 'img'">""")
    await expect(answer).to_contain_text("<script>window.pwned = 'script'</script>")
    await expect(page.locator(".message[data-role=user]")).to_have_text(HOSTILE)

    messages = page.locator("#messages")
    await expect(messages.locator("img, script, svg, iframe, form, button, style")).to_have_count(0)
    handlers = await messages.evaluate(
        """e => [...e.querySelectorAll('*')].flatMap(
                el => [...el.attributes].filter(a => a.name.startsWith('on')
                    || /^\\s*javascript:/i.test(a.value)).map(a => `${el.tagName} ${a.name}`))"""
    )
    assert handlers == []
    for link in await answer.locator("a").all():  # whatever is left of the links does nothing
        await link.click()
    await page.wait_for_timeout(500)  # an image's onerror would have fired by now
    assert await page.evaluate("window.pwned") is None
    assert len(tabs.context.pages) == 1  # and no link opened anything
    tabs.assert_no_errors()  # not even a handler blocked by the CSP: none reached the DOM


async def test_connection_state_run_status_and_attempt_are_shown(
    server: ServerHandle, start_worker: StartWorker, tabs: Tabs
) -> None:
    await start_worker(fake_token_delay_ms=80)
    text = words(40, "word")  # about 3 s of tokens
    page = await tabs.open(server.url)
    await record_connection_states(page)
    await send(page, text)

    await wait_for_words(page, 2)
    connection = page.locator("#connection")
    await expect(connection).to_have_attribute("data-state", "live")
    await expect(connection).to_have_text("● live")
    await expect(connection).to_be_visible()
    await status(page, "running")
    await attempt(page, 1)
    await expect(page.locator("#run-attempt")).to_have_text("attempt 1")
    await expect(page.locator("#run-attempt")).to_be_visible()
    await tabs.screenshot(page, "live")

    await assert_whole_answer_once(page, text)
    await expect(page.locator("#run-status")).to_have_text("succeeded")
    await attempt(page, 1)
    assert await connection_states(page) == ["idle", "live", "idle"]
    tabs.assert_no_errors()


async def test_reconnecting_then_live_again_when_the_server_returns(
    cluster: Cluster, start_worker: StartWorker, tabs: Tabs
) -> None:
    await start_worker(fake_token_delay_ms=100)
    started = await cluster.server()
    first, url = started
    # about 30 s of tokens: the run outlasts the restart (CI, busy, once took over 12 s)
    text = words(300, "bit")
    page = await tabs.open(url)
    await record_connection_states(page)
    await send(page, text)
    await wait_for_words(page, 3)
    connection = page.locator("#connection")
    await expect(connection).to_have_attribute("data-state", "live")

    first.kill()
    await expect(connection).to_have_attribute("data-state", "reconnecting")
    await expect(connection).to_have_text("reconnecting…")
    await expect(connection).to_be_visible()
    await status(page, "running")  # the last status the page knows, kept while it retries
    await attempt(page, 1)
    await tabs.screenshot(page, "reconnecting")
    before = await shown_words(page)

    await cluster.server(port=started.port)
    await expect(connection).to_have_attribute("data-state", "live")
    await expect(connection).to_have_text("● live")
    await status(page, "running")
    await wait_for_words(page, before + 1)  # live again: new tokens arrive
    await tabs.screenshot(page, "live-again")

    await assert_whole_answer_once(page, text)
    await attempt(page, 1)  # the worker never stopped: still the first attempt
    assert await connection_states(page) == ["idle", "live", "reconnecting", "live", "idle"]
    tabs.assert_no_errors()


async def test_a_worker_crash_shows_the_next_attempt(cluster: Cluster, tabs: Tabs) -> None:
    fast_recovery = {"RUNSTREAM_LEASE_MS": "1000", "RUNSTREAM_REAPER_INTERVAL_MS": "200"}
    slow_tokens = {"RUNSTREAM_FAKE_TOKEN_DELAY_MS": "90", **fast_recovery}
    _, url = await cluster.server()
    first = await cluster.ready_worker(**slow_tokens)
    # about 22 s of tokens: longer than the standby worker takes to start on a busy machine
    # (CI at load 4 saw 17 s), shorter than the 30 s the second attempt's whole answer has
    text = words(240, "step")
    page = await tabs.open(url)
    await send(page, text)
    await wait_for_words(page, 5)
    await attempt(page, 1)
    await cluster.ready_worker(**slow_tokens)
    await wait_for_words(page, 10)

    first.kill()
    await attempt(page, 2)
    await expect(page.locator("#run-attempt")).to_have_text("attempt 2")
    await tabs.screenshot(page, "attempt-2")
    await assert_whole_answer_once(page, text)
    await attempt(page, 2)
    tabs.assert_no_errors()


async def test_page_asks_no_host_but_the_server(
    server: ServerHandle, worker: JobLoop, tabs: Tabs
) -> None:
    page = await tabs.new()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    await page.goto(server.url)
    text = (
        "![a picture](https://example.com/picture.png) and [a link](https://example.com/)\n\n"
        '<img src="https://example.com/pixel.gif"> <link rel="stylesheet" '
        'href="https://example.com/x.css"> <video src="https://example.com/v.mp4"></video>'
    )
    await send(page, text)
    await status(page, "succeeded")
    answer = page.locator(".message[data-role=assistant]")
    # An image becomes a link to it: nothing in an answer is loaded.
    await expect(answer.locator("a")).to_have_count(2)
    await expect(answer.locator("a").first).to_have_attribute(
        "href", "https://example.com/picture.png"
    )
    await expect(answer.locator("a").first).to_have_text("a picture")
    await expect(page.locator("#messages img, #messages video, #messages link")).to_have_count(0)
    await page.wait_for_timeout(500)

    origin = urlsplit(server.url).netloc
    fetched = [u for u in requested if not u.startswith("data:")]
    assert fetched and all(urlsplit(u).netloc == origin for u in fetched), fetched
    paths = {urlsplit(u).path for u in fetched}
    assert {"/ui/vendor/marked/marked.esm.js", "/ui/vendor/dompurify/purify.es.mjs"} <= paths
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        for path in ("/ui/vendor/marked/marked.esm.js", "/ui/vendor/dompurify/purify.es.mjs"):
            response = await http.get(path)
            assert response.status_code == 200
            assert response.headers["content-type"].split(";")[0] in JAVASCRIPT, path
    tabs.assert_no_errors()


JAVASCRIPT = {"text/javascript", "application/javascript"}


@pytest.mark.parametrize(
    ("name", "files", "licenses"),
    [
        ("marked", ["marked.esm.js"], ["LICENSE"]),
        ("dompurify", ["purify.es.mjs"], ["LICENSE", "LICENSE-MPL"]),
    ],
)
def test_vendored_markdown_libraries_match_their_readmes(
    name: str, files: list[str], licenses: list[str]
) -> None:
    """The page's Markdown renderer and sanitiser are the files their READMEs record."""
    directory = VENDOR_DIR / name
    readme = (directory / "README.md").read_text()
    recorded = dict(re.findall(r"\| `([^`]+)` \| `([0-9a-f]{64})` \|", readme))
    assert sorted(recorded) == files
    for file, digest in recorded.items():
        assert hashlib.sha256((directory / file).read_bytes()).hexdigest() == digest, file
    assert re.search(r"^# \S+ \d+\.\d+\.\d+ \(vendored\)", readme)
    for license_file in licenses:
        assert (directory / license_file).stat().st_size > 500, license_file
    assert sorted(p.name for p in directory.iterdir()) == sorted([*files, *licenses, "README.md"])


async def test_a_runs_evaluations_show_as_badges_under_its_answer(
    start_server: StartServer, start_worker: StartWorker, tabs: Tabs
) -> None:
    graphs = {"grades_itself": "tests.custom_graphs:grades_itself"}  # records two evaluations
    server = await start_server(graphs=graphs)
    await start_worker(graphs=graphs)
    page = await tabs.open(server.url)
    await page.evaluate(
        "() => document.getElementById('graph').add(new Option('grades', 'grades_itself'))"
    )
    await send(page, words(12, "w"), graph="grades_itself")
    await status(page, "succeeded")
    for shown in (page, await tabs.open(page.url)):  # when the run ends; on opening the thread
        scores = shown.locator("#messages .scores .score")
        await expect(scores).to_have_text(["reply 0.75", "brevity 1.00"])
        await expect(scores.nth(0)).to_have_attribute("data-passed", "true")
        await expect(scores.nth(1)).to_have_attribute("data-passed", "false")
        above = "() => document.querySelector('#messages .scores').previousElementSibling"
        assert await shown.evaluate(f"{above}.textContent") == "you said 12 words"
    await tabs.screenshot(page, "evaluations")
    tabs.assert_no_errors()


# ---- the memory assistant: its panel and its question ---------------------------------------

ASSISTANT_PROJECT = str(WEB_DIR.parent.parent / "runner" / "assistant" / "langgraph.json")
MEMORY_KEYS = {"key-a": "alice", "key-b": "bob"}


@pytest.fixture
async def assistant_url(start_server: StartServer, start_worker: StartWorker, tabs: Tabs) -> str:
    """A server and worker serving the memory assistant (as `runstream up` does by default),
    with API keys; the tabs are signed in as alice."""
    server = await start_server(api_keys=MEMORY_KEYS, config_path=ASSISTANT_PROJECT)
    await start_worker(api_keys=MEMORY_KEYS, config_path=ASSISTANT_PROJECT)
    await tabs.context.add_init_script("localStorage.setItem('runstream.apiKey', 'key-a')")
    return server.url


async def facts(page: Page) -> list[list[str]]:
    """The memory panel's facts: kind, value, framing."""
    return await page.eval_on_selector_all(
        "#facts li",
        "els => els.map(e => [...e.querySelectorAll('.fact-kind, .fact-value, .fact-confidence')]"
        ".map(c => c.textContent))",
    )


async def say(page: Page, text: str) -> None:
    """Send `text` on the page's default graph (which must be the assistant)."""
    await expect(page.locator("#graph")).to_have_value("assistant")
    await page.fill("#input", text)
    await page.click("#send")


async def expect_facts(page: Page, expected: list[list[str]]) -> None:
    rows = page.locator("#facts li")
    await expect(rows).to_have_count(len(expected))
    for _ in range(100):  # the panel is read again when the run ends: wait for that read
        if await facts(page) == expected:
            return
        await page.wait_for_timeout(100)
    assert await facts(page) == expected


async def memory_question(page: Page) -> Locator:
    """The pending memory question's card, with exactly its Yes and No buttons."""
    await expect(page.locator("#approval")).to_be_visible()
    await expect(page.locator("#approval-title")).to_have_text("A question.")
    card = page.locator("#approval .review[data-question=memory]")
    await expect(card).to_have_count(1)
    await expect(card.locator(".review-description")).to_have_text(
        "Earlier I noted that your name is Ann. Update it: your name is Bob?"
    )
    assert await card.locator(".review-buttons button").all_text_contents() == ["Yes", "No"]
    return card


async def test_memory_panel_lists_what_is_remembered_and_forgets_on_delete(
    assistant_url: str, tabs: Tabs
) -> None:
    page = await tabs.open(assistant_url)
    await expect(page.locator("#memory")).to_be_visible()
    await expect(page.locator("#facts-empty")).to_be_visible()
    await say(page, "My name is Ann. I think I like green tea.")
    await status(page, "succeeded")
    await expect_facts(page, [["likes:", "green tea", "likely"], ["name:", "Ann", "stated"]])
    await tabs.screenshot(page, "panel")

    await page.locator("#facts li[data-key=name] .forget").click()
    await expect_facts(page, [["likes:", "green tea", "likely"]])
    async with httpx.AsyncClient(base_url=assistant_url) as http:  # gone from the store itself
        found = await http.post(
            "/store/items/search",
            json={"namespace_prefix": ["memory", "facts"]},
            headers={"Authorization": "Bearer key-a"},
        )
        assert [item["key"] for item in found.json()["items"]] == ["likes:green tea"]
        theirs = await http.post(  # bob's store has none of alice's facts
            "/store/items/search",
            json={"namespace_prefix": ["memory", "facts"]},
            headers={"Authorization": "Bearer key-b"},
        )
        assert theirs.json()["items"] == []
    again = await tabs.open(assistant_url)  # a new tab reads the same
    await expect_facts(again, [["likes:", "green tea", "likely"]])
    tabs.assert_no_errors()


async def test_a_contradiction_asks_yes_or_no_and_yes_updates_the_panel(
    assistant_url: str, tabs: Tabs
) -> None:
    page = await tabs.open(assistant_url)
    await say(page, "My name is Ann")
    await status(page, "succeeded")
    await expect_facts(page, [["name:", "Ann", "stated"]])

    await say(page, "My name is Bob")
    card = await memory_question(page)
    await status(page, "interrupted")
    await expect_facts(page, [["name:", "Ann", "stated"]])  # the old value stays in force
    await tabs.screenshot(page, "question")

    await card.locator("[data-decision=approve]").click()
    await status(page, "succeeded")
    await expect(page.locator("#approval")).to_be_hidden()
    await expect_facts(page, [["name:", "Bob", "stated"]])
    await expect(page.locator("#messages .message").last).to_have_text("Updated: your name is Bob.")
    tabs.assert_no_errors()


async def test_two_tabs_on_a_thread_show_one_question_and_one_answer_clears_both(
    assistant_url: str, tabs: Tabs
) -> None:
    one = await tabs.open(assistant_url)
    await say(one, "My name is Ann")
    await status(one, "succeeded")
    two = await tabs.open(one.url)  # the same thread, idle
    await expect(two.locator("#messages .message")).to_have_count(2)
    await expect_facts(two, [["name:", "Ann", "stated"]])

    await say(one, "My name is Bob")  # tab two learns of this run from the thread stream
    cards = [await memory_question(page) for page in (one, two)]
    for page in (one, two):
        await status(page, "interrupted")
    await tabs.screenshot(two, "question-tab2")

    await cards[1].locator("[data-decision=reject]").click()  # "No" in tab two
    for page in (one, two):
        await status(page, "succeeded")
        await expect(page.locator("#approval")).to_be_hidden()
        await expect_facts(page, [["name:", "Ann", "stated"]])
        await expect(page.locator("#messages .message").last).to_have_text(
            "Kept: your name is Ann."
        )
    tabs.assert_no_errors()


async def test_the_page_uses_chat_when_the_assistant_is_not_served(
    server: ServerHandle, worker: JobLoop, tabs: Tabs
) -> None:
    page = await tabs.open(server.url)
    await send(page, "plain echo")  # selects chat, the only graph besides approval
    await assert_whole_answer_once(page, "plain echo")
    assert await page.eval_on_selector_all("#graph option", "os => os.map(o => o.value)") == [
        "chat",
        "approval",
    ]
    await expect(page.locator("#memory")).to_be_hidden()
    tabs.assert_no_errors()
