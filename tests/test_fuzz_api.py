"""No request, and no sequence of requests, gets a 5xx: schemathesis fuzzes the served OpenAPI
schema (issue 9; docs/security.md, "Fuzzing").

A real server and worker (real Redis and Postgres, the test's own schema and key prefix) run
in a background thread's event loop, because schemathesis calls the API synchronously. Every
operation gets schema-valid and schema-invalid requests; then the state machine chains
operations along the links schemathesis infers from the schema (a created run's `run_id` into
`GET /v1/runs/{run_id}`, `/events`, `/cancel`, `/resume`; a thread's id into its routes), so the
fuzzed requests reach records that exist. Only `not_a_server_error` is checked: a 4xx for
nonsense is the API working.

Two hooks steer half of the generated requests past the first refusal (a run body naming a
graph the server has; a UUID where a path takes an id), and the schema is loaded with the rule
the server keeps but Litestar's schema does not state (`with_closed_bodies`). Two more make
input schemathesis hardly ever draws itself: a hostile value in one query parameter (NUL,
`²`, 5,000 digits ...), and a checkpoint object whose `checkpoint_id` is any JSON value.

Random draws reach a given route with a given value too rarely to count on, so a sweep sends
each hostile query value in each query parameter of each operation, on records seeded to
exist (a thread that has run, its checkpoints, a store item), and each JSON type as the
checkpoint id of the routes that take one: run against the code before issue 20, it found
every 500 fixed there (`?xray=²`, `①` and 5,000 digits, `?before=%00` on a thread with
checkpoints, `{"before": {"checkpoint_id": 123}}`). Examples are bounded by the Hypothesis
profile (conftest.py), so the file takes about 25 seconds; `--hypothesis-profile=thorough`
searches ten times longer.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, ClassVar, Protocol, TypeVar, cast

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.errors import FlakyStrategyDefinition
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok

from runner.graph_registry import BUILTIN_GRAPHS
from server.api_docs import refuse_unknown_fields_in_schema
from server.app import create_app
from stream_store.settings import Settings
from tests.conftest import launch_worker, serve_in_loop, stop_worker

T = TypeVar("T")

# Schemathesis' own strategies draw from `random`, which Hypothesis warns about on every run.
pytestmark = [
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
    pytest.mark.slow,
]

# A run's event stream stays open until the run ends: read it for at most this long, or this
# many events, then hang up (a cut stream is not a failure).
REQUEST_TIMEOUT_S = 2.0
STREAM_EVENTS = 50
# Requests per operation, and state machine scenarios, as a share of the profile's examples.
API_SHARE = 4
SCENARIO_STEPS = 6
OPERATION_SHARDS = 4  # tests the operations are fuzzed in (a run's processes share them)
# Fresh starts of the state machine after Hypothesis found its draws inconsistent (see below).
RESTARTS = 5

# Operations the test must reach: each once had a 5xx only input past its lookup found.
REQUIRED_OPERATIONS = {
    "GET /assistants/{assistant_id}/graph",
    "GET /threads/{thread_id}/history",
    "POST /threads/{thread_id}/history",
    "GET /threads/{thread_id}/state",
    "POST /threads/{thread_id}/state/checkpoint",
    "GET /threads/{thread_id}/state/{checkpoint_id}",
    "GET /store/items",
    "PUT /store/items",
    "DELETE /store/items",
    "POST /store/items/search",
    "POST /store/namespaces",
}

# The body fields that take a checkpoint object, by operation.
CHECKPOINT_FIELDS = {
    "POST /threads/{thread_id}/history": ("before",),
    "POST /threads/{thread_id}/state/checkpoint": ("checkpoint",),
}

SCHEMATHESIS_CONFIG = {
    "request-timeout": REQUEST_TIMEOUT_S,
    "max-stream-events": STREAM_EVENTS,
    "generation": {"database": "none"},
    # Stateless requests pass `checks` themselves; the state machine takes them from here.
    "checks": {"enabled": False, "not_a_server_error": {"enabled": True}},
}


class BackgroundLoop:
    """An event loop in a daemon thread, for a server that synchronous callers talk to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 90) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture
def api_url(settings: Settings) -> Iterator[str]:
    """A server and a worker on the test's settings, served from a background event loop."""
    background = BackgroundLoop()

    async def start() -> tuple[Any, Any, asyncio.Task[None]]:
        server = await serve_in_loop(create_app(settings))
        worker, task = await launch_worker(settings)
        return server, worker, task

    server, worker, task = background.run(start())
    try:
        yield server.url
    finally:

        async def stop() -> None:
            crashed = task.done() and not task.cancelled() and task.exception()
            await stop_worker(worker, task)
            await server.stop()
            if crashed:
                raise crashed

        try:
            background.run(stop())
        finally:
            background.close()


