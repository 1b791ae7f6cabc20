"""structlog configuration, done once per entry point (`runstream serve|worker|up`).

`run_id` and `thread_id` are bound through contextvars by the code that knows them, so every
line logged while handling a run carries them.
"""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(level: str = "info", json: bool = False, *, cache: bool = True) -> None:
    """Set up structlog; `cache=False` lets tests reconfigure it later."""
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
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
