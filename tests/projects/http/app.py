"""The project's own routes: a Starlette app beside runstream's API (`http.app`).

Its lifespan appends `startup` and `shutdown` to the file `HTTP_PROJECT_LIFESPAN_LOG` names,
so a test can count them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def _log(event: str) -> None:
    path = os.environ.get("HTTP_PROJECT_LIFESPAN_LOG")
    if path:
        with open(path, "a") as log:
            log.write(f"{event}\n")


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    _log("startup")
    app.state.started = True
    yield
    _log("shutdown")


async def hello(request: Request) -> JSONResponse:
    started = getattr(request.app.state, "started", False)
    return JSONResponse(
        {"hello": "from the custom app", "started": started}, headers={"x-exposed": "yes"}
    )


async def form(request: Request) -> JSONResponse:
    fields = parse_qs((await request.body()).decode())
    return JSONResponse({"name": fields.get("name", [None])[0]})


async def info(request: Request) -> JSONResponse:
    return JSONResponse({"custom": "info"})


async def threads_search(request: Request) -> JSONResponse:
    return JSONResponse({"custom": "GET /threads/search"})


app = Starlette(
    routes=[
        Route("/hello", hello),
        Route("/form", form, methods=["POST"]),
        Route("/info", info),  # shadows runstream's (and LangGraph's) /info
        Route("/ok", info),  # cannot shadow the health check
        Route("/threads/search", threads_search, methods=["GET"]),  # POST stays runstream's
    ],
    lifespan=lifespan,
)
