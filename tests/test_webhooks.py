"""LangGraph's webhooks (docs/langgraph.md, "Webhooks"): the run POSTed when it ends, as
LangGraph's server sends it, at least once, from the workers, under LangGraph's URL policy.

The receiver is a Starlette app on a loopback port (port 0), so the servers and workers here
allow loopback addresses (`webhook_private_addresses`), as an operator would on one host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import ssl
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from project.webhooks import (
    Address,
    Resolver,
    WebhookPolicy,
    WebhookRefused,
    WebhookTarget,
    WebhookUnresolved,
    WebhookUrlSpec,
)
from runner.pinned_request import pinned_post, webhook_client
from runner.webhooks import webhook_payload
from server.callers.quotas import CallerQuotas
from server.resources import Resources
from stream_store.settings import Settings
from tests.conftest import ServerHandle, StartServer, StartWorker, schema_connection, serve_in_loop
from tests.processes import Cluster
from tests.test_langgraph_api import API_KEYS, client_for, eventually, human
from tests.test_langgraph_crons import EVERY_MINUTE, Clock, deps, scheduler, when
from tests.test_metrics import until, value

__all__ = ["deps"]  # the crons' fixture, used here too

# LangGraph's payload keys, in its order (langgraph_api/webhook.py `call_webhook`, observed on
# `langgraph dev` 0.16.7); `error` follows for a failed run.
PAYLOAD_KEYS = [
    "run_id",
    "thread_id",
    "assistant_id",
    "metadata",
    "status",
    "kwargs",
    "multitask_strategy",
    "created_at",
    "updated_at",
    "langsmith_session_name",
    "run_started_at",
    "run_ended_at",
    "webhook_sent_at",
    "values",
]


GRAPH = """
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    text: str


def node(state: State) -> State:
    return {"text": (state.get("text") or "") + "!"}


builder = StateGraph(State)
builder.add_node("node", node)
builder.add_edge(START, "node")
builder.add_edge("node", END)
graph = builder.compile()
"""


class Receiver:
    """A webhook receiver: records every POST; answers the statuses it is given, in turn
    (then 200), or holds a POST open until `release` is set."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], Any]] = []
        self.answers: list[int] = []
        self.statuses: list[int] = []  # what it answered, in turn
        self.hold = False
        self.release = asyncio.Event()
        self.handle: ServerHandle | None = None

    async def _hook(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.json()))
        if self.hold:
            await self.release.wait()
        status = self.answers.pop(0) if self.answers else 200
        self.statuses.append(status)
        return Response(status_code=status)

    @property
    def url(self) -> str:
        assert self.handle is not None
        return f"{self.handle.url}/hook?team=a"

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    hooks = Receiver()
    hooks.handle = await serve_in_loop(hooks.app(), lifespan="off")
    yield hooks
    hooks.release.set()
    await hooks.handle.stop()


@pytest.fixture
async def served(
    start_server: StartServer, start_worker: StartWorker
) -> tuple[ServerHandle, LangGraphClient]:
    server = await start_server(
        api_keys=API_KEYS, webhook_private_addresses=True, cron_interval_s=0
    )
    await start_worker(webhook_private_addresses=True)
    return server, client_for(server.url, "key-a")


async def deliveries(server: ServerHandle, run_id: str, key: str = "key-a") -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as http:
        return await http.get(
            f"/v1/runs/{run_id}/webhooks", headers={"Authorization": f"Bearer {key}"}
        )


async def settled(server: ServerHandle, run_id: str) -> dict[str, Any]:
    """The run's one delivery, once it is no longer pending."""
    found: dict[str, Any] = {}

    async def check() -> bool:
        answer = (await deliveries(server, run_id)).json()["webhooks"]
        found.update(answer[0] if answer else {})
        return bool(answer) and answer[0]["state"] != "pending"

    await eventually(check, "the webhook delivery to settle")
    return found


