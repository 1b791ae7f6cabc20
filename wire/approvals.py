"""Human review of tool calls: the interrupt a graph raises and the answer that resumes it.

The shape is LangChain v1's human-in-the-loop middleware's (`HITLRequest` / `HITLResponse` in
`langchain.agents.middleware.human_in_the_loop`), because that is what agent-chat-ui draws
Approve / Edit / Reject for. The built-in `approval` graph asks with it, runstream's web page
and `runstream chat` answer it. `{"approve": true | false}`, the answer the `approval` graph took
before, is still read: it approves or rejects every call.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "Action",
    "ActionRequest",
    "ApproveDecision",
    "BadAnswer",
    "Decision",
    "DecisionType",
    "EditDecision",
    "HITLRequest",
    "HITLResponse",
    "RejectDecision",
    "ReviewConfig",
    "is_review_request",
    "read_answer",
    "request_value",
]

DecisionType = Literal["approve", "edit", "reject"]


class Action(msgspec.Struct):
    """A tool call as a reviewer sees or rewrites it."""

    name: str
    args: dict[str, Any]


class ActionRequest(msgspec.Struct, omit_defaults=True):
    """One proposed tool call to review."""

    name: str
    args: dict[str, Any]
    description: str | None = None


class ReviewConfig(msgspec.Struct):
    """What a reviewer may decide about the calls of tool `action_name`."""

    action_name: str
    allowed_decisions: list[DecisionType]


class HITLRequest(msgspec.Struct):
    """The interrupt's value: the calls of one model turn, and what may be decided on each."""

    action_requests: list[ActionRequest]
    review_configs: list[ReviewConfig]


class ApproveDecision(msgspec.Struct, tag_field="type", tag="approve"):
    """Run the call as proposed."""


class EditDecision(msgspec.Struct, tag_field="type", tag="edit"):
    """Run the call with the reviewer's arguments instead."""

    edited_action: Action


class RejectDecision(msgspec.Struct, tag_field="type", tag="reject", omit_defaults=True):
    """Do not run the call; `message` (the reviewer's reason) goes back to the model."""

    message: str | None = None


Decision = ApproveDecision | EditDecision | RejectDecision


class HITLResponse(msgspec.Struct):
    """The resume value: one decision per action request, in their order."""

    decisions: list[Decision]


class _ApproveAll(msgspec.Struct):
    """The older answer: `true` approves every call, `false` rejects every call."""

    approve: bool


class BadAnswer(ValueError):
    """A resume value that does not answer the review request; the message says why."""


def _as_json(obj: Any) -> Any:
    # A `str` subclass in a call's arguments (LangChain's `TextAccessor`, from `message.text`)
    if isinstance(obj, str):
        return str(obj)
    raise NotImplementedError(f"{type(obj).__name__} is not a JSON type")


def request_value(request: HITLRequest) -> dict[str, Any]:
    """`request` as the interrupt's value: plain JSON types, as clients and checkpoints take it."""
    value: dict[str, Any] = msgspec.to_builtins(request, enc_hook=_as_json)
    return value


def is_review_request(value: Any) -> bool:
    """Whether an interrupt value is a `HITLRequest` (as agent-chat-ui checks it)."""
    try:
        request = msgspec.convert(value, HITLRequest)
    except (msgspec.ValidationError, TypeError):
        return False
    return bool(request.action_requests and request.review_configs)


def _allowed(request: HITLRequest, index: int) -> list[DecisionType]:
    name = request.action_requests[index].name
    for config in request.review_configs:
        if config.action_name == name:
            return config.allowed_decisions
    return []


def read_answer(request: HITLRequest, value: Any) -> list[Decision]:
    """The decisions a resume value makes, one per action request of `request`.

    Raises:
        BadAnswer: `value` is neither `{"decisions": [...]}` nor `{"approve": bool}`, has a
            decision count other than the requests', or a decision its review config does not
            allow (or an edit naming another tool).
    """
    count = len(request.action_requests)
    try:
        legacy = msgspec.convert(value, _ApproveAll)
    except msgspec.ValidationError:
        pass
    else:
        every: Decision = ApproveDecision() if legacy.approve else RejectDecision()
        return [every] * count
    try:
        decisions = msgspec.convert(value, HITLResponse).decisions
    except msgspec.ValidationError as error:
        raise BadAnswer(
            f'the resume value must be {{"decisions": [...]}}, one decision per proposed call'
            f' ({{"type": "approve"}}, {{"type": "edit", "edited_action": {{"name", "args"}}}}'
            f' or {{"type": "reject", "message"?}}): {error}'
        ) from None
    if len(decisions) != count:
        raise BadAnswer(
            f"the resume value has {len(decisions)} decisions for {count} proposed calls"
        )
    for index, decision in enumerate(decisions):
        kind = type(decision).__struct_config__.tag
        action = request.action_requests[index]
        if kind not in _allowed(request, index):
            raise BadAnswer(f"decision {index} ({kind}) is not allowed for {action.name}")
        if isinstance(decision, EditDecision) and decision.edited_action.name != action.name:
            raise BadAnswer(
                f"decision {index} edits {action.name} into another tool"
                f" ({decision.edited_action.name}), which is not allowed"
            )
    return decisions
