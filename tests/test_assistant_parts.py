"""The memory-aware assistant's pure parts (runner/assistant): the offline extraction rules,
conflicts, framing by confidence, the yes/no fast path and classifier rule, the summary's bound
and the deterministic graders. The graph itself is driven through the API in
tests/test_assistant.py."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda

from project.langgraph_json import load_project
from runner.assistant.confirmation import (
    Classification,
    Judgement,
    answer_text,
    confirmation_request,
    fast_verdict,
    never_yes,
    rule_verdict,
)
from runner.assistant.facts import (
    ExtractedFact,
    Extraction,
    Fact,
    conflict_with,
    framing,
    model_facts,
    rule_facts,
)
from runner.assistant.grading import (
    grade_confirmation,
    grade_extraction,
    grade_reply,
    judge_answer,
)
from runner.assistant.graph import (
    AssistantContext,
    classify_answer,
    conflict_problems,
    expired_message,
    extract_facts,
    judge_with_model,
    memory_prompt,
    offline_reply,
    turn_grades,
)
from runner.assistant.summary import MAX_SUMMARY_CHARS, SUMMARY_LINES, rule_summary
from runner.models import EchoChatModel
from tests.processes import ROOT


def found(text: str) -> list[tuple[str, str, float]]:
    return [(f.kind, f.value, f.confidence) for f in rule_facts(text, "run-1")]


class TestRuleExtraction:
    @pytest.mark.parametrize(
        ("text", "facts"),
        [
            (
                "Hi, my name is Ann and I live in Paris.",
                [("name", "Ann", 0.9), ("location", "Paris", 0.9)],
            ),
            ("call me Al", [("name", "Al", 0.9)]),
            ("I moved to New York last year", [("location", "New York", 0.9)]),
            ("I work as a nurse", [("occupation", "nurse", 0.9)]),
            ("I am 42 years old", [("age", "42", 0.9)]),
            (
                "I like green tea. I don't like olives!",
                [("likes", "green tea", 0.9), ("dislikes", "olives", 0.9)],
            ),
            (
                "I really love jazz, but I hate rain",
                [("likes", "jazz", 0.9), ("dislikes", "rain", 0.9)],
            ),
            ("I do not like mondays", [("dislikes", "mondays", 0.9)]),
            ("I think I live in Berlin", [("location", "Berlin", 0.6)]),
            ("remember that my cat is called Tom", [("note", "my cat is called Tom", 0.9)]),
            ("What is my name? Do you like jazz?", []),
        ],
    )
    def test_the_documented_phrasings(self, text: str, facts: list[tuple[str, str, float]]) -> None:
        assert found(text) == facts

    @pytest.mark.parametrize(
        ("text", "facts"),
        [
            ("I'm Priya and I'm from Porto", [("name", "Priya", 0.9), ("location", "Porto", 0.9)]),
            ("I'm 41", [("age", "41", 0.9)]),
            ("I kind of like techno", [("likes", "techno", 0.6)]),
            ("I really don't like cilantro", [("dislikes", "cilantro", 0.9)]),
            ("I think I might move to Lisbon", [("location", "Lisbon", 0.3)]),
            ("I suppose I live in Braga", [("location", "Braga", 0.6)]),
            ("I live in Faro now.", [("location", "Faro", 0.9)]),
            ("I moved to Braga in the spring.", [("location", "Braga", 0.9)]),
            ("I've lived in Oslo since 2019.", [("location", "Oslo", 0.9)]),
            (
                "My name's Kenji. I'm a software engineer.",
                [("name", "Kenji", 0.9), ("occupation", "software engineer", 0.9)],
            ),
            (
                "I can't stand loud music, I enjoy swimming",
                [("dislikes", "loud music", 0.9), ("likes", "swimming", 0.9)],
            ),
            (
                "remember that my sister's birthday is in May",
                [("note", "my sister's birthday is in May", 0.9)],
            ),
            ("I'm tired today. I'm 5 minutes away. I'm a bit lost.", []),
            ("I'm going to the gym. I might go to Rome for a weekend.", []),
            ("Would I like Paris? Can you call me a taxi?", []),
        ],
    )
    def test_phrasings_past_the_first_list_hedges_and_clause_ends(
        self, text: str, facts: list[tuple[str, str, float]]
    ) -> None:
        """Issue 33: these stored nothing, a hedge's confidence, or a value running on."""
        assert found(text) == facts

    def test_the_last_statement_of_a_key_wins_and_facts_name_their_run(self) -> None:
        facts = rule_facts("My name is Ann. No wait, my name is Anna.", "run-7")
        assert [(f.key, f.value, f.source_run) for f in facts] == [("name", "Anna", "run-7")]

    def test_a_models_answer_is_cleaned_and_deduplicated(self) -> None:
        answer = Extraction(
            facts=[
                ExtractedFact(kind="likes", value=" Jazz ", confidence=0.8),
                ExtractedFact(kind="likes", value="jazz", confidence=0.9),
                ExtractedFact(kind="note", value="  ", confidence=0.9),
            ]
        )
        facts = model_facts(answer, "run-1")
        assert [(f.key, f.value, f.confidence) for f in facts] == [("likes:jazz", "jazz", 0.9)]


