"""The security headers on every answer: set here, in one `before_send` hook, and nowhere else.

Every answer (page, assets, API, errors, even a 404 from the router) gets:

- `X-Content-Type-Options: nosniff`: a browser uses an answer only as its declared type, so a
  JSON body can never run as a script or render as a page;
- `X-Frame-Options: DENY` and the CSP's `frame-ancestors 'none'`: no site can frame the page
  and trick clicks onto it;
- `Referrer-Policy: same-origin`: the page's address (thread and run ids) and a `stream_url`
  token never leak to another site. Not `no-referrer`: with it a browser sends `Origin: null`
  on the page's own POSTs, which `browser_guard` refuses;
- `Cross-Origin-Resource-Policy: same-origin`: another site cannot pull an answer into its own
  page (a `<script>` or `<img>` pointing here is blocked);
- a Content-Security-Policy chosen by what the answer is: the page's (`PAGE_CSP`), the API
  docs' (`DOCS_CSP`) or, for everything that is not a page, `default-src 'none'`.

Every `/v1` answer also gets `Cache-Control: no-store` (JSON, errors and event streams alike):
threads and runs are private, and a stale run status is wrong.
"""

from __future__ import annotations

from litestar.datastructures import MutableScopeHeaders
from litestar.types import Message, Scope

from .api_docs import DOCS_PATH, LANGGRAPH_DOCS_PATH

__all__ = ["DOCS_CSP", "NON_PAGE_CSP", "PAGE_CSP", "add_security_headers"]

# The web page (server/web/): its own script, module and stylesheet, no inline code; the
# favicon is a `data:` URL; `fetch` and `EventSource` go to this origin only.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# The API docs: Swagger UI from this origin (server/api_docs.py), no inline script. Swagger UI
# sets inline styles and draws its icons as `data:` images, so those two are allowed.
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
# JSON, event streams, scripts, stylesheets: nothing in them may load or run anything.
NON_PAGE_CSP = "default-src 'none'; frame-ancestors 'none'"

_ALWAYS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


def _csp(path: str, content_type: str) -> str:
    if not content_type.lower().startswith("text/html"):
        return NON_PAGE_CSP
    if path in (DOCS_PATH, LANGGRAPH_DOCS_PATH) or path.startswith(f"{DOCS_PATH}/"):
        return DOCS_CSP
    return PAGE_CSP


async def add_security_headers(message: Message, scope: Scope) -> None:
    """Litestar `before_send` hook: add the headers above to the start of every HTTP answer.
    Async: Litestar runs a sync hook in a thread, for every body chunk of every stream."""
    if message["type"] != "http.response.start":
        return
    headers = MutableScopeHeaders.from_message(message)
    path = scope["path"]
    for name, value in _ALWAYS.items():
        headers[name] = value
    headers["content-security-policy"] = _csp(path, headers.get("content-type", ""))
    if path == "/v1" or path.startswith("/v1/"):
        headers["cache-control"] = "no-store"
