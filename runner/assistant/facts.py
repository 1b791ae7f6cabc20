"""What the assistant knows about a user: facts, how they are extracted and how they conflict.

A fact has a `kind`: a structured one (`name`, `location`, `occupation`, `age`: one value each;
`likes`, `dislikes`: a set of items each) or `note` (free-form). Its store key is the kind for
single-valued kinds, `likes:<item>` / `dislikes:<item>` / `note:<digest>` otherwise, so a new
value for a single kind, or liking what is stored as disliked (and the reverse), is a conflict
(`conflict_with`), never a silent overwrite.

Offline (the `fake` model) facts come from `rule_facts`, a deterministic reading of the
phrasings documented in docs/memory.md; with a real model from a structured-output call
(`Extraction`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "KINDS",
    "MAX_VALUE",
    "MULTI_KINDS",
    "SINGLE_KINDS",
    "ExtractedFact",
    "Extraction",
    "Fact",
    "conflict_with",
    "fact_problems",
    "framing",
    "rule_facts",
]

Kind = Literal["name", "location", "occupation", "age", "likes", "dislikes", "note"]
SINGLE_KINDS = frozenset({"name", "location", "occupation", "age"})
MULTI_KINDS = frozenset({"likes", "dislikes"})
KINDS = SINGLE_KINDS | MULTI_KINDS | {"note"}
_KIND_ORDER = ("name", "location", "occupation", "age", "likes", "dislikes", "note")
_OPPOSITE = {"likes": "dislikes", "dislikes": "likes"}

# Confidence of a plain statement, and of one hedged ("I think", "maybe", "probably", ...).
STATED = 0.9
HEDGED = 0.6
_HEDGES = re.compile(r"\b(i think|i guess|i believe|maybe|probably|perhaps)\b", re.IGNORECASE)
MAX_VALUE = 120  # characters of one value (docs/memory.md): longer ones are cut, never stored


@dataclass(frozen=True)
class Fact:
    """One fact about the user, as the store keeps it (`value` in `asdict`)."""

    kind: str
    value: str
    confidence: float
    source_run: str

    @property
    def key(self) -> str:
        """The store key: one per single-valued kind, one per item otherwise."""
        if self.kind in SINGLE_KINDS:
            return self.kind
        if self.kind in MULTI_KINDS:
            return f"{self.kind}:{self.value.casefold()}"
        digest = hashlib.sha256(self.value.casefold().encode()).hexdigest()[:16]
        return f"note:{digest}"

    def order(self) -> tuple[int, str]:
        """Where the fact comes in a prompt: by kind (name first, notes last), then key."""
        return (_KIND_ORDER.index(self.kind) if self.kind in _KIND_ORDER else 99, self.key)

    def as_value(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.sentence()}

    def sentence(self) -> str:
        """The fact as the prompt and the web page show it."""
        return {
            "name": f"their name is {self.value}",
            "location": f"they live in {self.value}",
            "occupation": f"they work as {self.value}",
            "age": f"they are {self.value} years old",
            "likes": f"they like {self.value}",
            "dislikes": f"they do not like {self.value}",
        }.get(self.kind, self.value)

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> Fact:
        return cls(
            kind=str(value["kind"]),
            value=str(value["value"]),
            confidence=float(value.get("confidence", HEDGED)),
            source_run=str(value.get("source_run", "")),
        )

    @classmethod
    def read(cls, value: Any) -> Fact | None:
        """A stored item's value as a fact; None for one that is not (a user may put anything
        in their store through the store routes: it is left out, never a failed run)."""
        try:
            fact = cls.from_value(value)
        except (KeyError, TypeError, ValueError):
            return None
        return fact if fact.value and 0 <= fact.confidence <= 1 else None


def fact_problems(value: Any) -> list[str]:
    """Why `value` (a fact as the store keeps it, `Fact.as_value()`) is not one the assistant
    may write: an unknown kind, an empty value or one past `MAX_VALUE` characters, a confidence
    outside [0, 1]. Empty for a good one. Extraction never makes such a fact; a pending
    conflict is thread state, which its owner can write (`update_state`), so the write checks."""
    if not isinstance(value, dict):
        return ["not an object"]
    problems = []
    if value.get("kind") not in KINDS:
        problems.append(f"unknown kind {str(value.get('kind'))[:40]!r}")
    text = value.get("value")
    if not isinstance(text, str) or not text.strip():
        problems.append("empty value")
    elif len(text) > MAX_VALUE:
        problems.append("value too long")
    confidence = value.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        problems.append("no confidence")
    elif not 0 <= confidence <= 1:
        problems.append("confidence out of [0, 1]")
    return problems


def framing(confidence: float) -> str:
    """How the prompt frames a fact: stated (>= 0.8), likely (>= 0.5) or uncertain."""
    if confidence >= 0.8:
        return "stated"
    if confidence >= 0.5:
        return "likely"
    return "uncertain"


def _same(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def conflict_with(fact: Fact, stored: dict[str, Fact]) -> Fact | None:
    """The stored fact `fact` contradicts (by store key), if any: another value of the same
    single-valued kind, or the opposite of a like/dislike."""
    if fact.kind in SINGLE_KINDS:
        old = stored.get(fact.key)
        return old if old is not None and not _same(old.value, fact.value) else None
    if fact.kind in MULTI_KINDS:
        opposite = Fact(_OPPOSITE[fact.kind], fact.value, fact.confidence, fact.source_run)
        return stored.get(opposite.key)
    return None


# -- offline extraction ----------------------------------------------------------------------

# A value ends at punctuation or at a conjunction starting another clause ("... and I live in")
_VALUE = r"(?P<value>[^.!?,;\n]+?)(?=\s+(?:and|but|so|because|though)\b|[.!?,;\n]|$)"
_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("name", re.compile(rf"\bmy name is {_VALUE}", re.IGNORECASE)),
    ("name", re.compile(rf"\bcall me {_VALUE}", re.IGNORECASE)),
    ("location", re.compile(rf"\bi live in {_VALUE}", re.IGNORECASE)),
    ("location", re.compile(rf"\bi moved to {_VALUE}", re.IGNORECASE)),
    ("occupation", re.compile(rf"\bi work as (?:an? )?{_VALUE}", re.IGNORECASE)),
    ("age", re.compile(r"\bi am (?P<value>\d{1,3}) years old", re.IGNORECASE)),
    ("dislikes", re.compile(rf"\bi (?:don't|do not|dont) like {_VALUE}", re.IGNORECASE)),
    ("dislikes", re.compile(rf"\bi hate {_VALUE}", re.IGNORECASE)),
    ("likes", re.compile(rf"(?<!n't )(?<!not )\bi (?:really )?(?:like|love) {_VALUE}", re.I)),
    ("note", re.compile(r"\bremember that (?P<value>[^.!?\n]+)", re.IGNORECASE)),
]


def _clean(value: str) -> str:
    value = re.sub(r"\s+", " ", value).strip(" '\"")
    return value[:MAX_VALUE]


def rule_facts(text: str, source_run: str) -> list[Fact]:
    """The facts the documented phrasings state in `text`, in the order they appear; one fact
    per store key (the last statement of a key wins). Each sentence is read on its own, hedged
    ones ("I think my name is ...") with a lower confidence."""
    found: dict[str, tuple[int, Fact]] = {}
    offset = 0
    for sentence in re.split(r"(?<=[.!?;\n])", text):
        confidence = HEDGED if _HEDGES.search(sentence) else STATED
        taken: list[tuple[int, int]] = []
        for kind, pattern in _RULES:
            for match in pattern.finditer(sentence):
                span = match.span()
                if any(span[0] < end and start < span[1] for start, end in taken):
                    continue  # "I don't like" is not also an "I like"
                taken.append(span)
                value = _clean(match.group("value"))
                if not value:
                    continue
                fact = Fact(kind, value, confidence, source_run)
                found[fact.key] = (offset + span[0], fact)
        offset += len(sentence)
    return [fact for _, fact in sorted(found.values(), key=lambda pair: pair[0])]


# -- extraction by a model (structured output) -----------------------------------------------


class ExtractedFact(BaseModel):
    """One stable fact the user stated about themselves."""

    kind: Kind = Field(
        description="name, location, occupation, age, likes, dislikes, or note for anything else"
    )
    value: str = Field(description="the value, short: 'Ann', 'Paris', 'green tea'")
    confidence: float = Field(ge=0, le=1, description="0.9 stated plainly, 0.6 hedged")


class Extraction(BaseModel):
    """The stable facts about the user in their last message (none is a good answer)."""

    facts: list[ExtractedFact] = Field(default_factory=list)


EXTRACTION_PROMPT = (
    "Extract stable facts the user states about themselves in their last message: their name,"
    " where they live, their occupation, their age, what they like or dislike, or another"
    " lasting fact as a note. Do not extract questions, requests or passing states. Give"
    " confidence 0.9 to plain statements and 0.6 to hedged ones. No facts is a good answer."
)


def model_facts(extraction: Extraction, source_run: str) -> list[Fact]:
    """A structured-output answer as facts, values cut and empty ones left out."""
    facts: dict[str, Fact] = {}
    for item in extraction.facts:
        value = _clean(item.value)
        if value:
            fact = Fact(item.kind, value, round(float(item.confidence), 2), source_run)
            facts[fact.key] = fact
    return list(facts.values())