def test_a_stored_item_that_is_not_a_fact_is_left_out() -> None:
    assert Fact.read(Fact("name", "Ann", 0.9, "r").as_value()) == Fact("name", "Ann", 0.9, "r")
    for value in (
        {"text": "mine"},
        {"kind": "name", "value": ""},
        {"kind": "x", "value": "v", "confidence": "high"},
        {"kind": "x", "value": "v", "confidence": 3},
        None,
    ):
        assert Fact.read(value) is None


class TestConflicts:
    stored = {
        "name": Fact("name", "Ann", 0.9, "r1"),
        "dislikes:olives": Fact("dislikes", "olives", 0.9, "r1"),
        "likes:jazz": Fact("likes", "jazz", 0.9, "r1"),
    }

    def test_another_value_of_a_single_kind_or_the_opposite_like_conflicts(self) -> None:
        assert conflict_with(Fact("name", "Bob", 0.9, "r2"), self.stored) == self.stored["name"]
        olives = Fact("likes", "Olives", 0.9, "r2")
        assert conflict_with(olives, self.stored) == self.stored["dislikes:olives"]

    def test_the_same_value_a_new_key_or_a_note_does_not(self) -> None:
        assert conflict_with(Fact("name", " ann ", 0.9, "r2"), self.stored) is None
        assert conflict_with(Fact("location", "Paris", 0.9, "r2"), self.stored) is None
        assert conflict_with(Fact("likes", "jazz", 0.9, "r2"), self.stored) is None
        assert conflict_with(Fact("note", "anything", 0.9, "r2"), self.stored) is None

    def test_a_pending_conflict_is_asked_only_as_extract_stages_it(self) -> None:
        """`pending` is state its thread's owner can write: what `confirm` will not ask."""
        ann, bob = Fact("name", "Ann", 0.9, "r1"), Fact("name", "Bob", 0.9, "r2")

        def staged(was: Fact, new: Fact, **changes: Any) -> dict[str, Any]:
            conflict = {"id": "r2:name", "key": new.key, "staged_at": 1.0}
            return {**conflict, "old": was.as_value(), "new": new.as_value(), **changes}

        assert conflict_problems(staged(ann, bob)) == []
        olives = Fact("likes", "olives", 0.9, "r2")
        assert conflict_problems(staged(self.stored["dislikes:olives"], olives)) == []
        assert conflict_problems(staged(ann, Fact("name", "B" * 121, 0.9, "r2"))) == [
            "value too long"
        ]
        assert conflict_problems(staged(ann, Fact("name", "B" * 120, 0.9, "r2"))) == []
        assert conflict_problems(staged(ann, Fact("shoe", "x", 0.9, "r2"), key="shoe")) == [
            "unknown kind 'shoe'"
        ]
        unrelated = "not a contradiction of the old value"
        assert conflict_problems(staged(ann, Fact("name", "ann", 0.9, "r2"))) == [unrelated]
        assert conflict_problems(staged(ann, Fact("location", "Oslo", 0.9, "r2"))) == [unrelated]
        assert conflict_problems(staged(ann, bob, key="location")) == [unrelated]
        no_old = {**staged(ann, bob), "old": {}}
        for malformed in ("x", {}, staged(ann, bob, staged_at="1"), no_old):
            assert conflict_problems(malformed) == ["not a staged conflict"]