def runnable_bodies(_: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    """Half of the run bodies name a built-in graph and leave out `thread_id` and `config`, so
    that runs get recorded and executed: a generated graph name is never one the server knows,
    a generated thread id never one it has, a generated `configurable` key never one a graph
    takes. The other half go as generated."""
    if not isinstance(body, dict):
        return st.just(body)
    runnable = {key: value for key, value in body.items() if key not in ("thread_id", "config")}
    graphs = st.sampled_from(sorted(BUILTIN_GRAPHS))
    return st.just(body) | graphs.map(lambda graph: {**runnable, "graph": graph})


Known = dict[str, list[str]]


def uuid_ids(_: schemathesis.HookContext, parameters: Any) -> st.SearchStrategy[Any]:
    """Half of the ids in paths are UUIDs, so that requests get past the id check to the
    lookup (404, or a record the state machine linked in); the other half go as generated.
    (Not the seeded records' ids: a random request on a thread that has run streams or runs
    its graph, which made the file three times slower; the sweep below takes them.)"""
    if not isinstance(parameters, dict) or not parameters:
        return st.just(parameters)
    uuids = st.fixed_dictionaries({name: st.uuids().map(str) for name in parameters})
    return st.just(parameters) | uuids.map(lambda ids: {**parameters, **ids})


# Query values no well-formed client sends: NUL, digits `str.isdigit` takes and `int` refuses
# or reads (`²`, `٣`), more digits than `int` parses (4,300), signs, exponents, long text.
HOSTILE_QUERY_VALUES = [
    "\x00",
    "1\x00",
    "a\x00b",
    "\x00" * 3,
    "²",
    "٣",
    "①",
    "9" * 5000,
    "-1",
    "1e309",
    "0x1f",
    "NaN",
    "\U0001f600",
    "x" * 5000,
    " ",
]
HOSTILE_VALUES = st.sampled_from(HOSTILE_QUERY_VALUES)


def hostile_queries(context: schemathesis.HookContext, query: Any) -> st.SearchStrategy[Any]:
    """A third of the query strings go as generated; in the others, one of the operation's
    query parameters holds a hostile value (Litestar's schema declares most of them plain
    strings, and schemathesis' own strings hardly ever are one of these)."""
    operation = context.operation
    names = [parameter.name for parameter in operation.query] if operation else []
    if not names:
        return st.just(query)
    hostile = st.tuples(st.sampled_from(names), HOSTILE_VALUES).map(
        lambda pair: {**(query or {}), pair[0]: pair[1]}
    )
    return st.just(query) | hostile | hostile


# Checkpoint ids of every JSON type, for the sweep of the routes that take a checkpoint object.
ODD_CHECKPOINT_IDS: list[Any] = [123, -1, 1.5, True, None, [], ["x"], {}, {"a": 1}, "", "x", "\x00"]

# Any JSON value, for the fields no schema types (a checkpoint object's `checkpoint_id`).
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=5,
)


