"""The assistant's evaluation set (`evalset.json`, written by hand) and its scores for a model:
extraction precision and recall, and conflict-handling accuracy (`runstream eval`).

Each case is one user message: the facts it states, and, when facts are already stored, what
must happen to them (no conflict, or a conflict answered yes / no / unclearly). A case is run
through the assistant's own steps, not copies: `extract_facts` (rules offline, structured
output with a model), `conflict_with`, the confirmation's fast path and `classify_answer`, so
the scores are those of the configured model as the assistant uses it.

Its `heldout` section, which the rules were not written from, is scored apart: answers to one
conflict question labelled yes / no / unclear (the confirmation's accuracy, the yes verdicts
where the label is not, and whether the grader, `grading.grade_confirmation` with its judge,
fails a yes to each answer that is not one), and extraction cases of phrasings outside the
documented list.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
from langchain_core.language_models import BaseChatModel
from langgraph.func import entrypoint

from runner.models import EchoChatModel

from ..errors import RunnerError
from .confirmation import Verdict, answer_text, confirmation_request, fast_verdict
from .facts import KINDS, Fact, conflict_with, framing
from .grading import grade_confirmation
from .graph import classify_answer, extract_facts, judge_with_model

__all__ = [
    "DEFAULT_SET",
    "Case",
    "EvalSet",
    "EvalSetError",
    "Scores",
    "load_evalset",
    "score_all",
    "score_evalset",
]

DEFAULT_SET = Path(__file__).with_name("evalset.json")
_RUN = "eval"  # the source run the extracted facts are given

Framing = Literal["stated", "likely", "uncertain"]
Outcome = Literal["no_conflict", "applied", "kept", "asked_again"]


class ExpectedFact(msgspec.Struct, forbid_unknown_fields=True):
    kind: str
    value: str
    framing: Framing = "stated"


class StoredFact(msgspec.Struct, forbid_unknown_fields=True):
    kind: str
    value: str
    confidence: float = 0.9


class Expect(msgspec.Struct, forbid_unknown_fields=True):
    outcome: Outcome
    key: str | None = None
    decided_by: Literal["fast_path", "classifier"] | None = None


class Case(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    says: str
    facts: list[ExpectedFact]
    stored: list[StoredFact] = []
    answer: Any = None  # a resume value: text, or a decision ({"decisions": [...]})
    expect: Expect | None = None


class HeldOutAnswer(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    answer: Any  # a resume value, as `Case.answer`
    verdict: Verdict  # what a careful reader reads: yes, no (keep) or unclear (ask again)


class StatedFact(msgspec.Struct, forbid_unknown_fields=True):
    kind: str
    value: str


class HeldOut(msgspec.Struct, forbid_unknown_fields=True):
    """Cases the rules were not tuned on: answers to one conflict question (`stored`, then
    `new`), each labelled with its verdict, and extraction cases."""

    stored: StatedFact
    new: StatedFact
    answers: list[HeldOutAnswer] = []
    cases: list[Case] = []
    about: str = ""


class EvalSet(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    cases: list[Case]
    about: str = ""
    heldout: HeldOut | None = None


class EvalSetError(RunnerError, ValueError):
    """The set cannot be read or does not have the documented shape."""


def _check(evalset: EvalSet) -> None:
    seen: set[str] = set()
    heldout = evalset.heldout
    if heldout is not None:
        for fact in (heldout.stored, heldout.new):
            if fact.kind not in KINDS:
                raise EvalSetError(f"heldout: unknown fact kind {fact.kind!r}")
        old, new = _heldout_facts(heldout)
        if conflict_with(new, {old.key: old}) is None:
            raise EvalSetError("heldout: `new` does not contradict `stored`")
        for answer in heldout.answers:
            if answer.id in seen:
                raise EvalSetError(f"answer {answer.id!r}: the id is used twice")
            seen.add(answer.id)
    for case in [*evalset.cases, *(heldout.cases if heldout else [])]:
        where = f"case {case.id!r}"
        if case.id in seen:
            raise EvalSetError(f"{where}: the id is used twice")
        seen.add(case.id)
        for kind in [f.kind for f in case.facts] + [f.kind for f in case.stored]:
            if kind not in KINDS:
                raise EvalSetError(f"{where}: unknown fact kind {kind!r}")
        if case.stored and case.expect is None:
            raise EvalSetError(f"{where}: stored facts need an `expect`")
        if case.expect is None:
            continue
        conflicting = case.expect.outcome != "no_conflict"
        if conflicting and (case.answer is None or case.expect.key is None):
            raise EvalSetError(f"{where}: a conflict needs an `answer` and `expect.key`")
        if conflicting and not case.stored:
            raise EvalSetError(f"{where}: a conflict needs stored facts")


def _heldout_facts(heldout: HeldOut) -> tuple[Fact, Fact]:
    return (
        Fact(heldout.stored.kind, heldout.stored.value, 0.9, ""),
        Fact(heldout.new.kind, heldout.new.value, 0.9, _RUN),
    )


def load_evalset(path: Path = DEFAULT_SET) -> EvalSet:
    """The set at `path`, checked (EvalSetError naming what is wrong otherwise)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise EvalSetError(f"{path}: {exc.strerror or exc}") from exc
    try:
        evalset = msgspec.json.decode(raw, type=EvalSet)
    except msgspec.DecodeError as exc:
        raise EvalSetError(f"{path}: {exc}") from exc
    if evalset.version != 1:
        raise EvalSetError(f"{path}: version {evalset.version} is not 1")
    if not evalset.cases:
        raise EvalSetError(f"{path}: no cases")
    _check(evalset)
    return evalset


