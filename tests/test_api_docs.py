"""The API docs at `/schema` (and LangGraph's `/docs`, `/openapi.json`) work offline: every file
they load comes from this server (issue 9; server/api_docs.py; server/web/vendor/swagger-ui/).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest

from server.page import WEB_DIR
from server.security_headers import DOCS_CSP
from tests.test_security_headers import Tags, assert_always, csp_directives

DOCS_PAGES = ["/schema", "/schema/swagger", "/docs"]  # /docs: LangGraph's path
VENDOR_DIR = WEB_DIR / "vendor" / "swagger-ui"
ABSOLUTE_URL = re.compile(r"(?:https?:)?//[^\s\"'<>]+", re.IGNORECASE)


class TestDocsAreOffline:
    """The docs page names no other host, and every file it names answers 200 from here."""

    @pytest.mark.parametrize("path", DOCS_PAGES)
    async def test_docs_html_references_no_external_url(
        self, client: httpx.AsyncClient, path: str
    ) -> None:
        response = await client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert ABSOLUTE_URL.findall(response.text) == []
        tags = Tags(response.text)
        assert tags.urls(), response.text
        for url in tags.urls():
            assert url.startswith("/") or url.startswith("data:"), url

    @pytest.mark.parametrize("path", DOCS_PAGES)
    async def test_every_asset_the_docs_reference_answers_200(
        self, client: httpx.AsyncClient, path: str
    ) -> None:
        tags = Tags((await client.get(path)).text)
        scripts = [attrs["src"] for tag, attrs in tags.tags if tag == "script"]
        styles = [attrs["href"] for tag, attrs in tags.tags if attrs.get("rel") == "stylesheet"]
        spec = [attrs["data-spec-url"] for _, attrs in tags.tags if "data-spec-url" in attrs]
        assert len(scripts) == 2 and len(styles) == 1 and len(spec) == 1, tags.tags
        for url, kind in [*((u, "javascript") for u in scripts), (styles[0], "text/css")]:
            response = await client.get(urljoin(path, url))
            assert response.status_code == 200, url
            assert kind in response.headers["content-type"], (url, response.headers)
            assert response.content, url
        response = await client.get(urljoin(path, spec[0]))
        assert response.status_code == 200
        assert response.json()["info"]["title"] == "runstream"

    @pytest.mark.parametrize("path", DOCS_PAGES)
    async def test_docs_run_no_inline_script_under_a_same_origin_csp(
        self, client: httpx.AsyncClient, path: str
    ) -> None:
        response = await client.get(path)
        assert_always(response)
        assert response.headers["content-security-policy"] == DOCS_CSP
        directives = csp_directives(DOCS_CSP)
        assert directives["script-src"] == ["'self'"]
        assert directives["connect-src"] == ["'self'"] and directives["frame-ancestors"] == [
            "'none'"
        ]
        for tag, attrs in Tags(response.text).tags:
            if tag == "script":
                assert attrs.get("src"), attrs
        bodies = re.findall(r"<script[^>]*>(.*?)</script>", response.text, re.DOTALL | re.I)
        assert bodies and all(not body.strip() for body in bodies), bodies

    async def test_initialiser_turns_off_the_online_validator(self) -> None:
        """Swagger UI's default validator would send the spec to another host."""
        script = (WEB_DIR / "api-docs.js").read_text()
        assert re.search(r"validatorUrl:\s*null", script)
        assert ABSOLUTE_URL.findall(script) == []

    async def test_oauth2_redirect_page_is_not_served(self, client: httpx.AsyncClient) -> None:
        """Litestar's Swagger plugin adds one (an inline script); runstream has no OAuth."""
        response = await client.get("/schema/oauth2-redirect.html")
        assert response.status_code == 404


class TestVendoredSwaggerUi:
    """The vendored Swagger UI files are the ones its README records, with their license."""

    def test_files_match_the_recorded_hashes(self) -> None:
        readme = (VENDOR_DIR / "README.md").read_text()
        recorded = dict(re.findall(r"\| `([^`]+)` \| `([0-9a-f]{64})` \|", readme))
        assert set(recorded) == {"swagger-ui-bundle.js", "swagger-ui.css"}
        for name, digest in recorded.items():
            assert hashlib.sha256((VENDOR_DIR / name).read_bytes()).hexdigest() == digest, name

    def test_license_and_version_are_kept_beside_them(self) -> None:
        for name in ("LICENSE", "NOTICE", "swagger-ui-bundle.js.LICENSE.txt"):
            assert (VENDOR_DIR / name).is_file(), name
        assert "Apache License" in (VENDOR_DIR / "LICENSE").read_text()
        version = re.search(
            r"^# Swagger UI (\d+\.\d+\.\d+)", (VENDOR_DIR / "README.md").read_text()
        )
        assert version is not None
        assert Path(VENDOR_DIR / "swagger-ui-bundle.js").stat().st_size > 100_000


class TestSchemaSaysWhatIsRefused:
    async def test_v1_bodies_refuse_unknown_fields_and_langgraph_bodies_do_not(
        self, client: httpx.AsyncClient
    ) -> None:
        document = (await client.get("/schema/openapi.json")).json()
        components = document["components"]["schemas"]
        for name in ("v1_bodies_RunCreate", "InputMessage", "ResumeRequest"):
            assert components[name]["additionalProperties"] is False, name
        # LangGraph's server ignores unknown fields (the SDKs send some it does not know)
        assert "additionalProperties" not in components["langgraph_wire_RunCreate"]
        refused = await client.post(
            "/v1/runs",
            json={"input": {"messages": [{"role": "user", "content": "hi"}]}, "extra": 1},
        )
        assert refused.status_code == 400, refused.text


async def test_langgraphs_openapi_path_serves_the_same_document(client: httpx.AsyncClient) -> None:
    """Tools and generators written for LangGraph's server read `/openapi.json` (issue 25)."""
    ours = (await client.get("/schema/openapi.json")).json()
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == ours and "/threads/{thread_id}/runs" in ours["paths"]
