"""Deterministic graders of a turn: pure functions, so a crash that re-runs the grading node
grades the same way, and the result is recorded once per run and key
(`runner.run_scope.record_evaluation`).

- `grade_reply`: the reply is not empty and does not merely repeat the user's message.
- `grade_extraction`: every extracted fact is well-formed (a known kind, a non-empty value of
  bounded length, a confidence in [0, 1], its source run named).
- `grade_confirmation`: each answer to a conflict question judged by a reader that is not
  the classifier (`judge_answer`: a labelled table, then a second rule set written to catch
  the first's errors; with a model, a model judge, `graph.judge_with_model`), and the verdict
  compared with the judge's: the same is passed (1.0); a yes the judge does not read as a yes,
  or a no it reads as a yes, is failed (0.0); an answer asked again, or a no where the judge
  cannot tell, is neither (0.5).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .confirmation import Verdict
from .facts import fact_problems

__all__ = ["Grade", "grade_confirmation", "grade_extraction", "grade_reply", "judge_answer"]


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


# -- the confirmation's judge -----------------------------------------------------------------
#
# Not `confirmation.rule_verdict` (which classified the answer), so that it can catch that
# classifier's mistakes: a labelled table of answers first, then a polarity reading of the
# whole answer, word by word, where a negation flips the next polar word within three words
# (and counts as a no on its own when none follows). It reads a yes only when the answer has
# some yes and nothing else: no negation anywhere, no no-word, no uncertainty, no question.

LABELLED: dict[str, Verdict] = {
    **dict.fromkeys(("yes", "y", "yeah", "yep", "sure", "correct", "yes please"), "yes"),
    **dict.fromkeys(("go ahead", "please do", "update it", "please update it"), "yes"),
    **dict.fromkeys(("no", "n", "nope", "nah", "no thanks", "keep it", "keep the old one"), "no"),
    **dict.fromkeys(("please don't update it", "don't update it", "absolutely not"), "no"),
    **dict.fromkeys(("not now", "of course not", "i'd rather not", "don't", "no way"), "no"),
    **dict.fromkeys(("not yet", "never", "leave it", "i don't think so"), "no"),
    **dict.fromkeys(("hmm", "maybe", "i'm not sure", "not sure", "i don't know"), "unclear"),
    **dict.fromkeys(("let me think", "later", "ask me later", "i wouldn't say no"), "unclear"),
    **dict.fromkeys(("not no", "it's not wrong", "i don't mind", "don't keep it"), "unclear"),
}
_POSITIVE = frozenset(
    (
        *("yes", "yeah", "yep", "yup", "sure", "ok", "okay", "correct", "right", "true"),
        *("absolutely", "definitely", "certainly", "indeed", "exactly", "affirmative"),
        *("agree", "update", "change", "apply", "moved", "changed", "switched", "new", "ahead"),
        *("now",),
    )
)
_NEGATIVE = frozenset(
    (
        *("no", "nope", "nah", "wrong", "incorrect", "false", "untrue", "keep", "leave"),
        *("still", "old", "mistake", "typo", "cancel", "stop", "refuse", "rather", "never"),
        *("kidding", "joking", "ignore", "disagree", "deny", "reject"),
    )
)
_FLIPS = frozenset(("not", "never", "without", "hardly", "neither", "nor", "nothing"))
_UNSURE = frozenset(
    (
        *("maybe", "perhaps", "possibly", "probably", "unsure", "hmm", "hm", "um", "uh", "erm"),
        *("dunno", "idk", "later", "wait", "guess", "suppose", "depends", "if", "whether"),
        *("kind", "sort", "kinda", "sorta", "think", "know", "idea"),
    )
)


def _judge_tokens(text: str) -> list[str]:
    """The answer's words, "n't" as "not", and "," for each break in it (a negation's scope
    ends there)."""
    text = text.casefold().replace("\u2019", "'")
    text = re.sub(r"n't\b", " not", text.replace("can't", "can not").replace("won't", "will not"))
    return re.findall(r"[a-z]+|[.,;:!?()-]+", text.replace("cannot", "can not"))


def judge_answer(text: str) -> Verdict:
    """The judge's reading of an answer to "Update it?" (deterministic; see above)."""
    key = " ".join(re.sub(r"[^\w' ]+", " ", text.casefold().replace("\u2019", "'")).split())
    if key in LABELLED:
        return LABELLED[key]
    tokens = _judge_tokens(text)
    score, flips, negative, unsure = 0, 0, False, "?" in text
    flip_left = 0
    for token in tokens:
        if not token.isalpha():
            score -= 1 if flip_left else 0
            flip_left = 0
            continue
        polar = 1 if token in _POSITIVE else -1 if token in _NEGATIVE else 0
        if token in _UNSURE:
            unsure = True
        if token in _FLIPS:
            if flip_left:  # a negation within a negation's scope: a double negative
                unsure = True
            flips += 1
            negative = True
            flip_left = 3
            continue
        if polar and flip_left:
            if polar < 0:
                unsure = True  # "not wrong", "don't keep": a double negative
            score -= polar
            flip_left = 0
            continue
        if flip_left:
            flip_left -= 1
            if not flip_left:
                score -= 1  # a negation with nothing polar after it: a no ("I'd rather not")
        score += polar
        negative = negative or polar < 0
    if flip_left:
        score -= 1
    if unsure:
        return "unclear"
    if score > 0 and not negative:
        return "yes"
    if score < 0 or flips:
        return "no"
    return "unclear"


def grade_confirmation(
    index: int,
    confirmation: dict[str, Any],
    judged: tuple[Verdict, str] | None = None,
) -> Grade:
    """One answer to a conflict question (`{"key", "answer", "verdict", "by"}`, as `confirm`
    records it), graded against the judge's reading of the same answer: `judged` (the
    verdict and who judged, a model's), else `judge_answer`'s ("rules")."""
    verdict, by = confirmation.get("verdict"), confirmation.get("by")
    expected, judge = judged or (judge_answer(str(confirmation.get("answer", ""))), "rules")
    detail: dict[str, Any] = {
        "key": confirmation.get("key"),
        "verdict": verdict,
        "by": by,
        "expected": expected,
        "judge": judge,
    }
    key = f"confirmation:{index}"
    if verdict == expected:
        return Grade("confirmation", key, 1.0, True, detail)
    if verdict == "yes" or (verdict == "no" and expected == "yes"):
        return Grade("confirmation", key, 0.0, False, detail)  # a wrong verdict
    return Grade("confirmation", key, 0.5, None, detail)  # asked again, or unclear to the judge
