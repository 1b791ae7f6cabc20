"""What `runner.run_scope.record_evaluation` records: a graph's grade of its own work, with its
run, once per key.

A node of any graph (a judge after the reply, a check of an extraction) calls `await
record_evaluation(kind, score, key=...)` (`runner.run_scope`, the API graph code imports), which
hands its run scope here: the run, thread, owner, graph, attempt and trace ids come from it, as
`once` takes them. The row is written once per run and key across crashes and retries
(`stream_store.evaluations`): a node that a later attempt runs again records nothing new, so a
grade is never stored or counted twice (/metrics counts the writes), and an attempt that lost
its run writes nothing.

The inputs are checked before anything is written, with errors that say what is wrong: a graph's
bug should fail its run loudly rather than put a label of unbounded cardinality into /metrics or
a megabyte into every read of a thread. docs/protocol.md ("Evaluations") is the user reference.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from typing import TYPE_CHECKING, Any

import structlog

from stream_store.evaluations import NewEvaluation
from stream_store.limits import (
    EVALUATION_DETAIL_MAX_BYTES,
    EVALUATION_KEY_MAX_CHARS,
    EVALUATION_KIND_MAX_CHARS,
    EVALUATIONS_MAX_PER_RUN,
)

if TYPE_CHECKING:
    from .run_scope import RunScope

from .errors import RunnerError

__all__ = ["EvaluationRefused", "record"]

logger = structlog.get_logger()

_KIND = re.compile(rf"[a-z][a-z0-9_]{{0,{EVALUATION_KIND_MAX_CHARS - 1}}}")
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # JSON's escape of NUL, not "\\u0000"


# What the log says of each outcome of a write that was not refused.
_LOGGED = {
    "recorded": "evaluation recorded",
    "replayed": "evaluation already recorded; unchanged",
    "fenced": "evaluation not recorded: this attempt no longer holds the run",
}


class EvaluationRefused(RunnerError, ValueError):
    """`record_evaluation` was given something it does not record (the message says what), or
    the run holds as many evaluations as one run may."""


async def record(
    run: RunScope,
    kind: str,
    score: float,
    *,
    key: str,
    passed: bool | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Record `run`'s evaluation `key` (`runner.run_scope.record_evaluation` says what each
    value may be), once per run and key.

    Raises:
        EvaluationRefused: an input is not as it may be, or the run holds 1000 evaluations.
    """
    checked_kind = _check_kind(kind)
    checked_score = _check_score(score)
    checked_key = _check_key(key)
    if passed is not None and not isinstance(passed, bool):
        raise EvaluationRefused(f"passed must be true, false or None, not {passed!r}")
    checked_detail = _check_detail(detail)
    recorded = await run.evaluations.record(
        NewEvaluation(
            run_id=run.run_id,
            key=checked_key,
            thread_id=run.thread_id,
            owner=run.owner,
            graph=run.graph,
            attempt=run.attempt,
            trace_id=run.trace_id,
            x_trace_id=run.x_trace_id,
            kind=checked_kind,
            score=checked_score,
            passed=passed,
            detail=checked_detail,
        )
    )
    if recorded == "full":
        raise EvaluationRefused(
            f"the run holds {EVALUATIONS_MAX_PER_RUN} evaluations, the most one run may;"
            f" {checked_key!r} was not recorded"
        )
    log = logger.warning if recorded == "fenced" else logger.info
    log(
        _LOGGED[recorded],
        run_id=run.run_id,
        thread_id=run.thread_id,
        key=checked_key,
        kind=checked_kind,
        score=checked_score,
        attempt=run.attempt,
    )


def _check_kind(kind: object) -> str:
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise EvaluationRefused(
            f"kind must be a lowercase identifier (a letter, then letters, digits or _), at"
            f" most {EVALUATION_KIND_MAX_CHARS} characters: {kind!r} is not"
        )
    return kind


def _check_score(score: object) -> float:
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise EvaluationRefused(f"score must be a number from 0 to 1, not {score!r}")
    value = float(score)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise EvaluationRefused(f"score must be a finite number from 0 to 1, not {score!r}")
    return value


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > EVALUATION_KEY_MAX_CHARS:
        raise EvaluationRefused(
            f"key must be a non-empty string of at most {EVALUATION_KEY_MAX_CHARS} characters,"
            f" unique within the run: {str(key)[:80]!r} is not"
        )
    if "\x00" in key:
        raise EvaluationRefused("key must not contain the NUL character")
    return key


def _check_detail(detail: object) -> dict[str, Any] | None:
    """`detail` as it will be stored: a JSON object within the bound, its text free of NUL
    (which Postgres's jsonb refuses), or None."""
    if detail is None:
        return None
    if not isinstance(detail, dict):
        raise EvaluationRefused(f"detail must be a JSON object (a dict) or None, not {detail!r}")
    try:
        encoded = json.dumps(detail, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise EvaluationRefused(f"detail must be JSON (no NaN or infinity): {exc}") from exc
    except RecursionError as exc:
        raise EvaluationRefused("detail is nested too deeply to be JSON") from exc
    size = len(encoded.encode())
    if size > EVALUATION_DETAIL_MAX_BYTES:
        raise EvaluationRefused(
            f"detail is {size} bytes as compact JSON; at most {EVALUATION_DETAIL_MAX_BYTES}"
        )
    if _ESCAPED_NUL.search(encoded):
        raise EvaluationRefused("detail must not contain the NUL character")
    parsed: dict[str, Any] = json.loads(encoded)  # what is stored: keys as JSON has them
    return parsed


def __getattr__(name: str) -> Any:
    """`record_evaluation` and `NotInARun`, deprecated here: `runner.run_scope` has them."""
    if name in ("record_evaluation", "NotInARun"):
        from . import run_scope

        warnings.warn(
            f"runner.evaluations.{name} is deprecated: import it from runner.run_scope",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(run_scope, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