async def test_a_runs_webhook_is_posted_once_with_langgraphs_payload_when_it_ends(
    served: tuple[ServerHandle, LangGraphClient], receiver: Receiver
) -> None:
    server, sdk = served
    tid = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.create(
        tid, "chat", input=human("hi"), metadata={"m": 1}, webhook=receiver.url
    )
    assert run["kwargs"]["webhook"] == receiver.url  # shown back, as LangGraph does
    await sdk.runs.join(tid, run["run_id"])
    delivery = await settled(server, run["run_id"])
    assert delivery["state"] == "delivered"
    assert [(a["status_code"], a["error"]) for a in delivery["attempts"]] == [(200, None)]

    [(headers, payload)] = receiver.received
    assert headers["content-type"] == "application/json"
    assert list(payload) == PAYLOAD_KEYS
    assert (payload["run_id"], payload["thread_id"]) == (run["run_id"], tid)
    assert payload["assistant_id"] == run["assistant_id"]
    assert payload["status"] == "success" and payload["metadata"]["m"] == 1
    assert payload["kwargs"]["webhook"] == receiver.url
    assert payload["multitask_strategy"] == "enqueue"
    assert payload["run_started_at"] <= payload["run_ended_at"] <= payload["webhook_sent_at"]
    assert [m["type"] for m in payload["values"]["messages"]] == ["human", "ai"]
    state = await sdk.threads.get_state(tid)
    assert payload["values"] == state["values"]


def test_a_failed_runs_payload_has_langgraphs_error_and_a_cancelled_ones_its_status() -> None:
    ended = {
        "run_id": "r",
        "thread_id": "t",
        "graph": "chat",
        "status": "failed",
        "created_at": "2026-01-01T00:00:00+00:00",
        "started_at": "2026-01-01T00:00:01+00:00",
        "ended_at": "2026-01-01T00:00:02+00:00",
        "metadata": {},
        "kwargs": {"webhook": "https://h.example/x", "rollback": False},
        "multitask": "enqueue",
        "error": {"code": "graph_error", "message": "ValueError: boom"},
    }
    sent = datetime(2026, 1, 1, tzinfo=UTC)
    payload = webhook_payload(ended, None, sent)
    assert list(payload) == [*PAYLOAD_KEYS, "error"]
    assert payload["status"] == "error"
    assert payload["error"] == {"error": "ValueError", "message": "boom"}
    assert "rollback" not in payload["kwargs"]
    cancelled = webhook_payload({**ended, "status": "cancelled", "error": None}, None, sent)
    assert cancelled["status"] == "interrupted" and "error" not in cancelled
    paused = webhook_payload({**ended, "status": "interrupted", "error": None}, None, sent)
    assert paused["status"] == "success"  # stopped at interrupt(): LangGraph's run succeeded
    rolled_back = {**ended, "status": "cancelled", "kwargs": {"rollback": True}}
    assert webhook_payload(rolled_back, None, sent)["status"] == "rollback"
    only = webhook_payload(ended, {"a": 1}, sent, allowed_fields=["run_id", "values"])
    assert only == {"run_id": "r", "values": {"a": 1}}


async def test_a_receiver_down_at_first_gets_the_webhook_on_a_retry_and_only_its_owner_sees(
    served: tuple[ServerHandle, LangGraphClient], receiver: Receiver
) -> None:
    server, sdk = served
    receiver.answers = [503]  # down, then up
    tid = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.wait(tid, "chat", input=human("hi"), webhook=receiver.url)
    [created] = await sdk.runs.list(tid)
    delivery = await settled(server, created["run_id"])
    assert delivery["state"] == "delivered"
    attempts = [(a["status_code"], a["error"]) for a in delivery["attempts"]]
    assert attempts == [(503, "answered 503"), (200, None)]
    first, second = receiver.received
    assert first[1] == second[1]  # every retry sends what the first attempt did
    assert run["messages"][-1]["type"] == "ai"
    # the run's owner reads them; another caller's key does not find the run
    assert (await deliveries(server, created["run_id"], "key-b")).status_code == 404


async def test_a_slow_receiver_never_holds_a_run_up(
    served: tuple[ServerHandle, LangGraphClient], receiver: Receiver
) -> None:
    server, sdk = served
    receiver.hold = True  # the POST stays open until the end of the test
    tid = (await sdk.threads.create())["thread_id"]
    first = await sdk.runs.wait(tid, "chat", input=human("one"), webhook=receiver.url)
    second = await sdk.runs.wait(tid, "chat", input=human("two"), webhook=receiver.url)
    assert first["messages"][-1]["type"] == second["messages"][-1]["type"] == "ai"
    await eventually(lambda: _received(receiver, 2), "both POSTs to be open")
    for run in await sdk.runs.list(tid):
        assert run["status"] == "success"
        [pending] = (await deliveries(server, run["run_id"])).json()["webhooks"]
        assert pending["state"] == "pending"  # still held by the receiver
    receiver.release.set()


