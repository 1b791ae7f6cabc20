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

# Confidence of a plain statement, of one hedged ("I think", "maybe", "I suppose", "kind of"),
# and of one that says what may be ("might", "someday", "I'll move to"): framed stated, likely
# and uncertain (`framing`).
STATED = 0.9
HEDGED = 0.6
UNCERTAIN = 0.3
_HEDGES = re.compile(
    r"\b(i think|i guess|i believe|i suppose|i reckon|i feel like|maybe|probably|perhaps"
    r"|kind of|kinda|sort of|sorta)\b",
    re.IGNORECASE,
)
_MAYBES = re.compile(
    r"\b(might|(?:i|we) (?:may|could)|someday|some day|one day|eventually|thinking of"
    r"|thinking about|considering|planning to|plan to|hoping to|hope to)\b",
    re.IGNORECASE,
)
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

# A value ends at punctuation or at a word starting another clause ("... and I live in"), and
# leaves out a trailing time ("Faro now", "Braga in the spring", "Oslo since 2019": `_clean`)
_VALUE = (
    r"(?P<value>[^.!?,;\n]+?)(?=\s+(?:and|but|so|because|though|although|or|when|while"
    r"|where|which|who|since|until|if)\b|[.!?,;\n]|$)"
)
_END = r"(?=\s*(?:[.!?,;\n]|$|\band\b|\bbut\b|\bso\b))"  # a one-word value's end
_I_AM = r"\bi(?:'m|\u2019m| am)"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_TRAILING = re.compile(
    r"\s+(?:(?:right |just )?now|nowadays|these days|today|currently|at the moment|anymore"
    r"|again|too|also|as well|for now|someday|some day|one day|eventually|soon|though"
    r"|for (?:a|an|the|some|many|several|\d+)\b.*|since\b.*|ago\b.*"
    r"|(?:last|next|this|every) (?:year|month|week|spring|summer|autumn|fall|winter|\w+day)\b.*"
    rf"|in (?:the )?(?:spring|summer|autumn|fall|winter|{_MONTHS}|\d{{4}})\b.*"
    r"|(?:a|an|one|two|three|four|five|six|\d+) (?:years?|months?|weeks?|days?) ago\b.*)$",
    re.IGNORECASE,
)
# Words after "I'm" that are not a name ("I'm Sorry", "I'm Fine"), and after "I'm a" that are
# not an occupation ("I'm a bit lost", "I'm a big fan of")
_NOT_NAMES = frozenset(
    (
        *("fine", "sorry", "good", "great", "okay", "ok", "tired", "happy", "sad", "here"),
        *("back", "done", "ready", "sure", "not", "just", "so", "very", "also", "still"),
        *("busy", "home", "well", "bored", "hungry", "lost", "glad", "afraid", "new", "in"),
    )
)
_NOT_OCCUPATIONS = (
    r"(?!(?:bit|little|lot|fan|big|huge|great|good|bad|real|total|complete|few|couple|kind"
    r"|sort|mess|person|member|part|guest|user|human|man|woman|girl|boy|mother|father"
    r"|parent|student of)\b)"
)
_I = re.IGNORECASE
_RULES: list[tuple[str, re.Pattern[str], float]] = [
    ("name", re.compile(rf"\bmy name(?: is|'s|\u2019s) {_VALUE}", _I), STATED),
    ("name", re.compile(rf"\bcall me {_VALUE}", _I), STATED),
    # "I'm Priya": a capitalised word on its own, so written case-sensitively
    ("name", re.compile(rf"(?i:{_I_AM}) (?P<value>[A-Z][\w-]+){_END}"), STATED),
    ("location", re.compile(rf"\bi live in {_VALUE}", _I), STATED),
    ("location", re.compile(rf"\bi moved to {_VALUE}", _I), STATED),
    ("location", re.compile(rf"\bi(?:'ve|\u2019ve| have) lived in {_VALUE}", _I), STATED),
    ("location", re.compile(rf"(?:{_I_AM}) (?:from|based in) {_VALUE}", _I), STATED),
    (
        "location",
        re.compile(
            r"\bi(?:'ll|\u2019ll| will| might| may| could| would| am going to|'m going to"
            rf"| plan to| hope to| want to)(?: \w+)? (?:move|relocate) to {_VALUE}",
            _I,
        ),
        UNCERTAIN,
    ),
    ("location", re.compile(rf"(?:{_I_AM}) moving to {_VALUE}", _I), UNCERTAIN),
    ("occupation", re.compile(rf"\bi work as (?:an? )?{_VALUE}", _I), STATED),
    ("occupation", re.compile(rf"(?:{_I_AM}) an? {_NOT_OCCUPATIONS}{_VALUE}", _I), STATED),
    ("age", re.compile(rf"(?:{_I_AM}) (?P<value>\d{{1,3}})(?: years? old)?{_END}", _I), STATED),
    ("age", re.compile(r"\bi am (?P<value>\d{1,3}) years old", _I), STATED),
    (
        "dislikes",
        re.compile(
            rf"\bi (?:really |just |also |still |honestly )?(?:don't|don\u2019t|do not|dont)"
            rf" (?:really )?(?:like|enjoy|love) (?!to\b){_VALUE}",
            _I,
        ),
        STATED,
    ),
    (
        "dislikes",
        re.compile(
            rf"\bi (?:really )?(?:hate|dislike|detest|can't stand|can\u2019t stand"
            rf"|cannot stand|can not stand) {_VALUE}",
            _I,
        ),
        STATED,
    ),
    (
        "dislikes",
        re.compile(rf"(?:{_I_AM}) not (?:really )?(?:a|much of a) fan of {_VALUE}", _I),
        STATED,
    ),
    (
        "likes",
        re.compile(
            rf"(?<!n't )(?<!not )\bi (?:really |also |just |kind of |kinda |sort of |do )?"
            rf"(?:like|love|enjoy|adore) {_VALUE}",
            _I,
        ),
        STATED,
    ),
    ("likes", re.compile(rf"(?:{_I_AM}) (?:a )?(?:big |huge )?fan of {_VALUE}", _I), STATED),
    ("note", re.compile(r"\bremember that (?P<value>[^.!?\n]+)", _I), STATED),
]
# A sentence asking something ("Would I like Paris?", "Can you call me a taxi?") states nothing
_QUESTION = re.compile(
    r"^\W*(?:would|can|could|do|does|did|is|are|am|will|what|who|how|why|where|when|should"
    r"|may|shall|have|has|which)\b[^?]*\?\s*$",
    _I,
)


