"""Properties of the code that parses what a client sends, for any input Hypothesis can draw:
event ids, stream tokens and run bodies (issue 9; docs/security.md, "Fuzzing").

Each parser either accepts its input, and then the value means what it says, or refuses it with
the error the API maps to a 4xx; it never raises anything else (which the API would answer with
a 500). Example counts come from the Hypothesis profile in conftest.py, so the file takes
seconds; `--hypothesis-profile=thorough` searches ten times longer.
"""

from __future__ import annotations

import base64
import json
import string
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import msgspec
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from litestar import Litestar, post
from litestar.testing import TestClient
from redis import Redis

from project.configurable import MODEL_CONFIGURABLE
from runner.graph_registry import BUILTIN_GRAPHS, GraphRegistry
from server import inputs
from server.callers.auth import Caller, StreamTokens
from server.errors import EXCEPTION_HANDLERS, ApiError, Unauthorized
from server.raw_input import ApiRequest
from server.v1.bodies import RunCreate
from stream_store.keys import KeySpace
from stream_store.limits import GRAPH_NAME_MAX_CHARS, JSON_MAX_DEPTH
from stream_store.settings import Settings
from wire.events import is_event_id, parse_event_id

U64 = 2**64 - 1

# -- event ids ------------------------------------------------------------------------------

positions = st.tuples(st.integers(0, U64), st.integers(0, U64))


def id_text(position: tuple[int, int]) -> str:
    return f"{position[0]}-{position[1]}"


# Near misses as well as arbitrary text: digits and dashes, signs, spaces, non-ASCII digits,
# numbers just past a u64, leading zeros, a trailing newline.
id_like = st.one_of(
    st.text(),
    st.from_regex(r"\s*[0-9+\-_.٣ ]{0,24}-?[0-9+\-٣]{0,24}\s*", fullmatch=True),
    positions.map(id_text),
    st.tuples(st.integers(0, 2 * U64), st.integers(0, 2 * U64)).map(id_text),
    st.tuples(st.text("0", max_size=3), positions.map(id_text)).map("".join),
    st.tuples(positions.map(id_text), st.sampled_from(["\n", " ", "\t", "\x00", "-0", "x"])).map(
        "".join
    ),
)


class TestEventIdParsing:
    """Any `Last-Event-ID` is a stream position or a 400 `invalid_last_event_id`, never another
    exception; an accepted one names the position Redis gives it (docs/protocol.md 4.1)."""

    @given(value=id_like)
    def test_any_text_is_a_position_or_a_400(self, value: str) -> None:
        try:
            after = inputs.event_id(value)
        except ApiError as exc:
            assert (exc.status, exc.code) == (400, "invalid_last_event_id")
            assert value and not is_event_id(value.strip())  # "" means "from the start"
            return
        assert after == (value.strip() or "0-0")
        assert is_event_id(after)
        ms, seq = parse_event_id(after)
        assert 0 <= ms <= U64 and 0 <= seq <= U64
        # The same position as Redis writes it: leading zeros are all it may differ by.
        canonical = "-".join(part.lstrip("0") or "0" for part in after.split("-"))
        assert canonical == id_text((ms, seq))

    @given(value=id_like)
    @example("1-0\n")  # the pattern ended in `$`, which also matches before a final newline
    def test_an_accepted_id_is_digits_dash_digits_and_nothing_else(self, value: str) -> None:
        if is_event_id(value):
            ms, _, seq = value.partition("-")
            assert ms and seq and set(ms + seq) <= set(string.digits), repr(value)
            assert parse_event_id(value) == (int(ms), int(seq))

    @given(position=positions)
    def test_every_redis_position_round_trips(self, position: tuple[int, int]) -> None:
        text = id_text(position)
        assert is_event_id(text)
        assert parse_event_id(text) == position
        assert inputs.event_id(f" {text}\t") == text

    @pytest.mark.usefixtures("settings")
    @settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        stored=st.sets(positions.filter(any), min_size=1, max_size=8),  # XADD refuses 0-0
        data=st.data(),
    )
    def test_positions_order_as_redis_reads_after_them(
        self, redis: Redis, stream_key: str, stored: set[tuple[int, int]], data: st.DataObject
    ) -> None:
        """What Redis returns after an accepted id (`XRANGE (after +`, as `EventLog.read_range`
        reads) is exactly the stored events whose parsed position is greater."""
        ms, seq = data.draw(st.sampled_from(sorted(stored)) | positions, label="position")
        ms += data.draw(st.sampled_from([0, -1, 1]).filter(lambda d: 0 <= ms + d <= U64))
        zeros = data.draw(st.tuples(st.integers(0, 3), st.integers(0, 3)), label="leading zeros")
        written = f"{'0' * zeros[0]}{ms}-{'0' * zeros[1]}{seq}"
        assume(is_event_id(written))  # past 20 digits it is refused: stricter than Redis
        after = inputs.event_id(written)
        # Redis refuses an exclusive start at the last possible id; `EventLog.read_range`
        # answers it itself (nothing follows it): test_nothing_is_read_after_the_last_position
        assume(parse_event_id(after) != (U64, U64))
        redis.delete(stream_key)
        for position in sorted(stored):  # XADD refuses an id not above the last one
            redis.xadd(stream_key, {"e": "x"}, id=id_text(position))
        entries = cast(list[tuple[bytes, Any]], redis.xrange(stream_key, min=f"({after}"))
        read = [entry_id.decode() for entry_id, _ in entries]
        assert read == [id_text(p) for p in sorted(stored) if p > parse_event_id(after)]


