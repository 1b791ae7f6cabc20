"""Stream tokens name the key that signed them, so signing keys can be rotated without breaking
the stream URLs already handed out (issue 9; docs/protocol.md section 5, docs/security.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from server.callers.auth import StreamTokens
from server.errors import Unauthorized
from stream_store.settings import Settings
from tests.conftest import StartServer
from tests.test_bad_input import assert_error, run_body, send

RUN = "5f0c2a7e-9d1b-4c3e-8a6f-2b7d9e1c4a50"
OLD_SECRET = "old-secret-0123456789abcdef"
NEW_SECRET = "new-secret-fedcba9876543210"


def tokens(*keys: tuple[str, str]) -> StreamTokens:
    return StreamTokens(Settings(signing_keys=keys))


def token_of(stream_url: str) -> str:
    return parse_qs(urlsplit(stream_url).query)["token"][0]


class TestKeyIds:
    """The first key signs and names itself in the token; every listed key verifies."""

    def test_tokens_name_the_key_that_signed_them(self) -> None:
        both = tokens(("k2", NEW_SECRET), ("k1", OLD_SECRET))
        token = both.issue(RUN, "alice")
        assert token.split(".")[0] == "k2"
        assert both.verify(token, RUN).owner == "alice"

    def test_a_token_of_the_old_key_verifies_after_a_new_key_is_added(self) -> None:
        old = tokens(("k1", OLD_SECRET)).issue(RUN, "alice")
        assert tokens(("k2", NEW_SECRET), ("k1", OLD_SECRET)).verify(old, RUN).owner == "alice"

    def test_a_token_of_a_dropped_key_is_refused(self) -> None:
        old = tokens(("k1", OLD_SECRET)).issue(RUN, "alice")
        with pytest.raises(Unauthorized, match="no longer has"):
            tokens(("k2", NEW_SECRET)).verify(old, RUN)

    def test_a_token_relabelled_with_another_key_id_is_refused(self) -> None:
        """The key id is signed: naming another of the server's keys does not help."""
        both = tokens(("k2", NEW_SECRET), ("k1", OLD_SECRET))
        _, payload, signature = tokens(("k1", OLD_SECRET)).issue(RUN, "alice").split(".")
        with pytest.raises(Unauthorized, match="invalid"):
            both.verify(f"k2.{payload}.{signature}", RUN)

    def test_the_single_signing_key_has_the_key_id_default(self) -> None:
        single = StreamTokens(Settings(signing_key=OLD_SECRET)).issue(RUN, "alice")
        assert single.startswith("default.")
        listed = tokens(("k2", NEW_SECRET), ("default", OLD_SECRET))
        assert listed.verify(single, RUN).owner == "alice"

    def test_a_token_of_the_format_before_key_ids_is_refused(self) -> None:
        """Tokens issued before this version (no key id) are refused, saying so."""
        payload = f"{RUN}\nalice\n{int(time.time()) + 600}".encode()
        key = hashlib.sha256(OLD_SECRET.encode()).digest()
        signature = hmac.new(key, payload, hashlib.sha256).digest()

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        with pytest.raises(Unauthorized, match="older version"):
            StreamTokens(Settings(signing_key=OLD_SECRET)).verify(
                f"{b64(payload)}.{b64(signature)}", RUN
            )

    @pytest.mark.parametrize("part", [0, 1, 2], ids=["key-id", "payload", "signature"])
    def test_a_non_ascii_character_anywhere_is_unauthorized(self, part: int) -> None:
        signer = tokens(("k1", OLD_SECRET))
        parts = signer.issue(RUN, "alice").split(".")
        parts[part] = parts[part][:-1] + "\u00e9"
        with pytest.raises(Unauthorized):
            signer.verify(".".join(parts), RUN)


class TestRotationAcrossServers:
    """During a rotation every server accepts both keys' stream URLs; after it, only the new."""

    async def test_a_stream_url_survives_a_rotation_until_its_key_is_dropped(
        self, settings: Settings, start_server: StartServer
    ) -> None:
        keyed = {"api_keys": {"key-a": "alice"}, "signing_key": ""}
        old_only = await start_server(signing_keys=(("k1", OLD_SECRET),), **keyed)
        rotating = await start_server(
            signing_keys=(("k2", NEW_SECRET), ("k1", OLD_SECRET)), **keyed
        )
        new_only = await start_server(signing_keys=(("k2", NEW_SECRET),), **keyed)
        alice = {"Authorization": "Bearer key-a"}
        async with httpx.AsyncClient(timeout=30) as http:
            run = await http.post(f"{old_only.url}/v1/runs", json=run_body(), headers=alice)
            assert run.status_code == 202, run.text
            old_url = run.json()["stream_url"]
            assert token_of(old_url).startswith("k1.")
            fresh = await http.get(f"{rotating.url}/v1/runs/{run.json()['run_id']}", headers=alice)
            new_url = fresh.json()["stream_url"]
            assert token_of(new_url).startswith("k2.")

            for server, url in ((rotating, old_url), (rotating, new_url), (new_only, new_url)):
                attached = await send(http, "GET", f"{server.url}{url}")  # no API key
                assert attached.status_code == 200, (server.url, url, attached.status_code)
                assert attached.headers["content-type"].startswith("text/event-stream")
            refused = assert_error(await send(http, "GET", f"{new_only.url}{old_url}"), 401)
            assert "GET the run for a fresh stream_url" in refused["message"]
