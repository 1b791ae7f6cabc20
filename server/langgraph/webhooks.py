"""A run request's `webhook`, checked at submit as LangGraph checks it (422 with its reason,
recording nothing), and bounded per caller. The worker POSTs it when the run ends
(runner/webhooks.py); docs/langgraph.md, "Webhooks"."""

from __future__ import annotations

from project.webhooks import WebhookPolicy, WebhookRefused
from server.errors import ApiError
from server.resources import Resources
from stream_store.errors import LimitReached

__all__ = ["checked_webhook", "webhook_policy"]


def webhook_policy(resources: Resources) -> WebhookPolicy:
    """The process's policy: the project's `webhooks.url` and the operator's setting."""
    project = resources.registry.project
    spec = project.webhooks if project is not None else None
    return WebhookPolicy(
        url=spec.url if spec is not None else None,
        private_addresses=resources.settings.webhook_private_addresses,
    )


async def checked_webhook(resources: Resources, owner: str, url: str | None) -> str | None:
    """`url` once it passes the policy and the caller may have another delivery pending.

    Raises:
        ApiError: 422, the URL is refused (LangGraph's reason).
        LimitReached: 429, the caller's deliveries not settled yet are at
            RUNSTREAM_MAX_PENDING_WEBHOOKS.
    """
    if url is None:
        return None
    try:
        await webhook_policy(resources).check(url)
    except WebhookRefused as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    limit = resources.settings.max_pending_webhooks
    if limit and await resources.webhooks.pending_count(owner) >= limit:
        raise LimitReached(
            f"{limit} webhook deliveries of yours are not settled yet"
            " (RUNSTREAM_MAX_PENDING_WEBHOOKS): retry later",
            code="too_many_pending_webhooks",
            retry_after_s=30,
        )
    return url