async def test_a_caller_at_its_pending_webhooks_bound_gets_429_and_others_do_not(
    start_server: StartServer, start_worker: StartWorker, receiver: Receiver
) -> None:
    server = await start_server(
        api_keys=API_KEYS, webhook_private_addresses=True, max_pending_webhooks=1
    )
    await start_worker(webhook_private_addresses=True)
    alice, bob = client_for(server.url, "key-a"), client_for(server.url, "key-b")
    receiver.hold = True  # alice's first delivery stays pending
    await alice.runs.wait(None, "chat", input=human("one"), webhook=receiver.url)
    await eventually(lambda: _received(receiver, 1), "the first POST")
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await alice.runs.create(None, "chat", input=human("two"), webhook=receiver.url)
    assert refused.value.response.status_code == 429
    assert refused.value.response.json()["code"] == "too_many_pending_webhooks"
    await alice.runs.wait(None, "chat", input=human("no webhook"))  # only webhooks are bounded
    await bob.runs.create(None, "chat", input=human("bob's"), webhook=receiver.url)
    receiver.release.set()


async def test_the_projects_webhooks_key_sets_the_policy_the_headers_and_the_fields(
    start_server: StartServer, start_worker: StartWorker, receiver: Receiver, tmp_path: Path
) -> None:
    assert receiver.handle is not None
    port = int(receiver.handle.url.rsplit(":", 1)[1])
    webhooks = {
        "url": {"require_https": False, "allowed_ports": [port]},
        "headers": {"X-Token": "Bearer ${{ env.LG_WEBHOOK_TOKEN }}", "X-Static": "s"},
        "allowed_fields": ["run_id", "status", "values"],
    }
    config = tmp_path / "langgraph.json"
    (tmp_path / "agent.py").write_text(GRAPH)  # the graph LangGraph's POST was observed with
    project = {
        "graphs": {"agent": "./agent.py:graph"},
        "env": {"LG_WEBHOOK_TOKEN": "t0k"},
        "webhooks": webhooks,
    }
    config.write_text(json.dumps(project))
    changes = {"config_path": str(config), "webhook_private_addresses": True}
    server = await start_server(**changes)
    await start_worker(**changes)
    sdk = client_for(server.url)
    with pytest.raises(UnprocessableEntityError) as refused:
        await sdk.runs.create(
            None, "chat", input=human("x"), webhook=f"http://127.0.0.1:{port + 1}/"
        )
    assert refused.value.response.json()["detail"] == f"Webhook port {port + 1} not allowed"
    run = await sdk.runs.create(None, "agent", input={"text": "hi"}, webhook=receiver.url)
    await eventually(lambda: _received(receiver, 1), "the POST")
    [(headers, payload)] = receiver.received
    assert (headers["x-token"], headers["x-static"]) == ("Bearer t0k", "s")
    assert list(payload) == ["run_id", "status", "values"]
    assert (payload["run_id"], payload["status"]) == (run["run_id"], "success")
    assert payload["values"] == {"text": "hi!"}


async def _received(receiver: Receiver, count: int) -> bool:
    return len(receiver.received) >= count


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("ftp://example.com/x", "Webhook host blocked: scheme 'ftp' not allowed"),
        ("/hooks/run", "Loopback webhooks (relative URLs) are not served"),
        ("http://169.254.169.254/latest", "Webhook host blocked: cloud metadata endpoint"),
        ("http://10.1.2.3/hook", "Webhook host blocked: private IP range"),
        ("http://localhost:9/hook", "Webhook host blocked: localhost address"),
        ("not a url", "Invalid webhook hostname ''"),
        ("https://example.com/" + "a" * 5000, "Webhook URL too long"),
    ],
)
async def test_a_refused_webhook_is_422_at_submit_and_nothing_is_recorded(
    start_server: StartServer, settings: Settings, url: str, detail: str
) -> None:
    server = await start_server()  # loopback and private addresses refused (the default)
    sdk = client_for(server.url)
    tid = (await sdk.threads.create())["thread_id"]
    for submit in (
        lambda: sdk.runs.create(tid, "chat", input=human("x"), webhook=url),
        lambda: sdk.runs.create(None, "chat", input=human("x"), webhook=url),
        lambda: sdk.crons.create("chat", schedule=EVERY_MINUTE, input=human("x"), webhook=url),
    ):
        with pytest.raises(UnprocessableEntityError) as refused:
            await submit()
        assert refused.value.response.json()["detail"].startswith(detail)
    assert await sdk.runs.list(tid) == []
    assert await sdk.crons.search() == []
    async with await schema_connection(settings) as conn:
        cur = await conn.execute("SELECT count(*) FROM runstream_runs")
        assert (await cur.fetchone())[0] == 0


