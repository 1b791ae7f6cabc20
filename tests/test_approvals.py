"""The review request and its answer (`wire.approvals`), read as LangChain's
human-in-the-loop middleware reads them: one decision per proposed call, in order."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from wire.approvals import (
    Action,
    ActionRequest,
    ApproveDecision,
    BadAnswer,
    EditDecision,
    HITLRequest,
    RejectDecision,
    ReviewConfig,
    is_review_request,
    read_answer,
    request_value,
)

TWO_CALLS = HITLRequest(
    action_requests=[
        ActionRequest(name="save_note", args={"content": "a"}),
        ActionRequest(name="send_mail", args={"to": "b"}),
    ],
    review_configs=[
        ReviewConfig(action_name="save_note", allowed_decisions=["approve", "edit", "reject"]),
        ReviewConfig(action_name="send_mail", allowed_decisions=["approve", "reject"]),
    ],
)


def test_decisions_are_read_in_the_calls_order() -> None:
    edit = {"type": "edit", "edited_action": {"name": "save_note", "args": {"content": "c"}}}
    answer = {"decisions": [edit, {"type": "reject", "message": "no"}]}
    assert read_answer(TWO_CALLS, answer) == [
        EditDecision(edited_action=Action(name="save_note", args={"content": "c"})),
        RejectDecision(message="no"),
    ]


@pytest.mark.parametrize(
    ("approve", "every"), [(True, ApproveDecision()), (False, RejectDecision())]
)
def test_the_older_answer_decides_every_call(approve: bool, every: Any) -> None:
    assert read_answer(TWO_CALLS, {"approve": approve}) == [every, every]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"decisions": [{"type": "approve"}]}, "1 decisions for 2 proposed calls"),
        ({"decisions": [{"type": "approve"}, {"type": "edit"}]}, "must be"),
        (
            {
                "decisions": [
                    {"type": "approve"},
                    {"type": "edit", "edited_action": {"name": "send_mail", "args": {}}},
                ]
            },
            "decision 1 (edit) is not allowed for send_mail",
        ),
        (
            {
                "decisions": [
                    {"type": "edit", "edited_action": {"name": "rm", "args": {}}},
                    {"type": "approve"},
                ]
            },
            "edits save_note into another tool (rm)",
        ),
        ({"decisions": [{"type": "respond", "message": "x"}] * 2}, "Invalid value 'respond'"),
        ({"approve": "yes"}, "must be"),
        ([{"type": "accept", "args": None}], "must be"),  # langgraph.prebuilt's HumanResponse
        (None, "must be"),
    ],
)
def test_an_answer_that_is_not_one_says_why(answer: Any, why: str) -> None:
    with pytest.raises(BadAnswer) as caught:
        read_answer(TWO_CALLS, answer)
    assert why in str(caught.value)


def test_a_review_request_is_told_from_other_interrupt_values() -> None:
    assert is_review_request(msgspec.to_builtins(TWO_CALLS))
    assert not is_review_request({"action_requests": [], "review_configs": []})
    assert not is_review_request({"question": "ok?"})
    assert not is_review_request("ok?")


def test_the_interrupt_value_is_plain_json_whatever_str_the_arguments_hold() -> None:
    class Text(str):  # as LangChain's `message.text` (TextAccessor) is
        pass

    request = HITLRequest(
        action_requests=[ActionRequest(name="save_note", args={"content": Text("a")})],
        review_configs=[ReviewConfig(action_name="save_note", allowed_decisions=["approve"])],
    )
    value = request_value(request)
    assert value == {
        "action_requests": [{"name": "save_note", "args": {"content": "a"}}],
        "review_configs": [{"action_name": "save_note", "allowed_decisions": ["approve"]}],
    }
    assert type(value["action_requests"][0]["args"]["content"]) is str
