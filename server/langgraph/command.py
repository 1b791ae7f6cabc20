"""A LangGraph `command` (`{"resume", "update", "goto"}`), checked against the run's graph.

The worker turns the recorded command into `langgraph.types.Command` (runner/execute.py), so
everything a worker could trip on is refused here, at submit, with a 422 naming the field:
state keys the graph does not have, nodes it does not have, messages LangChain cannot read, a
Send's input its node's input schema cannot take, a `resume: null` that is the whole command
(LangGraph takes it as no resume, and fails on the empty command inside the run).
Messages in `update` get ids now, as input messages do: a retried attempt sends the same
update again, and the `messages` reducer then replaces them instead of adding them twice.
"""

from __future__ import annotations

import dataclasses
import typing
import uuid
from typing import Any

import msgspec
from langchain_core.messages import convert_to_messages
from langgraph.graph import END
from langgraph.pregel import Pregel
from pydantic import BaseModel

from server.errors import ApiError

__all__ = ["COMMAND_KEYS", "checked_command", "checked_update"]

COMMAND_KEYS = frozenset({"resume", "update", "goto"})


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "invalid_request", message)


def checked_command(command: dict[str, Any], graph: Pregel, max_bytes: int) -> dict[str, Any]:
    """`command` as the worker will run it (`goto` always as a list).

    Raises:
        ApiError: 422 for an unknown key, state key, node or message shape; 413 when the
            command is bigger than `max_bytes` as JSON (`RUNSTREAM_MAX_RESUME_BYTES`).
    """
    unknown = sorted(set(command) - COMMAND_KEYS)
    if unknown:
        raise _unprocessable(
            f"command takes resume, update and goto; unknown: {', '.join(unknown)}"
        )
    size = len(msgspec.json.encode(command))
    if size > max_bytes:
        raise ApiError(
            413,
            "input_too_large",
            f"command is {size} bytes as JSON; the limit is {max_bytes}"
            " (RUNSTREAM_MAX_RESUME_BYTES)",
        )
    checked: dict[str, Any] = {}
    if "resume" in command:
        if command["resume"] is None and command.get("update") is None and not command.get("goto"):
            # LangGraph takes a null resume as none, and an empty command fails in the run.
            raise _unprocessable(
                "command.resume is null: give the value that answers the thread's interrupt"
            )
        checked["resume"] = command["resume"]
    if command.get("update") is not None:
        checked["update"] = checked_update(command["update"], graph, "command.update")
    if command.get("goto") is not None:
        checked["goto"] = _goto(command["goto"], graph)
    if not checked:
        raise _unprocessable("command needs resume, update or goto")
    return checked


def checked_update(update: Any, graph: Pregel, where: str) -> dict[str, Any] | list[list[Any]]:
    """A state update (`command.update`, `update_state`'s `values`) in the form it came in (an
    object, or `[key, value]` pairs), checked against `graph`'s state keys; messages get ids.

    Raises:
        ApiError: 422 naming `where` for any other shape, an unknown key or a bad message.
    """
    if isinstance(update, dict):
        pairs = [[key, value] for key, value in update.items()]
    elif isinstance(update, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in update
    ):
        pairs = [list(p) for p in update]
    else:
        raise _unprocessable(f"{where} must be an object or a list of [key, value] pairs")
    keys = graph.stream_channels_list
    for pair in pairs:
        key = pair[0]
        if key not in keys:
            raise _unprocessable(
                f"{where}: the graph has no state key {key!r}; it has {', '.join(keys)}"
            )
        if key == "messages":
            pair[1] = _messages(pair[1], f"{where}.messages")
    return {key: value for key, value in pairs} if isinstance(update, dict) else pairs


def _messages(value: Any, where: str) -> list[Any]:
    """The messages of an update, each as a dict with an id (see the module docstring)."""
    items = value if isinstance(value, list) else [value]
    messages: list[Any] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"type": "human", "content": item}
        elif isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
            item = {"type": item[0], "content": item[1]}  # LangChain's (role, content) tuple
        if not isinstance(item, dict):
            raise _unprocessable(f"{where}[{i}] must be a message object")
        try:
            convert_to_messages([item])
        except (ValueError, TypeError, NotImplementedError) as exc:
            reason = str(exc).splitlines()[0][:200]
            raise _unprocessable(f"{where}[{i}]: {reason}") from None
        messages.append({**item, "id": item.get("id") or str(uuid.uuid4())})
    return messages


def _goto(goto: Any, graph: Pregel) -> list[Any]:
    """`goto` as a list of node names and Send objects. `END` ("__end__") is taken by name, as
    LangGraph takes it: it schedules nothing (LangGraph logs the write and ignores it), so the
    graph goes on from the thread's checkpoint as a resume without a value would."""
    items = goto if isinstance(goto, list) else [goto]
    nodes = [n for n in graph.nodes if not n.startswith("__")]
    checked: list[Any] = []
    for i, item in enumerate(items):
        node = item.get("node") if isinstance(item, dict) else item
        if not isinstance(node, str):
            raise _unprocessable(
                f"command.goto[{i}] must be a node name or a Send object {{node, input}}"
            )
        if node == END and not isinstance(item, dict):
            checked.append(node)
            continue
        if node not in nodes:
            raise _unprocessable(
                f"command.goto[{i}]: the graph has no node {node!r}; it has {', '.join(nodes)}"
            )
        if isinstance(item, dict):
            where = f"command.goto[{i}].input"
            checked.append(
                {"node": node, "input": _send_input(graph, node, item.get("input"), where)}
            )
        else:
            checked.append(node)
    return checked


def _input_keys(graph: Pregel, node: str) -> tuple[list[str], set[str]] | None:
    """The keys of `node`'s input schema and the required ones; None when the graph is not a
    StateGraph's or its schema cannot be read (then a Send's input goes unchecked)."""
    builder = getattr(graph, "builder", None)
    spec = getattr(builder, "nodes", {}).get(node)
    schema = getattr(spec, "input_schema", None)
    if schema is None:
        return None
    try:
        keys = list(typing.get_type_hints(schema))
    except (NameError, TypeError):
        return None
    if isinstance(getattr(schema, "__required_keys__", None), frozenset):  # a TypedDict
        return keys, set(schema.__required_keys__)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return keys, {name for name, field in schema.model_fields.items() if field.is_required()}
    if dataclasses.is_dataclass(schema):
        return keys, {
            f.name
            for f in dataclasses.fields(schema)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
    return keys, set()


def _send_input(graph: Pregel, node: str, value: Any, where: str) -> Any:
    """A Send's input, which LangGraph hands to the node as it is, checked against the node's
    input schema: an object of its keys, the required ones given, messages LangChain reads.
    Unchecked, a value the node could not take failed inside the run, after it was accepted."""
    schema = _input_keys(graph, node)
    if schema is None:
        return value
    keys, required = schema
    if not isinstance(value, dict):
        raise _unprocessable(
            f"{where}: node {node!r} takes an object with the keys {', '.join(keys)}"
        )
    if unknown := sorted(set(value) - set(keys)):
        raise _unprocessable(
            f"{where}: node {node!r} has no input key {unknown[0]!r}; it has {', '.join(keys)}"
        )
    if missing := sorted(required - set(value)):
        raise _unprocessable(f"{where}: node {node!r} needs the key {missing[0]!r}")
    if "messages" in value:
        return {**value, "messages": _messages(value["messages"], f"{where}.messages")}
    return value