async def end_as_a_dead_worker(settings: Settings, run_id: str) -> None:
    """The last commits of a worker that ran `run_id` and died: the run succeeded, its
    delivery is recorded, and no worker has it."""
    async with await schema_connection(settings) as conn:
        for status in ("running", "succeeded"):
            await conn.execute(
                "UPDATE runstream_runs SET status = %s, started_at = coalesce(started_at,"
                " clock_timestamp()), finished_at = CASE WHEN %s = 'succeeded'"
                " THEN clock_timestamp() END WHERE run_id = %s",
                (status, status, run_id),
            )
            await conn.commit()


async def test_a_run_that_ended_while_no_worker_delivered_is_delivered_by_the_next_worker(
    start_server: StartServer,
    start_worker: StartWorker,
    settings: Settings,
    receiver: Receiver,
) -> None:
    """The worker that ran it died after its end committed: the delivery was recorded in that
    same transaction, and any worker sends it."""
    server = await start_server(webhook_private_addresses=True)
    sdk = client_for(server.url)
    tid = (await sdk.threads.create())["thread_id"]
    run = await sdk.runs.create(tid, "chat", input=human("hi"), webhook=receiver.url)
    await end_as_a_dead_worker(settings, run["run_id"])
    assert receiver.received == []
    await start_worker(webhook_private_addresses=True)
    await eventually(lambda: _received(receiver, 1), "the next worker to deliver it")
    [(_, payload)] = receiver.received
    assert (payload["run_id"], payload["status"]) == (run["run_id"], "success")


async def test_a_crons_runs_post_its_webhook(
    served: tuple[ServerHandle, LangGraphClient],
    deps: tuple[Resources, CallerQuotas],
    receiver: Receiver,
) -> None:
    _, sdk = served
    cron = await sdk.crons.create(
        "chat", schedule=EVERY_MINUTE, input=human("news"), webhook=receiver.url
    )
    assert cron["payload"]["webhook"] == receiver.url  # kept in its run request, as LangGraph
    slot = when(cron["next_run_date"])
    assert await scheduler(deps, Clock(slot + timedelta(seconds=1))).tick() == 1
    await eventually(lambda: _received(receiver, 1), "the cron's run's webhook")
    [(_, payload)] = receiver.received
    assert payload["status"] == "success"
    assert payload["kwargs"]["webhook"] == receiver.url


# -- the URL policy, as LangGraph's `webhooks.url` reads ------------------------------------------


async def _refusal(policy: WebhookPolicy, url: str) -> str | None:
    try:
        await policy.check(url)
    except WebhookRefused as exc:
        return str(exc)
    return None


async def test_the_url_policy_is_langgraphs() -> None:
    strict = WebhookPolicy(
        url=WebhookUrlSpec(allowed_domains=["hooks.example.com", "*.corp.example"]),
        private_addresses=True,
    )
    assert await _refusal(strict, "http://hooks.example.com/x") == "Webhook must use https"
    assert await _refusal(strict, "https://other.example.com/x") == "Webhook domain not allowed"
    assert await _refusal(strict, "https://corp.example/x") == "Webhook domain not allowed"
    ports = WebhookPolicy(url=WebhookUrlSpec(allowed_ports=[8443]), private_addresses=True)
    assert await _refusal(ports, "https://10.0.0.1/x") == "Webhook port 443 not allowed"
    assert await _refusal(ports, "https://10.0.0.1:8443/x") is None
    short = WebhookPolicy(url=WebhookUrlSpec(max_url_length=30), private_addresses=True)
    assert await _refusal(short, "https://10.0.0.1/" + "a" * 30) == "Webhook URL too long"


