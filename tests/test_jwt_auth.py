"""Sign-in with JWTs, no code (`RUNSTREAM_JWT_SECRET`, or `RUNSTREAM_JWT_JWKS_URL`): the
token's `sub` is the owner; a token that does not verify is a 401 saying why
(docs/security.md, "Signing in with JWTs")."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from langgraph_sdk import get_client

from server.processes.commands import serve
from stream_store.limits import BEARER_TOKEN_MAX_CHARS, DEFAULT_MAX_HEADER_BYTES
from stream_store.settings import Settings, SettingsError
from tests.conftest import ServerHandle, StartServer, StartWorker

SECRET = "a-secret-of-at-least-thirty-two-characters"
ISSUER = "https://id.example"
AUDIENCE = "runstream-tests"


def token(
    sub: str = "alice",
    key: Any = SECRET,
    algorithm: str = "HS256",
    kid: str = "key-1",
    **claims: Any,
) -> str:
    now = int(time.time())
    payload = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    payload.update(claims)
    headers = {"kid": kid} if algorithm != "HS256" else None
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


class TestSettings:
    def test_a_secret_turns_jwt_sign_in_on(self) -> None:
        settings = Settings.from_env({"RUNSTREAM_JWT_SECRET": SECRET}, env_file="")
        assert settings.auth_enabled and settings.jwt_secret == SECRET
        assert settings.max_writes_per_minute > 0  # per-caller limits on, as with API keys

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                {"RUNSTREAM_JWT_SECRET": SECRET, "RUNSTREAM_JWT_JWKS_URL": "https://x/jwks"},
                "not both",
            ),
            ({"RUNSTREAM_JWT_SECRET": SECRET, "RUNSTREAM_API_KEYS": "k:o"}, "not both"),
            ({"RUNSTREAM_JWT_SECRET": "short"}, "at least 32 characters"),
            ({"RUNSTREAM_JWT_JWKS_URL": "ftp://x/jwks"}, r"http\(s\) URL"),
            ({"RUNSTREAM_JWT_AUDIENCE": "a"}, "neither RUNSTREAM_JWT_SECRET"),
        ],
    )
    def test_a_sign_in_that_cannot_work_refuses_start(
        self, env: dict[str, str], message: str
    ) -> None:
        with pytest.raises(SettingsError, match=message) as refused:
            Settings.from_env(env, env_file="")
        assert SECRET not in str(refused.value)

    def test_a_jwt_server_needs_a_signing_key_for_its_stream_urls(self) -> None:
        with pytest.raises(SettingsError, match="RUNSTREAM_JWT_SECRET is set but RUNSTREAM_SIG"):
            Settings(jwt_secret=SECRET).stream_token_keys()

    def test_a_projects_auth_counts_as_authentication_for_the_public_bind_rule(
        self, tmp_path: Path
    ) -> None:
        """Not refused for want of API keys on 0.0.0.0: refused next, for the signing key
        every authenticated deployment needs."""
        project = Path(__file__).parent / "projects" / "auth" / "langgraph.json"
        settings = Settings(
            redis_url="redis://127.0.0.1:1/0",
            database_url="postgresql://x",
            config_path=str(project),
        )
        with pytest.raises(SettingsError, match="the project's auth"):
            serve(settings, "0.0.0.0", 8000)


@pytest.fixture
async def jwt_server(start_server: StartServer, start_worker: StartWorker) -> ServerHandle:
    await start_worker()
    return await start_server(jwt_secret=SECRET, jwt_issuer=ISSUER, jwt_audience=AUDIENCE)


class TestHs256:
    async def test_the_subject_owns_its_threads(self, jwt_server: ServerHandle) -> None:
        alice = get_client(url=jwt_server.url, api_key=None, headers=bearer(token("alice")))
        bob = get_client(url=jwt_server.url, api_key=None, headers=bearer(token("bob")))
        thread = await alice.threads.create()
        assert [t["thread_id"] for t in await alice.threads.search()] == [thread["thread_id"]]
        assert await bob.threads.search() == []

    @pytest.mark.parametrize(
        ("make", "reason"),
        [
            (lambda: None, "a JWT is required"),
            (lambda: token(exp=int(time.time()) - 120), "the JWT has expired"),
            (lambda: token(aud="someone-else"), "not for this audience"),
            (lambda: token(iss="https://other.example"), "from another issuer"),
            (
                lambda: token(key="another-secret-of-at-least-32-characters"),
                "signature does not verify",
            ),
            (lambda: token(sub=""), "sub"),
            (lambda: "not-a-jwt", "invalid JWT"),
        ],
        ids=["none", "expired", "audience", "issuer", "signature", "sub", "garbage"],
    )
    async def test_a_token_that_does_not_verify_is_a_401_saying_why(
        self, jwt_server: ServerHandle, make: Callable[[], str | None], reason: str
    ) -> None:
        presented = make()  # made now: made at collection, a valid one may have expired since
        async with httpx.AsyncClient(base_url=jwt_server.url) as http:
            answer = await http.post(
                "/threads/search", json={}, headers=bearer(presented) if presented else {}
            )
        assert answer.status_code == 401
        assert reason in answer.json()["detail"]
        assert presented is None or presented not in answer.text

    @pytest.mark.parametrize("sub", ["mallory\x00admin", "m" * 3000, "line\nbreak"])
    async def test_a_subject_no_owner_can_carry_is_a_401(
        self, jwt_server: ServerHandle, sub: str
    ) -> None:
        """A NUL in `sub` was a 500 on a create, 3,000 characters a 503 on every write, for good
        (the owner indexes' row size): refused where the caller is made."""
        async with httpx.AsyncClient(base_url=jwt_server.url) as http:
            for path in ["/threads", "/v1/threads"]:
                answer = await http.post(path, json={}, headers=bearer(token(sub)))
                assert answer.status_code == 401, answer.text[:200]
                assert "identity is refused" in answer.text

    async def test_a_token_longer_than_any_real_one_is_refused_unread(
        self, jwt_server: ServerHandle
    ) -> None:
        """Even a genuine one: refused by its length, before it is decoded."""
        padded = token("alice", padding="p" * 20_000)
        assert BEARER_TOKEN_MAX_CHARS < len(padded) < DEFAULT_MAX_HEADER_BYTES
        async with httpx.AsyncClient(base_url=jwt_server.url) as http:
            answer = await http.post("/threads/search", json={}, headers=bearer(padded))
            assert answer.status_code == 401
            assert f"longer than {BEARER_TOKEN_MAX_CHARS}" in answer.json()["detail"]
            fine = await http.post("/threads/search", json={}, headers=bearer(token("alice")))
            assert fine.status_code == 200

    async def test_stream_urls_still_attach_without_the_header(
        self, jwt_server: ServerHandle
    ) -> None:
        """EventSource cannot send a header: the run's stream URL carries a stream token."""
        async with httpx.AsyncClient(base_url=jwt_server.url, timeout=30) as http:
            body = {"input": {"messages": [{"role": "user", "content": "hello"}]}}
            run = (await http.post("/v1/runs", json=body, headers=bearer(token()))).json()
            async with http.stream("GET", run["stream_url"]) as events:
                assert events.status_code == 200
                text = "".join([chunk async for chunk in events.aiter_text()])
        assert "hello" in text


@pytest.fixture
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def jwks_url(rsa_key: rsa.RSAPrivateKey) -> Iterator[str]:
    """A tiny identity provider: its JWKS (an RSA key, `kid` key-1, and an EC key, `kid` ec-1)
    on a local port."""
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    ec_public = json.loads(
        jwt.algorithms.ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()).public_key())
    )
    keys = [
        {**public, "kid": "key-1", "alg": "RS256"},
        {**ec_public, "kid": "ec-1", "alg": "ES256"},
    ]
    body = json.dumps({"keys": keys}).encode()

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    server.shutdown()
    server.server_close()