def checkpoint_objects(field: str) -> Callable[[schemathesis.HookContext, Any], Any]:
    """Two thirds of the bodies get, as `field`, a checkpoint object (`{"checkpoint_id": ...}`)
    whose id is any JSON value: the schema types the field only as an object, so schemathesis
    never makes one with the key the route reads."""

    def bodies(_: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
        if not isinstance(body, dict):
            return st.just(body)
        checkpoints = st.fixed_dictionaries({"checkpoint_id": ANY_JSON})
        with_checkpoint = checkpoints.map(lambda checkpoint: {**body, field: checkpoint})
        return st.just(body) | with_checkpoint | with_checkpoint

    return bodies


def with_closed_bodies(raw: dict[str, Any]) -> dict[str, Any]:
    """The served schema, plus the one rule of its request bodies it does not state: the
    decoder refuses unknown fields (`forbid_unknown_fields`), but Litestar's schema leaves out
    `additionalProperties: false`. Without it, schemathesis' "valid" bodies carry extra fields
    and are all refused; with it, unknown fields are among the invalid ones instead."""
    return refuse_unknown_fields_in_schema(raw)  # the rule as the server states it


def seeded(api_url: str) -> Known:
    """Records for the path hook to name: a LangGraph thread with a finished run (so it has
    checkpoints and a graph), its checkpoints, the graphs' own assistants; and a store item
    for the store routes to find."""
    with httpx.Client(base_url=api_url, timeout=60) as client:
        thread = client.post("/threads", json={}).raise_for_status().json()["thread_id"]
        body = {"assistant_id": "chat", "input": {"messages": [{"type": "human", "content": "hi"}]}}
        client.post(f"/threads/{thread}/runs/wait", json=body).raise_for_status()
        [run] = client.get(f"/threads/{thread}/runs").raise_for_status().json()
        history = client.get(f"/threads/{thread}/history").raise_for_status().json()
        item = {"namespace": ["notes"], "key": "seeded", "value": {"text": "hi"}}
        client.put("/store/items", json=item).raise_for_status()
    return {
        "thread_id": [thread],
        "run_id": [run["run_id"]],
        "checkpoint_id": [state["checkpoint_id"] for state in history],
        "assistant_id": ["chat", "approval"],
    }


@pytest.fixture
def api_schema(api_url: str) -> schemathesis.BaseSchema:
    """The schema the server serves, as schemathesis loads it (no auth: the tests run without
    API keys, on loopback, so every request's `Host` is allowed), with the hooks above."""
    raw = httpx.get(f"{api_url}/schema/openapi.json", timeout=30).raise_for_status().json()
    config = schemathesis.Config.from_dict({**SCHEMATHESIS_CONFIG, "base-url": api_url})
    schema = schemathesis.openapi.from_dict(with_closed_bodies(raw), config=config)
    run_bodies = schema.hooks.hook("flatmap_body").apply_to(path_regex=r"/runs$", method="POST")
    run_bodies(runnable_bodies)
    for path, field in (("/history$", "before"), ("/state/checkpoint$", "checkpoint")):
        hook = schema.hooks.hook("flatmap_body").apply_to(path_regex=path, method="POST")
        hook(checkpoint_objects(field))
    schema.hooks.hook("flatmap_path_parameters")(uuid_ids)
    schema.hooks.hook("flatmap_query")(hostile_queries)
    return schema


def fuzz_settings(**changes: Any) -> hypothesis_settings:
    """The loaded profile's settings, fewer examples, and no health checks (requests are slow
    and an operation with only string parameters has no invalid input to draw)."""
    profile = hypothesis_settings.default
    assert profile is not None  # conftest.py loads one
    options: dict[str, Any] = {
        "max_examples": max(1, profile.max_examples // API_SHARE),
        "deadline": None,
        "database": None,
        "phases": [Phase.generate, Phase.shrink],
        "suppress_health_check": list(HealthCheck),
    }
    return hypothesis_settings(profile, **{**options, **changes})


def stateful_settings(**changes: Any) -> hypothesis_settings:
    """As schemathesis runs its state machines: generation only. Replaying or shrinking a
    sequence against a live server does not give the same answers again."""
    return fuzz_settings(phases=[Phase.generate], stateful_step_count=SCENARIO_STEPS, **changes)


class RecordingMachine(Protocol):
    scenarios: int
    server_errors: list[str]

    def run(self, *, settings: hypothesis_settings | None = None) -> None: ...


def recording_state_machine(schema: schemathesis.BaseSchema) -> RecordingMachine:
    """Schemathesis' state machine for `schema`, counting its scenarios and keeping every 5xx
    it meets (as a curl command), whether or not Hypothesis gets to report it."""

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        scenarios = 0
        server_errors: ClassVar[list[str]] = []

        def setup(self) -> None:
            type(self).scenarios += 1

        def after_call(self, response: schemathesis.Response, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            if response.status_code >= 500:
                command = case.as_curl_command(headers=dict(response.request.headers))
                self.server_errors.append(f"{response.status_code}: {command}")

    return cast(RecordingMachine, Machine)


def sendable_as_json(body: Any) -> bool:
    if not isinstance(body, dict | list | str | int | float | bool):
        return True  # no JSON body, or one of another media type
    try:
        json.dumps(body, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def fuzz_operation(operation: schemathesis.APIOperation) -> None:
    """Valid and invalid requests for one operation, mixed, as schemathesis' own runner does."""
    cases = st.one_of([operation.as_strategy(generation_mode=mode) for mode in GenerationMode])

    @fuzz_settings()
    @given(case=cases)
    def requests_get_no_server_error(case: schemathesis.Case) -> None:
        # A body with NaN or an infinity is not JSON: no client can send it (requests refuses
        # to encode it, "Out of range float values are not JSON compliant"), so it never
        # reaches the server.
        assume(sendable_as_json(case.body))
        case.call_and_validate(checks=[not_a_server_error])

    requests_get_no_server_error()


def path_ids(operation: schemathesis.APIOperation, known: Known) -> dict[str, str]:
    """The seeded records' ids for the operation's path (a fresh UUID for a DELETE's, and for
    a parameter no record is seeded for)."""
    deletes = operation.method.upper() == "DELETE"
    return {
        parameter.name: known[parameter.name][0]
        if parameter.name in known and not deletes
        else str(uuid.uuid4())
        for parameter in operation.path_parameters
    }


def swept_cases(schema: schemathesis.BaseSchema, known: Known) -> Iterator[schemathesis.Case]:
    """Requests that random generation reaches too rarely to count on: every query parameter
    of every operation with each hostile value, on the seeded records; every route that takes
    a checkpoint object with a `checkpoint_id` of each JSON type."""
    for result in schema.get_all_operations():
        operation = result.ok()
        path = path_ids(operation, known)
        for parameter in operation.query:
            for value in HOSTILE_QUERY_VALUES:
                yield operation.Case(path_parameters=path, query={parameter.name: value})
        fields = CHECKPOINT_FIELDS.get(operation.label, ())
        for field in fields:
            for checkpoint_id in ODD_CHECKPOINT_IDS:
                yield operation.Case(
                    path_parameters=path, body={field: {"checkpoint_id": checkpoint_id}}
                )
                yield operation.Case(path_parameters=path, body={field: checkpoint_id})


class TestFuzzedRequests:
    """Schemathesis-generated requests, valid and invalid, never get a 5xx (issue 9)."""

    # The operations are fuzzed in shards, each a test of its own, so that the processes of
    # the run share them: one test of them all took 145 s, the suite's longest by far.
    @pytest.mark.parametrize("shard", range(OPERATION_SHARDS))
    def test_no_operation_answers_a_server_error(
        self, api_schema: schemathesis.BaseSchema, shard: int
    ) -> None:
        operations = []
        for result in api_schema.get_all_operations():
            assert isinstance(result, Ok), f"schemathesis cannot read an operation: {result.err()}"
            operations.append(result.ok())
        # The routes of docs/protocol.md section 3 and the two health checks, at least, and
        # the LangGraph routes that read the store, the checkpoints and the graph.
        assert len(operations) >= 13, [operation.label for operation in operations]
        labels = {operation.label for operation in operations}
        assert labels >= REQUIRED_OPERATIONS, sorted(REQUIRED_OPERATIONS - labels)
        operations.sort(key=lambda operation: operation.label)
        failures = []
        for operation in operations[shard::OPERATION_SHARDS]:
            try:
                fuzz_operation(operation)
            except Exception as exc:  # every operation is fuzzed; all failures are reported
                failures.append(f"{operation.label}:\n{exc}")
        assert not failures, "\n\n".join(failures)

    def test_no_hostile_query_value_or_checkpoint_id_answers_a_server_error(
        self, api_schema: schemathesis.BaseSchema, api_url: str
    ) -> None:
        """The sweep of `swept_cases`: `?xray=²`, 5,000 digits, `?before=%00` on a thread with
        checkpoints, `{"before": {"checkpoint_id": 123}}` were 500s."""
        failures, swept = [], 0
        for case in swept_cases(api_schema, seeded(api_url)):
            swept += 1
            try:
                case.call_and_validate(checks=[not_a_server_error])
            except FailureGroup as exc:  # every case is sent; all failures are reported
                failures.append(f"{case.operation.label} {case.query} {case.body}:\n{exc}")
        assert swept >= 300, swept
        assert not failures, "\n\n".join(failures)

    def test_no_sequence_of_linked_operations_answers_a_server_error(
        self, api_schema: schemathesis.BaseSchema
    ) -> None:
        scenarios = fuzz_settings().max_examples
        machine = recording_state_machine(api_schema)
        # The links schemathesis inferred: without them the machine would only call at random.
        assert api_schema.statistic.transitions.total >= 10
        for _ in range(RESTARTS):
            left = scenarios - machine.scenarios
            if left <= 0:
                break
            try:
                machine.run(settings=stateful_settings(max_examples=left))
            except FlakyStrategyDefinition:
                # The API's answers steer what the machine draws next, so Hypothesis can find
                # a choice it made before leading elsewhere; schemathesis' own runner restarts
                # then too. A 5xx met on the way is in `server_errors` all the same.
                continue
        assert not machine.server_errors, "\n\n".join(machine.server_errors)
        assert machine.scenarios >= scenarios // 2, machine.scenarios
