"""The conversation summary: past a thread's message threshold, the older messages are folded
into a summary kept in the thread's state and removed from it (`RemoveMessage`), the most recent
kept verbatim, so the model's input stays bounded however long the thread grows.

Offline the summary is deterministic (a line per older message, the latest `SUMMARY_LINES`
kept); with a model it is a call, tagged `nostream` so its tokens are not the answer's.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

__all__ = ["MAX_SUMMARY_CHARS", "SUMMARY_LINES", "SUMMARY_PROMPT", "rule_summary", "transcript"]

SUMMARY_LINES = 12
MAX_SUMMARY_CHARS = 2000  # a model's summary is cut there: the prompt stays bounded
_LINE_CHARS = 140

SUMMARY_PROMPT = (
    "Update the summary of a conversation between a user and an assistant with the messages"
    " below. Keep what matters for the rest of the conversation (topics, decisions, open"
    " questions), at most 150 words. Answer with the summary only.\n\n"
    "Summary so far:\n{summary}\n\nMessages:\n{transcript}"
)


def _speaker(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    return message.type


def _line(message: BaseMessage) -> str:
    text = " ".join(message.text.split())
    if len(text) > _LINE_CHARS:
        text = text[: _LINE_CHARS - 3] + "..."
    return f"{_speaker(message)}: {text}"


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The messages one line each, as a summary call reads them."""
    return "\n".join(_line(m) for m in messages)


def rule_summary(previous: str, folded: Sequence[BaseMessage]) -> str:
    """The offline summary: the previous one's lines and one per folded message, the latest
    `SUMMARY_LINES` kept (so its size is bounded whatever the thread's length)."""
    lines = [line for line in previous.splitlines() if line.strip()]
    lines += [_line(m) for m in folded if m.text.strip()]
    return "\n".join(lines[-SUMMARY_LINES:])