@pytest.fixture
def redis(settings: Settings) -> Iterator[Redis]:
    assert settings.redis_url
    client = Redis.from_url(settings.redis_url)
    yield client
    client.close()


@pytest.fixture
def stream_key(settings: Settings) -> str:
    """A run's event stream under the test's prefix (dropped with the prefix after the test)."""
    return KeySpace(settings.redis_prefix).run_events(str(uuid.uuid4()))


# -- stream tokens ----------------------------------------------------------------------------

SECRETS = (("k2", "new-secret-fedcba9876543210"), ("k1", "old-secret-0123456789abcdef"))
TOKENS = StreamTokens(Settings(signing_keys=SECRETS))
RUN = "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50"

run_ids = st.uuids().map(str)
# An owner as `RUNSTREAM_API_KEYS` can name one: text without commas, stripped, not empty.
owners = st.text(min_size=1).map(str.strip).filter(lambda owner: owner and "," not in owner)
token_chars = st.sampled_from(string.ascii_letters + string.digits + "-_")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@st.composite
def signed_payloads(draw: st.DrawFn) -> str:
    """Tokens signed with a key the server has, around any payload: what a leaked key or a
    change of format would produce. The signature is genuine; the content may be anything."""
    kid = draw(st.sampled_from([kid for kid, _ in SECRETS]))
    payload = draw(
        st.one_of(
            st.binary(),
            st.text().map(str.encode),
            st.tuples(run_ids, owners, st.text()).map(lambda p: "\n".join(p).encode()),
        )
    )
    encoded = _b64(payload)
    return f"{kid}.{encoded}.{TOKENS._sign(kid, encoded)}"  # the server's one signing scheme


any_token = st.one_of(
    st.text(),
    st.from_regex(
        r"[A-Za-z0-9_-]{0,33}\.[A-Za-z0-9_-]{0,60}\.[A-Za-z0-9_-]{42,44}", fullmatch=True
    ),
    st.lists(st.text(), max_size=4).map(".".join),
    signed_payloads(),
    st.tuples(run_ids, owners).map(lambda p: TOKENS.issue(*p)),
)


class TestStreamTokenVerification:
    """Any `token` is a caller or a 401, never another exception; a token verifies for the run
    it was issued for and no other, and changing any character of it refuses it (issue 9;
    docs/security.md, "Stream tokens")."""

    @given(token=any_token, run_id=st.one_of(run_ids, st.text()))
    def test_any_text_is_a_caller_or_unauthorized(self, token: str, run_id: str) -> None:
        try:
            caller = TOKENS.verify(token, run_id)
        except Unauthorized:
            return
        assert isinstance(caller, Caller)

    @given(run_id=run_ids, other=run_ids, owner=owners)
    @example(run_id=RUN, other=str(uuid.UUID(int=0)), owner="ali\nce")  # was "malformed"
    def test_a_token_verifies_for_its_run_only(self, run_id: str, other: str, owner: str) -> None:
        token = TOKENS.issue(run_id, owner)
        assert TOKENS.verify(token, run_id) == Caller(owner=owner)
        assume(other != run_id)
        with pytest.raises(Unauthorized):
            TOKENS.verify(token, other)

    @given(owner=owners, data=st.data())
    def test_changing_any_character_refuses_the_token(
        self, owner: str, data: st.DataObject
    ) -> None:
        token = TOKENS.issue(RUN, owner)
        index = data.draw(st.integers(0, len(token) - 1), label="index")
        replacement = data.draw(st.one_of(token_chars, st.characters()), label="replacement")
        assume(replacement != token[index])
        for tampered in (
            token[:index] + replacement + token[index + 1 :],  # replaced
            token[:index] + token[index + 1 :],  # deleted
            token[:index] + replacement + token[index:],  # inserted
        ):
            with pytest.raises(Unauthorized):
                TOKENS.verify(tampered, RUN)

    @given(owner=owners, late_s=st.integers(1, 10**9))
    def test_an_expired_token_is_refused(self, owner: str, late_s: int) -> None:
        issued_at = 1_700_000_000.0
        token = TOKENS.issue(RUN, owner, now=issued_at)
        assert TOKENS.verify(token, RUN, now=issued_at + TOKENS.ttl_s) == Caller(owner=owner)
        with pytest.raises(Unauthorized, match="expired"):
            TOKENS.verify(token, RUN, now=issued_at + TOKENS.ttl_s + late_s)


