"""The web page: `/` and its assets under `/ui/`, plain files with no build step.

The page uses the public HTTP API and the signed `stream_url` like any other client, so it
needs no routes of its own beyond serving these files.
"""

from __future__ import annotations

from pathlib import Path

from litestar import MediaType, Router, get
from litestar.datastructures import CacheControlHeader
from litestar.response import File
from litestar.static_files import create_static_files_router

__all__ = ["index", "page_assets"]

WEB_DIR = Path(__file__).with_name("web")

# Revalidate every time: a page older than the server it talks to is a confusing failure.
_REVALIDATE = CacheControlHeader(no_cache=True)


@get("/", include_in_schema=False, cache_control=_REVALIDATE)
async def index() -> File:
    return File(
        WEB_DIR / "index.html", media_type=MediaType.HTML, content_disposition_type="inline"
    )


def page_assets() -> Router:
    return create_static_files_router(
        path="/ui", directories=[WEB_DIR], name="ui", cache_control=_REVALIDATE
    )