class TestPrompt:
    def test_facts_are_framed_by_confidence(self) -> None:
        assert [framing(c) for c in (0.95, 0.8, 0.6, 0.5, 0.3)] == [
            "stated",
            "stated",
            "likely",
            "likely",
            "uncertain",
        ]
        facts = [
            Fact("name", "Ann", 0.9, "r"),
            Fact("location", "Paris", 0.6, "r"),
            Fact("likes", "jazz", 0.3, "r"),
        ]
        prompt = memory_prompt(facts, "user: hello")
        assert "- the user stated that their name is Ann" in prompt
        assert "- probably they live in Paris" in prompt
        assert "- perhaps they like jazz (uncertain: ask before relying on it)" in prompt
        assert prompt.endswith("Summary of the earlier conversation:\nuser: hello")
        reply = offline_reply(facts, "hi")
        assert reply == (
            "I remember that your name is Ann; you live in Paris (likely); you like jazz"
            " (uncertain). You said: hi"
        )

    def test_the_summary_keeps_its_latest_lines_only(self) -> None:
        summary = ""
        for index in range(50):
            summary = rule_summary(
                summary, [HumanMessage(f"n{index} " + "x" * 500), AIMessage("ok")]
            )
        lines = summary.splitlines()
        assert len(lines) == SUMMARY_LINES and lines[-1] == "assistant: ok"
        assert lines[-2].startswith("user: n49 ") and lines[-2].endswith("...")
        assert len(summary) < MAX_SUMMARY_CHARS

    def test_a_context_with_thresholds_that_cannot_work_is_refused(self) -> None:
        assert AssistantContext().summary_after > AssistantContext().keep_recent
        for bad in (
            {"summary_after": 4, "keep_recent": 8},
            {"keep_recent": 1},
            {"conflict_ttl_s": 0},
            {"recalled_facts": 0},
        ):
            with pytest.raises(ValueError):
                AssistantContext(**bad)  # type: ignore[arg-type]


class TestAnswers:
    @pytest.mark.parametrize(
        ("text", "fast", "rule"),
        [
            ("yes", "yes", "yes"),
            ("Y!", "yes", "yes"),
            ("yeah", "yes", "yes"),
            ("Correct.", "yes", "yes"),
            ("that's right", "yes", "yes"),
            ("no", "no", "no"),
            ("Nope.", "no", "no"),
            ("no, it's still Paris", "unclear", "no"),
            ("I moved last month", "unclear", "yes"),
            ("that was a typo", "unclear", "no"),
            ("hmm, let me think", "unclear", "unclear"),
            ("", "unclear", "unclear"),
        ],
    )
    def test_fast_path_then_classifier_rule(self, text: str, fast: str, rule: str) -> None:
        assert fast_verdict(text) == fast
        assert rule_verdict(text) == rule

    @pytest.mark.parametrize(
        ("text", "verdict"),
        [
            ("please don't update it", "no"),
            ("Absolutely not.", "no"),
            ("Not now", "no"),
            ("of course not", "no"),
            ("I'd rather not", "no"),
            ("don't", "no"),
            ("no way", "no"),
            ("not yet", "no"),
            ("Sure, but not now", "no"),
            ("Yes... actually no, don't.", "no"),
            ("Update it now? Please don't.", "no"),
            ("I don\u2019t think so", "no"),
            ("hmm", "unclear"),
            ("maybe", "unclear"),
            ("I'm not sure", "unclear"),
            ("let me think about it, update later", "unclear"),
            ("I wouldn't say no", "unclear"),
            ("It's not wrong", "unclear"),
            ("not no", "unclear"),
            ("Don't keep the old one", "unclear"),
            ("yes?", "unclear"),
        ],
    )
    async def test_a_negation_refusal_deferral_or_hedge_is_never_a_yes(
        self, text: str, verdict: str
    ) -> None:
        """Issue 33: "please don't update it", "Absolutely not." and "Not now" were a yes (the
        first word, "update" / "now" anywhere); the fast path and the rules now fail safe."""
        assert fast_verdict(text) != "yes"
        assert rule_verdict(text) == verdict
        assert await classify_answer(EchoChatModel(), "Update it?", text) == verdict
        assert never_yes(text) is not None

    async def test_a_models_yes_to_such_an_answer_asks_again(self) -> None:
        model = scripted(Classification(verdict="yes"), Classification(verdict="yes"))
        assert await classify_answer(model, "Update it?", "please don't update it") == "unclear"
        assert await classify_answer(model, "Update it?", "I moved there in May") == "yes"

    def test_a_decision_or_text_is_read(self) -> None:
        request = confirmation_request(Fact("name", "Ann", 0.9, "r"), Fact("name", "Bob", 0.9, "s"))
        assert answer_text(request, {"decisions": [{"type": "approve"}]}) == "yes"
        assert answer_text(request, {"decisions": [{"type": "reject", "message": "ok"}]}) == "no"
        assert answer_text(request, {"approve": True}) == "yes"
        assert answer_text(request, "sure thing") == "sure thing"
        assert answer_text(request, {"decisions": [{"type": "edit"}]}).startswith("{")


