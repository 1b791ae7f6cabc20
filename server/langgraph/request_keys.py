"""LangGraph's request-scoped `configurable` keys: what its server adds to a run's
`configurable` from the request that made it (`langgraph_api/models/run.py`, observed on
`langgraph dev` 0.16.7), recorded with the run so that every attempt's graph sees the same.

- `langgraph_request_id`: the request's id (its `X-Request-ID`, else one made for it;
  `server/request_ids.py`); None for a cron's run, which no request makes;
- `__request_start_time_ms__`: when the request began, Unix milliseconds (absent for a cron's);
- `__after_seconds__`: 0. LangGraph records the request's `after_seconds` (how long its run
  waits before it starts); runstream starts a run when a worker is free and accepts
  `after_seconds` without delaying, so the delay its graph would read is none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Request

from server.request_ids import request_id, request_started_ms
from stream_store.run_submit import NewRun

__all__ = ["CRON", "RequestStamp", "request_stamp"]


@dataclass(frozen=True)
class RequestStamp:
    """What of the request that makes a run its graph is told (`project.configurable`'s
    `REQUEST_KEYS`)."""

    request_id: str | None
    started_ms: int | None

    def keys(self) -> dict[str, Any]:
        keys: dict[str, Any] = {"langgraph_request_id": self.request_id, "__after_seconds__": 0}
        if self.started_ms is not None:
            keys["__request_start_time_ms__"] = self.started_ms
        return keys

    def record(self, new: NewRun) -> None:
        """Into the run's recorded `configurable`, after the caller's keys were checked (a
        caller cannot set these: they are reserved)."""
        configurable = {**(new.config.get("configurable") or {}), **self.keys()}
        new.config = {**new.config, "configurable": configurable}


CRON = RequestStamp(request_id=None, started_ms=None)  # a cron's run: no request made it


async def request_stamp(request: Request[Any, Any, Any]) -> RequestStamp:
    """The dependency LangGraph's routes that make runs take (`stamp`)."""
    return RequestStamp(request_id(request.scope), request_started_ms(request.scope))