async def test_loopback_and_private_addresses_are_the_operators_to_allow() -> None:
    closed = WebhookPolicy()
    assert (
        await _refusal(closed, "http://127.0.0.1:8/x") == "Webhook host blocked: loopback IP range"
    )
    assert await _refusal(closed, "http://[::1]:8/x") == "Webhook host blocked: loopback IP range"
    assert (
        await _refusal(closed, "http://192.168.1.2/x") == "Webhook host blocked: private IP range"
    )
    opened = WebhookPolicy(private_addresses=True)
    assert await _refusal(opened, "http://127.0.0.1:8/x") is None
    assert await _refusal(opened, "http://192.168.1.2/x") is None
    # never, whoever allows what
    assert (
        await _refusal(opened, "http://169.254.10.10/x") == "Webhook host blocked: blocked IP range"
    )
    assert await _refusal(opened, "http://[::ffff:169.254.169.254]/x") == (
        "Webhook host blocked: cloud metadata endpoint"
    )
    # the project may close what the operator opened, not the reverse
    project_closed = WebhookPolicy(
        url=WebhookUrlSpec(require_https=False, disable_private_ips=True), private_addresses=True
    )
    assert await _refusal(project_closed, "http://10.0.0.1/x") == (
        "Webhook host blocked: private IP range"
    )
    project_open = WebhookPolicy(url=WebhookUrlSpec(disable_loopback=False))
    assert await _refusal(project_open, "https://127.0.0.1/x") == (
        "Webhook host blocked: loopback IP range"
    )


@pytest.mark.fault
async def test_a_worker_killed_after_the_run_ended_leaves_its_webhook_to_another(
    cluster: Cluster, receiver: Receiver
) -> None:
    """SIGKILL the worker that ran the run as soon as the run has ended, its receiver down
    (503) until then, so that worker cannot have delivered it: another worker does."""
    # a short lease: the dead worker's claim runs out soon (the receiver answers at once)
    private = {"RUNSTREAM_WEBHOOK_PRIVATE_ADDRESSES": "true", "RUNSTREAM_WEBHOOK_LEASE": "3"}
    _, url = await cluster.server(**private)
    first = await cluster.ready_worker(**private)
    receiver.answers = [503] * 1000  # down
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        tid = (await http.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "chat", "input": human("hi"), "webhook": receiver.url}
        run = (await http.post(f"/threads/{tid}/runs", json=body)).json()

        async def ended() -> bool:
            answer = (await http.get(f"/threads/{tid}/runs/{run['run_id']}")).json()
            return bool(answer["status"] == "success")

        await eventually(ended, "the run to end")
        first.kill()
        receiver.answers = []  # up
        await cluster.ready_worker(**private)
        # a delivery the dead worker held mid-POST waits for its lease to run out
        await eventually(lambda: _answered(receiver, 200), "another worker's POST", 150)
        webhooks: list[dict[str, Any]] = []

        async def recorded() -> bool:  # the worker records the 200 after the receiver sent it
            nonlocal webhooks
            answer = await http.get(f"/v1/runs/{run['run_id']}/webhooks")
            webhooks = answer.json()["webhooks"]
            return all(delivery["state"] != "pending" for delivery in webhooks)

        await eventually(recorded, "the delivery's outcome recorded")
    [delivery] = webhooks
    assert delivery["state"] == "delivered"
    assert delivery["attempts"][-1]["status_code"] == 200
    assert all(a["status_code"] == 503 for a in delivery["attempts"][:-1])
    assert {payload["run_id"] for _, payload in receiver.received} == {run["run_id"]}


async def _answered(receiver: Receiver, status: int) -> bool:
    return status in receiver.statuses


# -- DNS rebinding: each attempt resolves once and connects to what it checked -------------------

PUBLIC = "93.184.215.14"  # a public address (example.com's)
REBOUND = "rebind.example.test"  # a name only the tests' resolvers know


def resolver(table: dict[str, list[str]]) -> Resolver:
    """A resolver answering from `table` (the name's addresses, in order), as DNS would."""

    async def resolve(host: str, port: int) -> list[Address]:
        if host not in table:
            raise WebhookUnresolved("Webhook host blocked: DNS resolution failed")
        return [ipaddress.ip_address(a) for a in table[host]]

    return resolve