# -- running it ------------------------------------------------------------------------------


@dataclass
class CaseResult:
    id: str
    missed: list[str]  # expected facts not extracted ("kind=value (framing)")
    spurious: list[str]  # extracted facts not expected
    outcome: str | None = None  # the conflict handling's, for a case with `expect`
    expected: str | None = None
    correct: bool | None = None
    model_failed: list[str] = field(default_factory=list)  # steps whose model call failed


@dataclass
class Scores:
    """The set's figures: micro precision / recall over every case's facts (a fact counts
    when kind, value (case-insensitive) and framing all match), and the share of cases with
    stored facts whose conflict handling came out as expected."""

    results: list[CaseResult] = field(default_factory=list)
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0
    model_failures: int = 0
    heldout: HeldOutScores | None = None

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        expected = self.true_positives + self.false_negatives
        return self.true_positives / expected if expected else 1.0

    @property
    def conflict_cases(self) -> list[CaseResult]:
        return [r for r in self.results if r.correct is not None]

    @property
    def conflict_accuracy(self) -> float:
        cases = self.conflict_cases
        return sum(bool(r.correct) for r in cases) / len(cases) if cases else 1.0

    def report(self) -> str:
        """The figures, then each case that was not right."""
        cases = self.conflict_cases
        lines = [
            f"cases: {len(self.results)}",
            f"extraction precision: {self.precision:.3f}"
            f" ({self.true_positives} of {self.true_positives + self.false_positives})",
            f"extraction recall: {self.recall:.3f}"
            f" ({self.true_positives} of {self.true_positives + self.false_negatives})",
            f"conflict-handling accuracy: {self.conflict_accuracy:.3f}"
            f" ({sum(bool(r.correct) for r in cases)} of {len(cases)})",
            f"model calls failed: {self.model_failures}",
        ]
        if self.heldout is not None:
            lines += self.heldout.report_lines()
        for r in self.results:
            wrong = []
            if r.missed:
                wrong.append("missed " + ", ".join(r.missed))
            if r.spurious:
                wrong.append("extracted " + ", ".join(r.spurious))
            if r.correct is False:
                wrong.append(f"conflict: {r.outcome}, expected {r.expected}")
            if r.model_failed:
                wrong.append("model call failed: " + ", ".join(r.model_failed))
            if wrong:
                lines.append(f"  {r.id}: " + "; ".join(wrong))
        return "\n".join(lines)


@dataclass
class AnswerResult:
    id: str
    verdict: str  # what the assistant decided (fast path, then the classifier)
    expected: str  # the label
    decided_by: str
    graded: bool | None  # the grader's pass/fail of the assistant's verdict
    caught: bool  # a yes for this answer would be recorded as failed by the grader


