"""The API docs at `/schema`: Swagger UI from this server's own files, never from another host;
and again at LangGraph's paths, `/docs` and `/openapi.json`, where its tools and generators look.

Swagger UI is vendored in `server/web/vendor/swagger-ui/` (version, source, license and hashes
in its README) and served under `/ui/` with the web page, so the docs work offline and run no
script that was not reviewed into the repository. The page this plugin renders loads only
those files and `/ui/api-docs.js`, which starts Swagger UI and loads the spec from
`/schema/openapi.json`.

Litestar's `SwaggerRenderPlugin` takes `js_url`/`css_url`, but its page would still need more:
it starts Swagger UI (with the whole spec) in an inline `<script>`, which a CSP without
`'unsafe-inline'` blocks, it loads its favicon from a CDN, and it adds an OAuth2 redirect page
(another inline script) that runstream does not use. This plugin renders the same docs without
any of these.
"""

from __future__ import annotations

from html import escape
from typing import Any

from litestar import MediaType, Request, Router, get
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin

from server.v1.bodies import Body

__all__ = [
    "DOCS_PATH",
    "LANGGRAPH_DOCS_PATH",
    "SWAGGER_UI_URL",
    "ClosedBodiesJsonRenderPlugin",
    "OfflineSwaggerRenderPlugin",
    "langgraph_docs",
    "langgraph_openapi",
]

DOCS_PATH = "/schema"
LANGGRAPH_DOCS_PATH = "/docs"
LANGGRAPH_OPENAPI_PATH = "/openapi.json"
SWAGGER_UI_URL = "/ui/vendor/swagger-ui"


class OfflineSwaggerRenderPlugin(OpenAPIRenderPlugin):
    """Swagger UI at `/schema` and `/schema/swagger`, its assets from this origin only."""

    def __init__(
        self,
        *,
        js_url: str = f"{SWAGGER_UI_URL}/swagger-ui-bundle.js",
        css_url: str = f"{SWAGGER_UI_URL}/swagger-ui.css",
        init_js_url: str = "/ui/api-docs.js",
        path: str = "/swagger",
    ) -> None:
        super().__init__(path=path, favicon='<link rel="icon" href="data:,">', style="")
        self.js_url = js_url
        self.css_url = css_url
        self.init_js_url = init_js_url

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return self.page(str(openapi_schema["info"]["title"]), self.get_openapi_json_route(request))

    def page(self, title: str, spec_url: str) -> bytes:
        title, spec_url = escape(title), escape(spec_url)
        page = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} API</title>
  {self.favicon}
  <link rel="stylesheet" href="{escape(self.css_url)}">
  <script src="{escape(self.js_url)}" defer></script>
  <script src="{escape(self.init_js_url)}" defer></script>
</head>
<body>
  <div id="swagger-ui" data-spec-url="{spec_url}"></div>
</body>
</html>
"""
        return page.encode()

    def receive_router(self, router: Router) -> None:
        """Add no OAuth2 redirect page: runstream uses API keys, not OAuth."""


@get(
    LANGGRAPH_OPENAPI_PATH, include_in_schema=False, media_type=MediaType.JSON, sync_to_thread=False
)
def langgraph_openapi(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """The document of `/schema/openapi.json`, where LangGraph's server serves its own."""
    return refuse_unknown_fields_in_schema(request.app.openapi_schema.to_schema())


@get(LANGGRAPH_DOCS_PATH, include_in_schema=False, media_type=MediaType.HTML, sync_to_thread=False)
def langgraph_docs(request: Request[Any, Any, Any]) -> bytes:
    """The docs page of `/schema`, reading `/openapi.json`, where LangGraph's server has its."""
    title = str(request.app.openapi_schema.info.title)
    return OfflineSwaggerRenderPlugin().page(title, LANGGRAPH_OPENAPI_PATH)


def _closed_bodies() -> dict[str, type[Body]]:
    """`/v1`'s request bodies, under every name Litestar may give their schema components."""
    found: dict[str, type[Body]] = {}
    pending: list[type[Body]] = [Body]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # Litestar names a clashing component by the shortest tail of its module path that
        # tells it apart (`v1_bodies_RunCreate` beside `langgraph_wire_RunCreate`): every tail
        parts = cls.__module__.split(".")
        for name in (*("_".join(parts[i:]) for i in range(len(parts))), None):
            found[cls.__name__ if name is None else f"{name}_{cls.__name__}"] = cls
    return found


def refuse_unknown_fields_in_schema(document: dict[str, Any]) -> dict[str, Any]:
    """Say in the OpenAPI document what the server does: `/v1` bodies refuse unknown fields.

    msgspec's `forbid_unknown_fields` does not reach Litestar's schema, which would otherwise
    let clients (and the fuzz tests) believe extra fields are ignored. The LangGraph API's
    bodies stay open: they ignore unknown fields, as LangGraph's server does. Applied to the
    document as it is served (`ClosedBodiesJsonRenderPlugin`), not when the app is made:
    building the document costs every server start (every test's) about as much as the rest
    of making the app.
    """
    closed = _closed_bodies()
    for name, schema in (document.get("components", {}).get("schemas") or {}).items():
        if name in closed:
            schema["additionalProperties"] = False
    return document


class ClosedBodiesJsonRenderPlugin(JsonRenderPlugin):
    """`/schema/openapi.json`, with `refuse_unknown_fields_in_schema` applied."""

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, refuse_unknown_fields_in_schema(openapi_schema))