def _clean(value: str, kind: str = "note") -> str:
    value = re.sub(r"\s+", " ", value).strip(" '\"")
    if kind != "note":  # a note is kept as said ("my sister's birthday is in May")
        while (cut := _TRAILING.sub("", value)) != value:
            value = cut
        if kind == "name" and value.split()[0].casefold() in _NOT_NAMES:
            return ""
    return value[:MAX_VALUE]


def _confidence(sentence: str) -> float:
    if _MAYBES.search(sentence):
        return UNCERTAIN
    return HEDGED if _HEDGES.search(sentence) else STATED


def rule_facts(text: str, source_run: str) -> list[Fact]:
    """The facts the documented phrasings state in `text`, in the order they appear; one fact
    per store key (the last statement of a key wins). Each sentence is read on its own: one
    asking something states nothing; one hedged ("I think my name is ...", "I suppose")
    gives a lower confidence, one saying what may be ("I might move to ...") a lower still."""
    found: dict[str, tuple[int, Fact]] = {}
    offset = 0
    for sentence in re.split(r"(?<=[.!?;\n])", text):
        if _QUESTION.match(sentence):
            offset += len(sentence)
            continue
        sure = _confidence(sentence)
        taken: list[tuple[int, int]] = []
        for kind, pattern, most in _RULES:
            for match in pattern.finditer(sentence):
                span = match.span()
                if any(span[0] < end and start < span[1] for start, end in taken):
                    continue  # "I don't like" is not also an "I like"
                taken.append(span)
                value = _clean(match.group("value"), kind)
                if not value:
                    continue
                fact = Fact(kind, value, min(sure, most), source_run)
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
