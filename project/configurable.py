"""What a caller may put in a run's `config.configurable`: the allow-list rule, kept here only.

LangGraph keeps its own machinery in `configurable` (`__pregel_checkpointer`, `checkpoint_ns`,
`thread_id`, ...: `langgraph/_internal/_constants.py`). A caller who could set those would run a
graph without runstream's fenced checkpointer, or on another thread's checkpoints. So:

- a graph whose module declares its keys in `CONFIGURABLE_KEYS` (the built-ins do) takes the model
  factory's keys (`MODEL_CONFIGURABLE`, here, read by `runner.models`) plus those, and nothing
  else; any other graph takes every key that is not reserved, as on LangGraph's server
  (`allowed` None);
- a reserved key is never taken, and a graph that declares one fails at start-up;
- the server refuses a run that sends anything else (`check`, 400); the worker passes a graph
  only the keys it takes (`select`) and sets its own (`thread_id`) after them, so a run recorded
  some other way cannot override what runstream sets either.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import structlog

from stream_store.limits import MAX_FAKE_TOKEN_DELAY_MS

from .errors import ProjectContractError

__all__ = [
    "MODEL_CONFIGURABLE",
    "REQUEST_KEYS",
    "RESERVED_KEYS",
    "ConfigurableRefused",
    "check",
    "fake_token_delay_ms",
    "is_reserved",
    "select",
]

logger = structlog.get_logger()

# Keys LangGraph reads from `configurable` or reserves (langgraph 1.2: `RESERVED`,
# `_CHECKPOINT_COORDINATE_KEYS` and `CONFIG_KEY_*` in `_internal/_constants.py`, and what
# `_internal/_config.py` and `Runtime.server_info` read). Every `__` key is reserved as well
# (RESERVED_PREFIXES), so LangGraph's `__pregel_*` keys, present and future, are covered.
RESERVED_KEYS = frozenset(
    {
        "thread_id",
        "checkpoint_id",
        "checkpoint_ns",
        "checkpoint_map",
        "run_id",
        "task_id",
        "assistant_id",
        "graph_id",
        "configurable",
        "langsmith:hidden",
        "|",
        ":",
    }
)
RESERVED_PREFIXES = ("__", "langgraph_")  # `langgraph_auth_user` names the caller to the graph

# What LangGraph's server adds to a run's `configurable` from the request that made it
# (`langgraph_api/models/run.py`): reserved, recorded with the run at submit
# (server/langgraph/request_keys.py), handed to every attempt's graph (runner/execute.py).
REQUEST_KEYS = ("langgraph_request_id", "__request_start_time_ms__", "__after_seconds__")


def fake_token_delay_ms(value: Any) -> float:
    """A caller's `fake_token_delay_ms`: milliseconds from 0 to `MAX_FAKE_TOKEN_DELAY_MS`.

    Raises:
        ValueError: for anything else, saying what is allowed.
    """
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value <= MAX_FAKE_TOKEN_DELAY_MS:
        raise ValueError(
            f"fake_token_delay_ms must be a number of milliseconds from 0 to"
            f" {MAX_FAKE_TOKEN_DELAY_MS}, got {str(value)[:40]!r}"
        )
    return float(value)


# The `configurable` keys the model factory reads, for every graph, each with its check.
MODEL_CONFIGURABLE: dict[str, Callable[[Any], object]] = {
    "fake_token_delay_ms": fake_token_delay_ms,
}


class ConfigurableRefused(ProjectContractError, ValueError):
    """A `configurable` key the graph does not take, or a value its reader refuses."""


def is_reserved(key: str) -> bool:
    return key in RESERVED_KEYS or key.startswith(RESERVED_PREFIXES)


def _listed(keys: Collection[str] | None) -> str:
    if keys is None:
        return "any key that is not reserved"
    return ", ".join(sorted(keys)) or "(none)"


def check(configurable: Mapping[str, Any], allowed: Collection[str] | None, graph: str) -> None:
    """Refuse any key `graph` does not take, and any value the model factory cannot use.

    Raises:
        ConfigurableRefused: naming the key, and the keys the graph takes.
    """
    for key in configurable:
        if is_reserved(key):
            raise ConfigurableRefused(
                f"config.configurable key {key[:80]!r} is reserved for LangGraph and runstream;"
                f" graph {graph!r} takes: {_listed(allowed)}"
            )
        if allowed is not None and key not in allowed:
            raise ConfigurableRefused(
                f"config.configurable key {key[:80]!r} is not one graph {graph!r} takes;"
                f" allowed: {_listed(allowed)}"
            )
        if key in MODEL_CONFIGURABLE:
            try:
                MODEL_CONFIGURABLE[key](configurable[key])
            except ValueError as exc:
                raise ConfigurableRefused(f"config.configurable: {exc}") from None


def select(
    configurable: Mapping[str, Any] | None, allowed: Collection[str] | None
) -> dict[str, Any]:
    """The keys of a recorded run's `configurable` that its graph takes; the rest are dropped."""
    taken = {
        key: value
        for key, value in (configurable or {}).items()
        if (allowed is None or key in allowed) and not is_reserved(key)
    }
    # the request's keys are the server's to hand on (runner/execute.py), not dropped
    dropped = sorted(set(configurable or {}) - set(taken) - set(REQUEST_KEYS))
    if dropped:
        logger.warning("configurable keys the graph does not take were dropped", keys=dropped)
    return taken