@dataclass
class HeldOutScores:
    """The held-out section's figures: the confirmation's accuracy on the labelled answers
    (and how many were a yes the label is not: an update against the user), the grader's
    check of them, and extraction on phrasings outside the documented list."""

    answers: list[AnswerResult] = field(default_factory=list)
    extraction: Scores = field(default_factory=lambda: Scores())

    @property
    def confirmation_accuracy(self) -> float:
        right = sum(a.verdict == a.expected for a in self.answers)
        return right / len(self.answers) if self.answers else 1.0

    @property
    def wrong_yes(self) -> int:
        return sum(a.verdict == "yes" and a.expected != "yes" for a in self.answers)

    @property
    def not_yes(self) -> list[AnswerResult]:
        return [a for a in self.answers if a.expected != "yes"]

    @property
    def caught(self) -> int:
        return sum(a.caught for a in self.not_yes)

    @property
    def wrong_graded_passed(self) -> int:
        """Answers decided wrongly that the grader nevertheless passed."""
        return sum(a.verdict != a.expected and a.graded is True for a in self.answers)

    def report_lines(self) -> list[str]:
        right = sum(a.verdict == a.expected for a in self.answers)
        ext = self.extraction
        lines = [
            f"held-out confirmation accuracy: {self.confirmation_accuracy:.3f}"
            f" ({right} of {len(self.answers)}); yes where the answer was not: {self.wrong_yes}",
            f"held-out grader: a wrong yes recorded as failed for {self.caught} of"
            f" {len(self.not_yes)} answers; wrong verdicts passed: {self.wrong_graded_passed}",
            f"held-out extraction precision: {ext.precision:.3f}"
            f" ({ext.true_positives} of {ext.true_positives + ext.false_positives})",
            f"held-out extraction recall: {ext.recall:.3f}"
            f" ({ext.true_positives} of {ext.true_positives + ext.false_negatives})",
        ]
        for a in self.answers:
            if a.verdict != a.expected:
                lines.append(
                    f"  answer {a.id}: {a.verdict} ({a.decided_by}), expected {a.expected}"
                )
        for r in ext.results:
            if r.missed or r.spurious:
                wrong = [("missed " + ", ".join(r.missed)) if r.missed else ""]
                wrong.append(("extracted " + ", ".join(r.spurious)) if r.spurious else "")
                lines.append(f"  {r.id}: " + "; ".join(w for w in wrong if w))
        return lines


def _label(kind: str, value: str, how: str) -> str:
    return f"{kind}={value} ({how})"


async def _conflict_outcome(model: BaseChatModel, case: Case, facts: list[Fact]) -> str:
    """What the assistant does with `facts` against the case's stored ones: the outcome, and
    for a conflict its key and who decided the answer ("applied name fast_path")."""
    stored = {f.key: f for s in case.stored for f in [Fact(s.kind, s.value, s.confidence, "")]}
    for fact in facts:
        old = conflict_with(fact, stored)
        if old is None:
            continue
        if case.answer is None:
            return f"asked {fact.key}"  # a conflict where none was expected: unanswered
        request = confirmation_request(old, fact)
        answer = answer_text(request, case.answer)
        verdict, decided_by = fast_verdict(answer), "fast_path"
        if verdict == "unclear":
            question = str(request["action_requests"][0]["description"])
            verdict, decided_by = await classify_answer(model, question, answer), "classifier"
        outcome = {"yes": "applied", "no": "kept"}.get(verdict, "asked_again")
        return f"{outcome} {fact.key} {decided_by}"
    return "no_conflict"


def _expected_outcome(expect: Expect) -> str:
    if expect.outcome == "no_conflict":
        return "no_conflict"
    parts = [expect.outcome, expect.key or ""]
    return " ".join([*parts, expect.decided_by] if expect.decided_by else parts)


async def score_case(model: BaseChatModel, case: Case) -> CaseResult:
    facts = await extract_facts(model, case.says, _RUN)
    got = {(f.kind, f.value.casefold(), framing(f.confidence)): f for f in facts}
    want = {(f.kind, f.value.casefold(), f.framing): f for f in case.facts}
    result = CaseResult(
        case.id,
        missed=[_label(f.kind, f.value, f.framing) for key, f in want.items() if key not in got],
        spurious=[
            _label(f.kind, f.value, framing(f.confidence))
            for key, f in got.items()
            if key not in want
        ],
    )
    if case.expect is not None:
        outcome = await _conflict_outcome(model, case, facts)
        expected = _expected_outcome(case.expect)
        if case.expect.decided_by is None:
            outcome = " ".join(outcome.split()[:2])
        result.outcome, result.expected = outcome, expected
        result.correct = outcome == expected
    return result


async def _decide(model: BaseChatModel, request: dict[str, Any], value: Any) -> tuple[str, str]:
    """The assistant's verdict on one answer, as `confirm` reaches it, and who decided."""
    answer = answer_text(request, value)
    verdict, decided_by = fast_verdict(answer), "fast_path"
    if verdict == "unclear":
        question = str(request["action_requests"][0]["description"])
        verdict, decided_by = await classify_answer(model, question, answer), "classifier"
    return verdict, decided_by


async def score_answer(model: BaseChatModel, heldout: HeldOut, item: HeldOutAnswer) -> AnswerResult:
    """One labelled answer: the assistant's verdict, and the grader's grade of it and of a yes
    (a model judge with a model, as `grade` judges; the rules judge offline)."""
    old, new = _heldout_facts(heldout)
    request = confirmation_request(old, new)
    verdict, decided_by = await _decide(model, request, item.answer)
    answer = answer_text(request, item.answer)
    judged: tuple[Verdict, str] | None = None
    if not isinstance(model, EchoChatModel):
        record = {"key": new.key, "answer": answer}
        judged_verdict = await judge_with_model(model, record)
        judged = (judged_verdict, "model") if judged_verdict is not None else None

    def graded(as_verdict: str) -> bool | None:
        record = {"key": new.key, "answer": answer, "verdict": as_verdict, "by": decided_by}
        return grade_confirmation(0, record, judged).passed

    return AnswerResult(
        item.id, verdict, item.verdict, decided_by, graded(verdict), graded("yes") is False
    )


