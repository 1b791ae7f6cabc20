"""Deprecated: `runner.run_scope` is the API graph code imports (`once`, `current_run`,
`NotInARun`, and `record_evaluation` and `chat_model` beside them). These names stay here for
the graphs of projects written before it, and warn when imported."""

from __future__ import annotations

import warnings

from .run_scope import NotInARun, RunScope, once
from .run_scope import current_run as _current_run

__all__ = ["CurrentRun", "NotInARun", "current_run", "once"]

warnings.warn(
    "runner.effects is deprecated: import once, current_run and NotInARun from runner.run_scope",
    DeprecationWarning,
    stacklevel=2,
)

CurrentRun = RunScope


def current_run(caller: str = "") -> RunScope:
    """`runner.run_scope.current_run()`; `caller` is ignored (it named the caller in errors)."""
    return _current_run()