# -- run bodies -------------------------------------------------------------------------------

LIMITS = Settings()
GRAPHS = GraphRegistry({}).catalog()  # what the server checks a submit against


@post("/runs", status_code=201)
async def decode_run(data: RunCreate) -> dict[str, Any]:
    """The body as `POST /v1/runs` decodes and checks it (`server.v1.runs.submit_run`) before it
    looks anything up."""
    if data.graph in GRAPHS:
        inputs.configurable(data.config.configurable, GRAPHS, data.graph)
    inputs.message_texts([m.content for m in data.input.messages], LIMITS)
    inputs.metadata(data.metadata, LIMITS)
    return msgspec.to_builtins(data)


# The server's own request class (JSON depth and NUL, `raw_input.py`) and error mapping.
DECODER = Litestar(
    route_handlers=[decode_run],
    request_class=ApiRequest,
    exception_handlers=EXCEPTION_HANDLERS,
    request_max_body_size=LIMITS.max_body_bytes,
    logging_config=None,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(),
    st.sampled_from(["user", "assistant", "system", "chat", "reject", "enqueue", RUN, "\x00"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def well_typed(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return value


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The field's expected kind of value, or anything at all."""
    return st.one_of(value, json_values)


configurables = st.dictionaries(
    st.sampled_from([*MODEL_CONFIGURABLE, "thread_id", "__pregel_x", "other"]) | st.text(),
    st.integers() | st.floats() | json_values,
    max_size=3,
)


def run_bodies(field: Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]]) -> Any:
    """Bodies shaped like `RunCreate`, each field drawn through `field`; the noisy ones also
    carry fields the API does not have."""
    noisy = field is not well_typed
    roles = st.sampled_from(["user", "assistant", "system"])
    messages = st.fixed_dictionaries(
        {"role": field(roles), "content": field(st.text())},
        optional={
            "id": field(st.text(max_size=300) | st.none()),
            **({"name": json_values} if noisy else {}),
        },
    )
    run_input = st.fixed_dictionaries({"messages": field(st.lists(messages, max_size=3))})
    return st.fixed_dictionaries(
        {"input": field(run_input)},
        optional={
            "graph": field(st.sampled_from(sorted(BUILTIN_GRAPHS)) | st.text(max_size=120)),
            "thread_id": field(st.uuids().map(str) | st.none()),
            "metadata": field(st.dictionaries(st.text(max_size=80), json_values, max_size=70)),
            "config": field(st.fixed_dictionaries({"configurable": field(configurables)})),
            "multitask": field(st.sampled_from(["reject", "enqueue"])),
            **({"stream": json_values} if noisy else {}),
        },
    )


def encoded(value: Any) -> bytes:
    """JSON as a client might send it: NaN and Infinity included (not JSON: refused)."""
    return json.dumps(value, allow_nan=True).encode()


def nested(depth: int) -> bytes:
    return b'{"input":' + b"[" * depth + b"]" * depth + b"}"


any_run_bodies = run_bodies(well_typed) | run_bodies(maybe)
raw_bodies = st.one_of(
    any_run_bodies.map(encoded),
    json_values.map(encoded),
    st.binary(max_size=200),
    st.integers(JSON_MAX_DEPTH - 2, JSON_MAX_DEPTH + 2).map(nested),
    st.builds(lambda body, cut: body[:cut], any_run_bodies.map(encoded), st.integers(0, 200)),
)


class TestRunBodyDecoding:
    """Any body sent to create a run is decoded, or refused with a 400 or 413 in the API's
    error shape; never a 500 (issue 9; docs/protocol.md section 1)."""

    def test_any_body_decodes_or_is_refused(self) -> None:
        with TestClient(DECODER) as client:

            @given(raw=raw_bodies)
            def decodes_or_refused(raw: bytes) -> None:
                response = client.post(
                    "/runs", content=raw, headers={"content-type": "application/json"}
                )
                assert response.status_code in (201, 400, 413), (response.status_code, raw)
                if response.status_code != 201:
                    error = response.json()["error"]
                    assert error["code"] in ("invalid_request", "input_too_large"), error
                    return
                # What the handler got is what the body says, as msgspec reads it directly.
                assert msgspec.convert(response.json(), RunCreate) == msgspec.json.decode(
                    raw, type=RunCreate, strict=False
                )

            decodes_or_refused()

    @given(body=any_run_bodies)
    def test_any_value_converts_or_is_a_validation_error(self, body: dict[str, Any]) -> None:
        """msgspec alone, as Litestar calls it: a `RunCreate` within its bounds, or a
        `ValidationError` (which Litestar answers with a 400)."""
        try:
            run = msgspec.convert(body, RunCreate, strict=False)
        except msgspec.ValidationError:
            return
        assert run.input.messages and all(message.content for message in run.input.messages)
        assert 1 <= len(run.graph) <= GRAPH_NAME_MAX_CHARS
        assert run.multitask in ("reject", "enqueue")
