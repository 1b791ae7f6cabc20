"""Which per-minute budget a route's requests count against (docs/security.md, "Per-caller
limits").

A route names its budget in its `opt` (`@patch(..., opt=WRITE)`), and the caller dependency
takes it as soon as the caller is known (`server/app.py`): a route cannot be counted twice, and
one without a budget is visible in its decorator. Submits (runs, threads, assistants, crons
created) are counted by their handlers instead, after their input is checked, so that a refused
submit is not counted; they name none here.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from stream_store.quotas import Budget

__all__ = ["QUERY", "WRITE", "route_budget"]

WRITE: dict[str, Any] = {"budget": Budget.WRITES}
QUERY: dict[str, Any] = {"budget": Budget.QUERIES}


def route_budget(request: Request[Any, Any, Any]) -> Budget | None:
    """The budget the request's route counts against, if any."""
    budget = request.route_handler.opt.get("budget")
    return budget if isinstance(budget, Budget) else None