class TestGraders:
    def test_a_reply_must_say_something_other_than_the_prompt(self) -> None:
        assert grade_reply("hi", "Hello! You said: hi").passed
        echoed = grade_reply("What is my name?", "  what is my   NAME? ")
        assert (echoed.passed, echoed.score, echoed.detail["problems"]) == (
            False,
            0.0,
            ["echoes the prompt"],
        )
        assert grade_reply("hi", " ").detail["problems"] == ["empty"]

    def test_extracted_facts_must_be_well_formed(self) -> None:
        good = Fact("name", "Ann", 0.9, "r").as_value()
        assert grade_extraction([]).passed and grade_extraction([good]).score == 1.0
        bad = [good, {"kind": "shoe", "value": "", "confidence": 2, "source_run": ""}, "x"]
        graded = grade_extraction(bad)
        assert (graded.passed, graded.score) == (False, 0.333)
        assert graded.detail["problems"] == {
            "1": [
                "unknown kind 'shoe'",
                "empty value",
                "confidence out of [0, 1]",
                "no source run",
            ],
            "2": ["not an object"],
        }

    def test_a_confirmation_is_graded_by_a_judge_that_is_not_the_classifier(self) -> None:
        """Issue 33: the grade compared the verdict with the classifier's own rules, so
        "please don't update it" read as yes was graded 1.0, passed. The judge is another
        reader: a wrong verdict is failed, whoever made it (the fast path too)."""

        def graded(
            answer: str, verdict: str, by: str = "classifier", judged: Any = None
        ) -> tuple[float, bool | None, str, str]:
            record = {"key": "occupation", "answer": answer, "verdict": verdict, "by": by}
            found = grade_confirmation(2, record, judged)
            assert found.kind == "confirmation" and found.key == "confirmation:2"
            assert (found.detail["verdict"], found.detail["by"]) == (verdict, by)
            return found.score, found.passed, found.detail["expected"], found.detail["judge"]

        for refused in ("please don't update it", "Absolutely not.", "Not now", "not yet"):
            assert graded(refused, "yes") == (0.0, False, "no", "rules")
            assert graded(refused, "no") == (1.0, True, "no", "rules")
        assert graded("I wouldn't say no", "yes") == (0.0, False, "unclear", "rules")
        assert graded("I wouldn't say no", "unclear") == (1.0, True, "unclear", "rules")
        assert graded("Yes!", "yes", "fast_path") == (1.0, True, "yes", "rules")
        assert graded("I moved there last month", "yes") == (1.0, True, "yes", "rules")
        assert graded("I moved there last month", "no") == (0.0, False, "yes", "rules")
        assert graded("No, I still live in Paris", "yes") == (0.0, False, "no", "rules")
        assert graded("I moved there last month", "unclear") == (0.5, None, "yes", "rules")
        # a model judge's reading, when there is one, is the reference
        assert graded("whatever", "yes", judged=("no", "model")) == (0.0, False, "no", "model")

    @pytest.mark.parametrize(
        ("text", "verdict"),
        [
            ("please don't update it", "no"),
            ("Absolutely not.", "no"),
            ("Not now", "no"),
            ("of course not", "no"),
            ("I'd rather not", "no"),
            ("no way", "no"),
            ("Nope, leave it", "no"),
            ("hmm", "unclear"),
            ("It isn't untrue", "unclear"),
            ("I can hardly say no", "unclear"),
            ("Why?", "unclear"),
            ("yes", "yes"),
            ("Sure, I switched jobs", "yes"),
            ("I changed my mind about them", "yes"),
        ],
    )
    def test_the_judge_reads_answers_on_its_own(self, text: str, verdict: str) -> None:
        assert judge_answer(text) == verdict

    def test_a_turn_is_graded_on_what_it_did(self) -> None:
        grades = turn_grades({"prompt": "hi", "reply": "hi", "extracted": []})
        assert [(g.kind, g.key, g.passed) for g in grades] == [
            ("reply", "reply", False),
            ("extraction", "extraction", True),
        ]
        assert turn_grades({}) == []  # a resume that only confirmed: nothing of a reply to grade
        confirmed = {
            "confirmations": [
                {"key": "name", "answer": "Absolutely not.", "verdict": "yes", "by": "classifier"}
            ]
        }
        assert [g.passed for g in turn_grades(confirmed)] == [False]
        assert [g.passed for g in turn_grades(confirmed, [("yes", "model")])] == [True]

    def test_a_late_answer_is_told_the_question_expired_and_what_was_kept(self) -> None:
        ann, bob = Fact("name", "Ann", 0.9, "r1"), Fact("name", "Bob", 0.9, "r2")
        paris = Fact("location", "Paris", 0.9, "r1")
        expired = [{"old": ann.as_value(), "new": bob.as_value()}, {"old": paris.as_value()}]
        assert expired_message(expired) == (
            "That question expired before your answer, so nothing was changed. Kept: your name"
            " is Ann; you live in Paris."
        )


