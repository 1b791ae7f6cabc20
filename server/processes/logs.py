"""structlog configuration, done once per entry point (`runstream serve|worker|up`).

`run_id` and `thread_id` are bound through contextvars by the code that knows them, so every
line logged while handling a run carries them; a line logged inside a span (traces on, the run's
submit and attempts) carries its `trace_id` and `span_id` too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from stream_store.tracing import add_trace_ids

__all__ = ["configure_logging"]


def configure_logging(
    level: str = "info", json: bool = False, *, cache: bool = True, process: int | None = None
) -> None:
    """Set up structlog; `cache=False` lets tests reconfigure it later. `process`: this child's
    index under `--processes N`, on every line it logs."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if process is not None:
        shared.append(_Tag("process", process))
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=cache,
    )
    # arq, uvicorn and psycopg log through the standard library: same level, same stream.
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr, force=True)


class _Tag:
    """A processor that adds one fixed key to every line."""

    def __init__(self, key: str, value: object) -> None:
        self.key = key
        self.value = value

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event.setdefault(self.key, self.value)
        return event
