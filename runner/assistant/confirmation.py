"""The confirmation question before a contradicting fact replaces a stored one, and reading
its answer: a deterministic fast path for the common yes/no words, a classification for the
rest (a rule offline, a structured-output call with a model).

The question is an interrupt shaped as LangChain's human-in-the-loop request
(`clients.wire.approvals.HITLRequest`), so the web page, `runstream chat` and agent-chat-ui
draw Approve / Reject buttons for it. An answer is a decision (`{"decisions": [{"type":
"approve"}]}` or `reject`, or the older `{"approve": bool}`) or any text ("yes", "nope",
"I moved last month").
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, Field

from clients.wire.approvals import (
    ActionRequest,
    ApproveDecision,
    BadAnswer,
    HITLRequest,
    RejectDecision,
    ReviewConfig,
    read_answer,
    request_value,
)

from .facts import Fact

__all__ = [
    "ACTION",
    "Verdict",
    "answer_text",
    "confirmation_request",
    "fast_verdict",
    "rule_verdict",
]

ACTION = "update_memory"
Verdict = Literal["yes", "no", "unclear"]

_YES = frozenset(
    (
        *("yes", "y", "yeah", "yep", "yup", "sure", "correct", "right", "true", "ok", "okay"),
        *("affirmative", "absolutely", "indeed", "that's right", "that is right", "of course"),
        *("yes please", "update it"),
    )
)
_NO = frozenset(
    (
        *("no", "n", "nope", "nah", "wrong", "false", "incorrect", "negative", "not really"),
        *("no thanks", "keep it", "keep the old one", "that's wrong"),
    )
)


def question(old: Fact, new: Fact) -> str:
    """The short question the user is asked."""
    return f"Earlier I noted that {old.sentence()}. Update it: {new.sentence()}?".replace(
        "their", "your"
    ).replace("they ", "you ")


def confirmation_request(old: Fact, new: Fact) -> dict[str, Any]:
    """The interrupt's value: one `update_memory` action (the stored and the new fact) that
    may be approved (apply the new value) or rejected (keep the old)."""
    request = HITLRequest(
        action_requests=[
            ActionRequest(
                name=ACTION,
                args={"key": new.key, "kind": new.kind, "old": old.value, "new": new.value},
                description=question(old, new),
            )
        ],
        review_configs=[ReviewConfig(action_name=ACTION, allowed_decisions=["approve", "reject"])],
    )
    return request_value(request)


def _words(text: str) -> str:
    return re.sub(r"[^\w' ]+", " ", text.casefold()).strip()


def fast_verdict(text: str) -> Verdict:
    """yes / no for the common short answers ("yes", "Y!", "nope", "that's right"); unclear
    for anything else, which goes to the classifier."""
    words = re.sub(r"\s+", " ", _words(text))
    if words in _YES:
        return "yes"
    if words in _NO:
        return "no"
    return "unclear"


# Offline classification: a sentence whose first word is a yes or a no, or that says the new
# value is the truth ("I moved", "changed") or the old one still is ("still", "mistake").
_LEANS_YES = re.compile(r"\b(moved|changed|now|new|updated?|these days|switch(ed)?)\b")
_LEANS_NO = re.compile(r"\b(still|mistake|typo|didn't mean|did not mean|joking|ignore)\b")


def rule_verdict(text: str) -> Verdict:
    """The offline classifier for an answer the fast path left unclear (deterministic)."""
    words = _words(text).split()
    if not words:
        return "unclear"
    if words[0] in _YES:
        return "yes"
    if words[0] in _NO:
        return "no"
    joined = " ".join(words)
    yes, no = bool(_LEANS_YES.search(joined)), bool(_LEANS_NO.search(joined))
    if yes != no:
        return "yes" if yes else "no"
    return "unclear"


class Classification(BaseModel):
    """Whether the user's answer confirms the update of the stored fact."""

    verdict: Verdict = Field(
        description="yes: apply the new value; no: keep the stored one; unclear: cannot tell"
    )


CLASSIFY_PROMPT = (
    "The user was asked whether to update a fact remembered about them: {question}\n"
    "Their answer: {answer}\n"
    "Does the answer confirm the update (yes), refuse it (no), or is it unclear?"
)


def answer_text(request: dict[str, Any], value: Any) -> str:
    """A resume value as the text to read: "yes" / "no" for an approve / reject decision."""
    if isinstance(value, str):
        return value
    try:
        decisions = read_answer(msgspec.convert(request, HITLRequest), value)
    except (BadAnswer, msgspec.ValidationError):
        return str(value)[:500]
    decision = decisions[0]
    if isinstance(decision, ApproveDecision):
        return "yes"
    if isinstance(decision, RejectDecision):
        return "no"  # a reason given with it is not read: a rejection keeps the old value
    return str(value)[:500]
