"""A LangGraph run's `input`, checked against its graph's input schema before anything is
recorded, and the form the worker gets it in (runner/graph_input.py).

LangGraph's server hands `input` to the graph unchecked (langgraph_api/stream.py): a key the
graph does not know is dropped without a word, a message LangChain cannot read fails inside
the run. Here both are a 422 at submit, naming the key or the message. Required keys that are
missing are LangGraph's business, as on its server: the graph runs with what it was given (a
node that reads a missing key fails the run). Messages, under any key whose channel reduces
with `add_messages` or whose type holds LangChain messages, are checked as `/v1` checks its own
(text content, the message count and size bounds) and get their ids now: every attempt of the
run then sends the same messages, which the reducer replaces instead of adding twice.
"""

from __future__ import annotations

import typing
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.graph.message import add_messages
from langgraph.pregel import Pregel

from server import inputs
from server.access.new_runs import with_message_id
from server.errors import ApiError
from stream_store.settings import Settings

from .conversions import engine_messages

__all__ = ["checked_input", "input_keys"]


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def _mentions_messages(hint: Any) -> bool:
    """Whether a type annotation holds LangChain messages (`list[AnyMessage]`, ...)."""
    if isinstance(hint, type) and issubclass(hint, BaseMessage):
        return True
    return any(_mentions_messages(arg) for arg in typing.get_args(hint))


def input_keys(graph: Pregel) -> dict[str, bool] | None:
    """The keys of `graph`'s input schema, each with whether it holds messages; None for a
    graph not built by a StateGraph (then any key is taken, `messages` as messages)."""
    builder = getattr(graph, "builder", None)
    schema = getattr(builder, "input_schema", None)
    channels = getattr(builder, "schemas", {}).get(schema) if schema is not None else None
    if not isinstance(channels, dict):
        return None
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception:  # an annotation that does not resolve: judge by the reducer alone
        hints = {}
    return {
        key: getattr(channel, "operator", None) is add_messages
        or _mentions_messages(hints.get(key))
        for key, channel in channels.items()
    }


def _text_content(content: Any, where: str) -> str:
    """A message's text: runstream takes text, given as a string or text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content
    ):
        return "".join(b["text"] for b in content)
    raise _unprocessable(f"{where}.content must be text (a string, or blocks of type 'text')")


def _messages(value: Any, key: str, settings: Settings) -> list[dict[str, Any]]:
    """The messages given under `key`, as runstream input messages with ids, in bounds."""
    where = f"input.{key}"
    try:
        messages = engine_messages(value, where)
    except ValueError as exc:
        raise _unprocessable(str(exc)) from None
    for index, message in enumerate(messages):
        message["content"] = _text_content(message["content"], f"{where}[{index}]")
        if not message["content"] and message["role"] != "tool" and not message.get("tool_calls"):
            raise _unprocessable(f"{where}[{index}].content is empty")
        with_message_id(message)
    inputs.message_texts([m["content"] for m in messages], settings, where)
    return messages


def checked_input(
    value: Any, graph: Pregel, settings: Settings, *, needs_input: bool
) -> dict[str, Any]:
    """The run's input as the worker gets it: the keys given, messages in runstream's form.

    `null` is no input: LangGraph's for a resume, a command, or re-running from a checkpoint;
    `needs_input` says the run has none of those, so the input must give something.

    Raises:
        ApiError: 422 for input that is not an object, a key the graph's input does not take,
            a message runstream cannot take, or nothing to run with; 413 past the bounds.
    """
    if value is not None and not isinstance(value, dict):
        raise _unprocessable("input must be an object of the graph's input keys, or null")
    given = value or {}
    keys = input_keys(graph)
    if keys is None:
        keys = {key: key == "messages" for key in given}
    if unknown := [key for key in given if key not in keys]:
        raise _unprocessable(
            f"input: the graph's input has no key {', '.join(map(repr, unknown))};"
            f" it takes {', '.join(keys)}"
        )
    checked = {
        key: _messages(item, key, settings) if keys[key] else item for key, item in given.items()
    }
    if needs_input and all(keys[key] and item == [] for key, item in checked.items()):
        wanted = ", ".join(keys) or "none"
        raise _unprocessable(
            f"input needs a message or a value of the graph's input keys ({wanted}), or a"
            " command, or a checkpoint to re-run from"
        )
    return checked