class ScriptedModel(GenericFakeChatModel):
    """A stand-in for a real model: `with_structured_output` answers with scripted objects
    (recording the messages it was asked with), so the real-model branches run offline."""

    messages: Any = iter(())
    answers: list[Any] = []
    asked: list[Any] = []

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        assert kwargs.get("method") == "function_calling"

        def answer(messages: Any) -> Any:
            self.asked.append(messages)
            value = self.answers.pop(0)
            assert isinstance(value, schema)
            return value

        return RunnableLambda(answer)


def scripted(*answers: Any) -> ScriptedModel:
    return ScriptedModel(answers=list(answers), asked=[])


class TestWithAModel:
    async def test_extraction_is_the_models_structured_answer(self) -> None:
        model = scripted(
            Extraction(facts=[ExtractedFact(kind="location", value="Lisbon", confidence=0.7)])
        )
        facts = await extract_facts(model, "we settled in Lisbon", "run-3")
        assert [(f.key, f.value, f.confidence, f.source_run) for f in facts] == [
            ("location", "Lisbon", 0.7, "run-3")
        ]
        assert model.asked[0][-1].content == "we settled in Lisbon"

    async def test_a_model_judges_a_confirmation_with_its_own_prompt(self) -> None:
        model = scripted(Judgement(verdict="no"))
        record = {"key": "occupation", "answer": "Absolutely not."}
        assert await judge_with_model(model, record) == "no"
        assert "Absolutely not." in model.asked[0][0].content
        assert "strictly" in model.asked[0][0].content

    async def test_an_ambiguous_answer_is_classified_by_the_model(self) -> None:
        model = scripted(Classification(verdict="no"))
        verdict = await classify_answer(model, "Update it?", "it's complicated")
        assert verdict == "no"
        assert "it's complicated" in model.asked[0][0].content


@pytest.mark.slow
def test_the_wheel_ships_the_assistants_project(tmp_path: Path) -> None:
    """`runstream up --config <site-packages>/runner/assistant/langgraph.json` works from an
    installed wheel: the project file is in it beside the graph's modules."""
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("runstream-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"runner/assistant/langgraph.json", "runner/assistant/graph.py"} <= names
    project = load_project(ROOT / "runner" / "assistant" / "langgraph.json")
    assert project.graphs["assistant"].module == "runner.assistant.graph"