@pytest.mark.parametrize(
    ("addresses", "reason"),
    [
        ([PUBLIC, "127.0.0.1"], "loopback IP range"),  # any address refused refuses the name
        (["::1", PUBLIC], "loopback IP range"),
        (["::ffff:127.0.0.1"], "loopback IP range"),  # IPv4-mapped
        (["::ffff:10.1.2.3"], "private IP range"),
        (["10.0.0.7"], "private IP range"),
        (["fd12::1"], "private IP range"),
        (["169.254.169.254"], "cloud metadata endpoint"),
        (["169.254.1.1"], "blocked IP range"),  # link-local
        (["fe80::1"], "blocked IP range"),
        (["0.0.0.0"], "blocked IP range"),  # unspecified
        (["::"], "blocked IP range"),
        (["224.0.0.1"], "blocked IP range"),  # multicast
        (["ff02::1"], "blocked IP range"),
        (["240.0.0.1"], "blocked IP range"),  # reserved
        (["2001:db8::1"], "blocked IP range"),  # documentation
        (["::127.0.0.1"], "blocked IP range"),  # IPv4-compatible (deprecated)
        (["64:ff9b::7f00:1"], "blocked IP range"),  # NAT64 of 127.0.0.1
        (["2002:7f00:1::1"], "loopback IP range"),  # 6to4 of 127.0.0.1
    ],
)
async def test_a_name_is_refused_when_any_address_it_resolves_to_is_not_public(
    addresses: list[str], reason: str
) -> None:
    closed = WebhookPolicy(resolve=resolver({REBOUND: addresses}))
    assert await _refusal(closed, f"https://{REBOUND}/hook") == f"Webhook host blocked: {reason}"


async def test_a_checked_url_answers_the_addresses_its_post_connects_to() -> None:
    table = {REBOUND: [PUBLIC, "2606:4700::1111"]}
    target = await WebhookPolicy(resolve=resolver(table)).check(f"https://{REBOUND}:8443/h")
    assert (target.host, target.address) == (REBOUND, ipaddress.ip_address(PUBLIC))
    literal = await WebhookPolicy().check("https://[2606:4700::1111]/h")  # no lookup
    assert literal.addresses == (ipaddress.ip_address("2606:4700::1111"),)
    with pytest.raises(WebhookUnresolved):  # at submit a 422; at delivery retried
        await WebhookPolicy(resolve=resolver({})).check("https://nowhere.example.test/h")
    opened = WebhookPolicy(private_addresses=True, resolve=resolver({REBOUND: ["127.0.0.1"]}))
    assert (await opened.check(f"http://{REBOUND}/h")).address == ipaddress.ip_address("127.0.0.1")


async def test_ipv6_literals_of_loopback_are_refused_unless_the_operator_allows_them() -> None:
    closed = WebhookPolicy()
    for url in ("http://[::1]:8/x", "http://[::ffff:127.0.0.1]:8/x", "http://[::FFFF:7f00:1]/x"):
        assert await _refusal(closed, url) == "Webhook host blocked: loopback IP range", url
    opened = WebhookPolicy(private_addresses=True)
    assert await _refusal(opened, "http://[::ffff:127.0.0.1]/") is None
    assert await _refusal(closed, "http://[::ffff:169.254.169.254]/") == (
        "Webhook host blocked: cloud metadata endpoint"
    )


