"""The confirmation question before a contradicting fact replaces a stored one, and reading
its answer: a deterministic fast path for the common yes/no words, a classification for the
rest (a rule offline, a structured-output call with a model).

The question is an interrupt shaped as LangChain's human-in-the-loop request
(`wire.approvals.HITLRequest`), so the web page, `runstream chat` and agent-chat-ui
draw Approve / Reject buttons for it. An answer is a decision (`{"decisions": [{"type":
"approve"}]}` or `reject`, or the older `{"approve": bool}`) or any text ("yes", "nope",
"I moved last month").
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, Field

from wire.approvals import (
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
    "never_yes",
    "rule_verdict",
    "safe_verdict",
]

ACTION = "update_memory"
Verdict = Literal["yes", "no", "unclear"]

# The fast path: a whole answer (case, punctuation and spacing aside) that is one of these. A
# yes here is unambiguous: nothing else is in the answer, and an answer with "?" is never one.
_YES = frozenset(
    (
        *("yes", "y", "yeah", "yep", "yup", "sure", "correct", "right", "true", "ok", "okay"),
        *("affirmative", "absolutely", "indeed", "that's right", "that is right", "of course"),
        *("yes please", "update it", "definitely", "certainly", "go ahead", "please do"),
        *("yes update it", "yes please update it", "do it"),
    )
)
_NO = frozenset(
    (
        *("no", "n", "nope", "nah", "wrong", "false", "incorrect", "negative", "not really"),
        *("no thanks", "keep it", "keep the old one", "that's wrong", "no thank you"),
        *("absolutely not", "of course not", "certainly not", "definitely not", "no way"),
        *("not now", "not yet", "don't", "do not", "please don't", "never", "rather not"),
        *("i'd rather not", "i would rather not", "don't update it", "please don't update it"),
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
    text = text.casefold().translate(_APOSTROPHES)
    return re.sub(r"\s+", " ", re.sub(r"[^\w' ]+", " ", text)).strip()


_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})


def fast_verdict(text: str) -> Verdict:
    """yes / no for the common short answers ("yes", "Y!", "nope", "absolutely not"); unclear
    for anything else (a question, a longer answer), which goes to the classifier."""
    words = _words(text)
    if words in _YES and "?" not in text:
        return "yes"
    if words in _NO:
        return "no"
    return "unclear"


# -- the offline rules -----------------------------------------------------------------------
#
# An answer is read clause by clause (split at punctuation and "but"), and these come first,
# in order, whatever else it says: a hedge or deferral ("maybe", "not sure", "let me think",
# "later", "hmm") is unclear; a double negative in one clause ("I wouldn't say no", "it's not
# wrong", "don't keep the old one") is unclear; any other negation or refusal ("don't", "not
# now", "absolutely not", "I'd rather not", "never") is no. Only then: a question is unclear;
# a word that the old value still holds ("still", "typo", "keep", "leave it") is no; a yes word
# first ("yes, ...", "sure, ...") or one that the new value holds ("moved", "changed", "now")
# is yes; both, or neither, unclear.

_NEGATORS = frozenset(
    (
        *("no", "not", "never", "nope", "nah", "none", "nothing", "neither", "nor", "cannot"),
        *("dont", "doesnt", "didnt", "wont", "wouldnt", "cant", "couldnt", "shouldnt", "isnt"),
        *("arent", "wasnt", "werent", "aint", "havent", "hasnt", "hadnt", "without", "nay"),
    )
)
# Words that say no themselves: negated ("not wrong", "don't keep"), they make a double negative
_NEGATIVE_WORDS = frozenset(
    (
        *("wrong", "incorrect", "false", "untrue", "keep", "refuse", "disagree", "deny"),
        *("mind", "object", "stop", "reject", "cancel", "against"),
    )
)
_HEDGES = re.compile(
    r"\b(h+m+|u+m+|u+h+|erm|maybe|perhaps|possibly|probably|unsure|not sure|not certain"
    r"|(?:do not|don't|dont) know|no idea|dunno|idk|i guess|i suppose|kind of|kinda|sort of"
    r"|sorta|let me think|think about it|i'll think|later|wait|depends|who knows|if)\b"
)
_KEEPS = re.compile(
    r"\b(still|mistake|typo|joking|kidding|ignore|keep|leave it|as it is|as it was|old one"
    r"|wrong|incorrect|false|didn't mean|did not mean)\b"
)
_YES_FIRST = frozenset(
    (
        *("yes", "y", "yeah", "yep", "yup", "sure", "correct", "ok", "okay", "absolutely"),
        *("definitely", "certainly", "indeed", "affirmative", "exactly"),
    )
)
_LEANS_YES = re.compile(
    r"\b(moved|changed|switched|new|now|these days|update it|updated|change it|go ahead"
    r"|please do|do it|yes|of course|that's right)\b"
)


def _tokens(clause: str) -> list[str]:
    tokens = [t.replace("n't", "nt").replace("'", "") for t in clause.split()]
    tokens = ["cant" if t == "cannot" else t for t in tokens]
    return [t for i, t in enumerate(tokens) if i == 0 or t != tokens[i - 1]]  # "no no": one


def _negation(clause: str) -> str | None:
    """ "double" for a clause that negates a negation, "single" for one negation, or None."""
    tokens = _tokens(clause)
    negated = False
    for token in tokens:
        negative = token in _NEGATORS or (token.endswith("nt") and token[:-2] in _CONTRACTED)
        if negated and (negative or token in _NEGATIVE_WORDS):
            return "double"
        negated = negated or negative
    return "single" if negated else None


_CONTRACTED = frozenset(("do", "does", "did", "wo", "would", "ca", "could", "should", "is"))
_CONTRACTED |= frozenset(("are", "was", "were", "have", "has", "had", "must", "need", "ai"))


def never_yes(text: str) -> str | None:
    """Why `text` can never be a yes, whoever reads it: "hedge" (a hedge or deferral), "double
    negative", "negation" (any refusal), "question"; None when nothing forbids one. A yes
    from any classifier for such an answer counts as unclear: the question is asked again."""
    words = _words(text)
    if _HEDGES.search(words):
        return "hedge"
    clauses = [c for c in re.split(r"[.,;:!?()\-\u2013\u2014]+|\bbut\b", _plain(text)) if c]
    negations = {_negation(_words(clause)) for clause in clauses}
    if "double" in negations:
        return "double negative"
    if "single" in negations:
        return "negation"
    if "?" in text:
        return "question"
    return None


def _plain(text: str) -> str:
    return text.casefold().translate(_APOSTROPHES)


def rule_verdict(text: str) -> Verdict:
    """The offline classifier for an answer the fast path left unclear (deterministic): the
    order above."""
    words = _words(text)
    if not words:
        return "unclear"
    why = never_yes(text)
    if why == "negation":
        return "no"
    if why is not None:
        return "unclear"
    keeps = bool(_KEEPS.search(words))
    yes = words.split()[0] in _YES_FIRST or bool(_LEANS_YES.search(words))
    if keeps != yes:
        return "yes" if yes else "no"
    return "unclear"


def safe_verdict(text: str, verdict: Verdict) -> Verdict:
    """A classifier's verdict, failing safe: a yes for an answer that `never_yes` refuses (a
    model's mistake, say) is unclear, so the question is asked again."""
    return "unclear" if verdict == "yes" and never_yes(text) is not None else verdict


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


class Judgement(BaseModel):
    """A check of another reader's verdict: what the user's answer says, read strictly."""

    verdict: Verdict = Field(
        description="yes only for a plain consent; no for a refusal, negation or deferral;"
        " unclear for a hedge, a question, a double negative or anything else"
    )


JUDGE_PROMPT = (
    "You check how an assistant read a user's answer. The user was asked whether to replace"
    " the remembered value of their {key} with a new one, and answered: {answer}\n"
    "Read it strictly. yes: only a plain consent with no negation, hedge or condition. no: a"
    " refusal, any negation of the update, or a deferral (not now, not yet, later). unclear:"
    " a hedge, a question, a double negative, or anything you cannot tell."
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