async def score_evalset(model: BaseChatModel, cases: Sequence[Case]) -> Scores:
    """Every case run with `model`, one after another, and the set's figures.

    Each case runs as a LangGraph entrypoint, as the steps do in the graph: a model call that
    fails is then shown as the graph shows it (`model_failed`), counted here, and the case
    scored as the assistant would go on (no facts; the answer unclear).
    """

    @entrypoint()
    async def run_case(index: int) -> CaseResult:
        return await score_case(model, cases[index])

    scores = Scores()
    for index, case in enumerate(cases):
        result: CaseResult | None = None
        failed: list[str] = []
        async for mode, chunk in run_case.astream(index, stream_mode=["custom", "values"]):
            if mode == "values" and isinstance(chunk, CaseResult):
                result = chunk
            elif isinstance(chunk, dict) and "memory" in chunk:
                failed.append(str(chunk["memory"].get("step", "")))
        if result is None:
            raise RuntimeError(f"case {case.id!r} gave no result")
        result.model_failed = failed
        scores.model_failures += len(failed)
        scores.results.append(result)
        matched = len(case.facts) - len(result.missed)
        scores.true_positives += matched
        scores.false_negatives += len(result.missed)
        scores.false_positives += len(result.spurious)
    return scores


async def score_heldout(model: BaseChatModel, heldout: HeldOut) -> HeldOutScores:
    """The held-out section's figures with `model` (each answer run as a LangGraph entrypoint,
    as `score_evalset` runs a case)."""

    @entrypoint()
    async def run_answer(index: int) -> AnswerResult:
        return await score_answer(model, heldout, heldout.answers[index])

    scores = HeldOutScores(extraction=await score_evalset(model, heldout.cases))
    for index in range(len(heldout.answers)):
        result: AnswerResult | None = None
        async for mode, chunk in run_answer.astream(index, stream_mode=["custom", "values"]):
            if mode == "values" and isinstance(chunk, AnswerResult):
                result = chunk
            elif isinstance(chunk, dict) and "memory" in chunk:
                scores.extraction.model_failures += 1
        if result is None:
            raise RuntimeError(f"answer {heldout.answers[index].id!r} gave no result")
        scores.answers.append(result)
    return scores


async def score_all(model: BaseChatModel, evalset: EvalSet) -> Scores:
    """The set's figures, and its held-out section's when it has one (`runstream eval`)."""
    scores = await score_evalset(model, evalset.cases)
    if evalset.heldout is not None:
        scores.heldout = await score_heldout(model, evalset.heldout)
        scores.model_failures += scores.heldout.extraction.model_failures
    return scores


def _heldout_json(heldout: HeldOutScores | None) -> dict[str, Any] | None:
    if heldout is None:
        return None
    ext = heldout.extraction
    return {
        "confirmation_accuracy": heldout.confirmation_accuracy,
        "answers": len(heldout.answers),
        "wrong_yes": heldout.wrong_yes,
        "grader_caught": heldout.caught,
        "grader_caught_of": len(heldout.not_yes),
        "grader_passed_wrong": heldout.wrong_graded_passed,
        "precision": ext.precision,
        "recall": ext.recall,
        "cases": len(ext.results),
        "wrong_answers": [
            {"id": a.id, "verdict": a.verdict, "expected": a.expected, "by": a.decided_by}
            for a in heldout.answers
            if a.verdict != a.expected
        ],
        "wrong": [
            {"id": r.id, "missed": r.missed, "extracted": r.spurious}
            for r in ext.results
            if r.missed or r.spurious
        ],
    }


def as_json(scores: Scores) -> str:
    """The figures and the cases that were not right, as JSON (`runstream eval --json`)."""
    return json.dumps(
        {
            "heldout": _heldout_json(scores.heldout),
            "precision": scores.precision,
            "recall": scores.recall,
            "conflict_accuracy": scores.conflict_accuracy,
            "cases": len(scores.results),
            "model_failures": scores.model_failures,
            "wrong": [
                {
                    "id": r.id,
                    "missed": r.missed,
                    "extracted": r.spurious,
                    "conflict": r.outcome,
                    "expected": r.expected,
                }
                for r in scores.results
                if r.missed or r.spurious or r.correct is False
            ],
        }
    )
