"""Which per-minute budget a route's requests count against (docs/security.md, "Per-caller
limits").

A route names its budget in its decorator (`dependencies=WRITE` or `dependencies=QUERY`): its
`caller` is then this module's, which counts the request as soon as the caller is known, so a
route cannot be counted twice, and one without a budget shows it in its decorator.

A request that is refused (bad input, not found, a conflict, a cap) changed nothing, and is not
counted either: its count is given back before the error is answered, as a submit refused by
its checks is never counted. One that ran its query until Postgres cancelled it
(`QueryTimeout`) keeps its count: it cost what the budget is there to bound.

Submits (runs, threads, assistants and crons created) are counted by their handlers, after
their input is checked; they name no budget here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Request
from litestar.di import Provide

from stream_store.errors import QueryTimeout

from .auth import Caller
from .quotas import Budget, CallerQuotas

__all__ = ["QUERY", "WRITE"]


def _counted_caller(
    budget: Budget,
) -> Callable[[Request[Any, Any, Any], CallerQuotas], AsyncIterator[Caller]]:
    async def counted_caller(
        request: Request[Any, Any, Any], quotas: CallerQuotas
    ) -> AsyncIterator[Caller]:
        caller = await request.app.state.resources.sign_in.caller(request)
        count = await quotas.take(caller.owner, budget)
        try:
            yield caller
        except QueryTimeout:
            raise
        except Exception:
            if count is not None:
                await quotas.uncount(count)
            raise

    return counted_caller


WRITE: dict[str, Any] = {"caller": Provide(_counted_caller(Budget.WRITES))}
QUERY: dict[str, Any] = {"caller": Provide(_counted_caller(Budget.QUERIES))}