class TlsReceiver:
    """An HTTPS receiver on 127.0.0.1 with a certificate for `hooks.example.test` only, from a
    CA of the test's own; it records the TLS server name and the Host header of each POST."""

    NAME = "hooks.example.test"

    def __init__(self) -> None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runstream test CA")])
        now = datetime.now(UTC)
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.NAME)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(self.NAME)]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        self.trust = ssl.create_default_context(
            cadata=ca.public_bytes(serialization.Encoding.PEM).decode()
        )
        self.served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.served.load_cert_chain(*self._files(key, leaf))
        self.served.sni_callback = self._sni
        self.server_names: list[str | None] = []
        self.hosts: list[str] = []
        self.connections = 0

    def _files(self, key: ec.EllipticCurvePrivateKey, leaf: x509.Certificate) -> tuple[str, str]:
        folder = Path(tempfile.mkdtemp(prefix="runstream-tls-"))
        (folder / "cert.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        (folder / "key.pem").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return str(folder / "cert.pem"), str(folder / "key.pem")

    def _sni(self, _sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        self.server_names.append(name)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
            fields = {k.lower(): v for k, v in (line.split(": ", 1) for line in head[1:] if line)}
            await reader.readexactly(int(fields.get("content-length", "0")))
            self.hosts.append(fields["host"])
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            await reader.read()  # until the client closes: it keeps no connection alive
        except (ssl.SSLError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a handshake the client refused
        finally:
            writer.close()

    async def start(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.served)


async def test_the_post_connects_to_the_checked_address_with_the_names_host_and_certificate() -> (
    None
):
    """The URL's name never reaches DNS at the POST (only the tests' resolver knows it), yet
    the receiver sees it as the Host and the TLS server name, and the certificate is checked
    against it: a name the certificate does not cover is refused at the handshake."""
    tls = TlsReceiver()
    server = await tls.start()
    port = server.sockets[0].getsockname()[1]
    table = {tls.NAME: ["127.0.0.1"], "other.example.test": ["127.0.0.1"]}
    policy = WebhookPolicy(private_addresses=True, resolve=resolver(table))
    timeout = httpx.Timeout(5.0)
    async with server, webhook_client(timeout, 2, verify=tls.trust) as client:
        for _ in range(2):
            target = await policy.check(f"https://{tls.NAME}:{port}/hook")
            response = await client.send(pinned_post(client, target, b"{}", {}))
            assert response.status_code == 200
        assert tls.hosts == [f"{tls.NAME}:{port}"] * 2
        assert tls.server_names == [tls.NAME] * 2
        assert tls.connections == 2  # a handshake, and a certificate check, per POST
        other = await policy.check(f"https://other.example.test:{port}/hook")
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.send(pinned_post(client, other, b"{}", {}))
        assert tls.hosts == [f"{tls.NAME}:{port}"] * 2  # nothing was sent to it


async def test_the_post_carries_the_checked_name_or_is_refused() -> None:
    """An internationalised name is sent as the resolver looked it up (IDNA); a URL whose host
    the HTTP client reads otherwise than the policy did is refused rather than sent under a
    name nobody checked."""
    loopback = (ipaddress.ip_address("127.0.0.1"),)
    async with webhook_client(httpx.Timeout(5.0), 1) as client:
        for url, host in (
            ("https://bücher.example/h", "bücher.example"),
            ("https://xn--bcher-kva.example/h", "xn--bcher-kva.example"),
        ):
            request = pinned_post(client, WebhookTarget(url, host, loopback), b"{}", {})
            assert str(request.url) == "https://127.0.0.1/h"
            assert request.headers["host"] == "xn--bcher-kva.example"
            assert request.extensions["sni_hostname"] == "xn--bcher-kva.example"
        odd = WebhookTarget("http://a b.example/h", "a b.example", loopback)  # httpx: a%20b
        odd_reading = re.escape("reads as 'a%20b.example' to the HTTP client")
        with pytest.raises(WebhookRefused, match=odd_reading):
            pinned_post(client, odd, b"{}", {})


async def ended_under_another_name(
    start_server: StartServer, settings: Settings, receiver: Receiver
) -> tuple[ServerHandle, str, str]:
    """A server, and a run of it that ended while no worker ran, whose webhook URL names its
    receiver `REBOUND` (a URL the submit checked and passed, say): the server, the run's id,
    the URL."""
    server = await start_server(webhook_private_addresses=True, api_keys=API_KEYS)
    sdk = client_for(server.url, "key-a")
    run = await sdk.runs.create(None, "chat", input=human("hi"), webhook=receiver.url)
    await end_as_a_dead_worker(settings, run["run_id"])
    rebound = receiver.url.replace("127.0.0.1", REBOUND)
    async with await schema_connection(settings) as conn:
        await conn.execute("UPDATE runstream_webhooks SET url = %s", (rebound,))
        await conn.commit()
    return server, run["run_id"], rebound


async def test_a_name_pointing_at_loopback_at_delivery_is_refused_once_and_counted(
    start_server: StartServer, start_worker: StartWorker, settings: Settings, receiver: Receiver
) -> None:
    """When the run ends, the name resolves to a public address and to 127.0.0.1: the attempt
    is refused with the policy's reason, never retried, and the receiver on 127.0.0.1 gets
    nothing."""
    server, run_id, _ = await ended_under_another_name(start_server, settings, receiver)
    worker = await start_worker(webhook_resolver=resolver({REBOUND: [PUBLIC, "127.0.0.1"]}))
    delivery = await settled(server, run_id)
    assert delivery["state"] == "failed"
    assert [(a["status_code"], a["error"]) for a in delivery["attempts"]] == [
        (None, "refused by the URL policy: Webhook host blocked: loopback IP range")
    ]
    assert receiver.received == []
    registry = worker.ctx["state"].metrics.registry
    assert attempts_counted(registry) == {
        "delivered": 0,
        "retrying": 0,
        "failed": 0,
        "refused": 1,
    }


async def test_the_post_goes_to_the_address_its_check_resolved_with_the_names_host(
    start_server: StartServer, start_worker: StartWorker, settings: Settings, receiver: Receiver
) -> None:
    """With private addresses allowed, a name only the worker's resolver knows is delivered
    to the address it resolved to, under its own name."""
    server, run_id, url = await ended_under_another_name(start_server, settings, receiver)
    await start_worker(
        webhook_private_addresses=True, webhook_resolver=resolver({REBOUND: ["127.0.0.1"]})
    )
    assert (await settled(server, run_id))["state"] == "delivered"
    [(headers, payload)] = receiver.received
    assert headers["host"] == urlsplit(url).netloc
    assert payload["run_id"] == run_id


async def test_a_name_that_does_not_resolve_at_delivery_is_retried(
    start_server: StartServer, start_worker: StartWorker, settings: Settings, receiver: Receiver
) -> None:
    """A failed lookup is a failed connect, not a refusal: the next attempt resolves again."""
    server, run_id, _ = await ended_under_another_name(start_server, settings, receiver)
    table: dict[str, list[str]] = {}  # the name does not resolve yet
    await start_worker(webhook_private_addresses=True, webhook_resolver=resolver(table))

    async def attempted() -> bool:
        [delivery] = (await deliveries(server, run_id)).json()["webhooks"]
        return bool(delivery["attempts"])

    await eventually(attempted, "the first attempt")
    table[REBOUND] = ["127.0.0.1"]
    delivery = await settled(server, run_id)
    assert delivery["state"] == "delivered"
    assert [(a["status_code"], a["error"]) for a in delivery["attempts"]] == [
        (None, "the webhook's host did not resolve"),
        (200, None),
    ]


# -- delivery metrics ------------------------------------------------------------------------------


def attempts_counted(registry: CollectorRegistry) -> dict[str, float | None]:
    return {
        outcome: registry.get_sample_value("runstream_webhook_attempts_total", {"outcome": outcome})
        for outcome in ("delivered", "retrying", "failed", "refused")
    }


async def test_a_delivered_and_a_failed_webhook_move_the_workers_counters_and_the_pending_gauge(
    start_server: StartServer, start_worker: StartWorker, receiver: Receiver
) -> None:
    server = await start_server(webhook_private_addresses=True, api_keys=API_KEYS)
    worker = await start_worker(webhook_private_addresses=True)
    registry = worker.ctx["state"].metrics.registry
    sdk = client_for(server.url, "key-a")
    assert attempts_counted(registry) == dict.fromkeys(attempts_counted(registry), 0)

    receiver.answers = [503]  # down, then up: delivered on the second attempt
    tid = (await sdk.threads.create())["thread_id"]
    await sdk.runs.wait(tid, "chat", input=human("one"), webhook=receiver.url)
    [first] = await sdk.runs.list(tid)
    assert (await settled(server, first["run_id"]))["state"] == "delivered"
    receiver.answers = [400]  # not worth another attempt: failed at once
    second = await sdk.runs.create(None, "chat", input=human("two"), webhook=receiver.url)
    assert (await settled(server, second["run_id"]))["state"] == "failed"
    assert attempts_counted(registry) == {
        "delivered": 1,
        "retrying": 1,
        "failed": 1,
        "refused": 0,
    }
    assert registry.get_sample_value("runstream_webhook_post_seconds_count") == 3
    assert registry.get_sample_value("runstream_webhook_delivery_seconds_count") == 1

    receiver.hold = True  # a third stays pending while its POST is held open
    await sdk.runs.create(None, "chat", input=human("three"), webhook=receiver.url)
    await eventually(lambda: _received(receiver, 4), "the third POST")
    await until(f"{server.url}/metrics", lambda t: value(t, "runstream_webhooks_pending") == 1)
    receiver.release.set()
    await until(f"{server.url}/metrics", lambda t: value(t, "runstream_webhooks_pending") == 0)
