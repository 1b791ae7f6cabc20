"""What an assistant (or a single run) configures: the graph's `context_schema`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Context:
    """Set per assistant (`assistants.create(..., context=...)`) or per run (`context=`);
    LangGraph fills the defaults for what neither gives."""

    refund_limit: float = 50.0  # above this, a person approves first
    shop_name: str = "the shop"
    model: str = "gpt-4o-mini"
