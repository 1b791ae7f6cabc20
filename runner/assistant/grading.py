"""Deterministic graders of a turn: pure functions, so a crash that re-runs the grading node
grades the same way, and the result is recorded once per run and key
(`runner.evaluations.record_evaluation`).

- `grade_reply`: the reply is not empty and does not merely repeat the user's message.
- `grade_extraction`: every extracted fact is well-formed (a known kind, a non-empty value of
  bounded length, a confidence in [0, 1], its source run named).
- `grade_confirmation`: each answer to a conflict question read the way the offline rules
  read it (`confirmation.rule_verdict`): the fast path's yes/no is the rules' own; a
  classifier's verdict agrees with them (1.0), contradicts them (0.0), or is beyond them (0.5,
  neither passed nor failed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .confirmation import rule_verdict
from .facts import fact_problems

__all__ = ["Grade", "grade_confirmation", "grade_extraction", "grade_reply"]


@dataclass(frozen=True)
class Grade:
    """One evaluation: what `record_evaluation` records."""

    kind: str
    key: str
    score: float
    passed: bool | None  # None: a score, not a pass/fail check
    detail: dict[str, Any] = field(default_factory=dict)


def _plain(text: str) -> str:
    return " ".join(text.split()).casefold()


def grade_reply(prompt: str, reply: str) -> Grade:
    """1.0 for a reply that says something other than the prompt; 0.0 for an empty one or one
    that echoes the user's message verbatim (whitespace and case aside)."""
    problems = []
    if not reply.strip():
        problems.append("empty")
    elif _plain(reply) == _plain(prompt):
        problems.append("echoes the prompt")
    passed = not problems
    detail: dict[str, Any] = {"reply_chars": len(reply), "problems": problems}
    return Grade("reply", "reply", 1.0 if passed else 0.0, passed, detail)


def _fact_problems(fact: Any) -> list[str]:
    """What the write refuses (`facts.fact_problems`), and a fact without its source run."""
    problems = fact_problems(fact)
    if isinstance(fact, dict) and not fact.get("source_run"):
        problems.append("no source run")
    return problems


def grade_extraction(facts: Sequence[Any]) -> Grade:
    """The share of well-formed facts (1.0 when none was extracted: nothing is wrong); passed
    when all are."""
    problems = {
        str(index): found for index, fact in enumerate(facts) if (found := _fact_problems(fact))
    }
    score = 1.0 if not facts else (len(facts) - len(problems)) / len(facts)
    detail: dict[str, Any] = {"facts": len(facts), "problems": problems}
    return Grade("extraction", "extraction", round(score, 3), not problems, detail)


def grade_confirmation(index: int, confirmation: dict[str, Any]) -> Grade:
    """One answer to a conflict question (`{"key", "answer", "verdict", "by"}`, as `confirm`
    records it), graded against the offline rules' reading of the same answer."""
    verdict, by = confirmation.get("verdict"), confirmation.get("by")
    reference = rule_verdict(str(confirmation.get("answer", "")))
    detail: dict[str, Any] = {"key": confirmation.get("key"), "verdict": verdict, "by": by}
    key = f"confirmation:{index}"
    if by == "fast_path" or reference == verdict:
        return Grade("confirmation", key, 1.0, True, {**detail, "rules": reference})
    if reference == "unclear":
        return Grade("confirmation", key, 0.5, None, {**detail, "rules": reference})
    return Grade("confirmation", key, 0.0, False, {**detail, "rules": reference})