class TestJwks:
    async def test_rs256_tokens_verify_with_the_providers_key(
        self, start_server: StartServer, jwks_url: str, rsa_key: rsa.RSAPrivateKey
    ) -> None:
        served = await start_server(jwt_jwks_url=jwks_url, jwt_audience=AUDIENCE)
        signed = token("carol", key=rsa_key, algorithm="RS256")
        forged = token(
            "carol",
            key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
            algorithm="RS256",
        )
        async with httpx.AsyncClient(base_url=served.url) as http:
            made = await http.post("/threads", json={}, headers=bearer(signed))
            assert made.status_code == 200
            refused = await http.post("/threads/search", json={}, headers=bearer(forged))
            assert refused.status_code == 401
            assert "signature does not verify" in refused.json()["detail"]
            hs256 = await http.post("/threads/search", json={}, headers=bearer(token("carol")))
            assert hs256.status_code == 401  # a JWKS deployment takes no HS256 token

    async def test_a_kid_naming_a_key_of_another_algorithm_is_a_401(
        self, start_server: StartServer, jwks_url: str, rsa_key: rsa.RSAPrivateKey
    ) -> None:
        """An RS256 token whose `kid` names the JWKS's EC key was a 500 (PyJWT handed the EC
        key to RSA): a token that does not verify, 401."""
        served = await start_server(jwt_jwks_url=jwks_url, jwt_audience=AUDIENCE)
        mixed = token("carol", key=rsa_key, algorithm="RS256", kid="ec-1")
        async with httpx.AsyncClient(base_url=served.url) as http:
            refused = await http.post("/threads/search", json={}, headers=bearer(mixed))
            assert refused.status_code == 401, refused.text
            assert "invalid JWT" in refused.json()["detail"]
            good = token("carol", key=rsa_key, algorithm="RS256")
            answered = await http.post("/threads/search", json={}, headers=bearer(good))
            assert answered.status_code == 200
