"""LangGraph's stream (`messages`, `updates`, `custom`, `values`, `events`, `debug`, `tasks`,
`checkpoints` modes) turned into protocol events.

The one rule kept here: every token of a message carries that message's id, and a message the
model did not stream still reaches clients as one token before its `message` event, so that
concatenated tokens always equal the message's content. A run submitted through the LangGraph
API also asks for LangGraph's own `values` and `updates` events, recorded as they come.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage

from stream_store.messages import message_text, state_to_json, to_wire_message
from wire.events import MessageData, SubgraphData, TokenData, UpdatesData, ValuesData

from .step_parts import STEP_MODES, step_part

__all__ = ["StreamTranslator"]


class StreamTranslator:
    """Stateful per execution: remembers which messages already streamed tokens."""

    def __init__(
        self,
        record_updates: bool = False,
        nested_modes: frozenset[str] = frozenset(),
        task_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self.streamed: set[str] = set()
        self.record_updates = record_updates
        self.nested_modes = nested_modes  # a subgraph's parts recorded (`stream_subgraphs`)
        # what a task's `metadata` starts with in `tasks` and `debug` parts (runner/step_parts.py)
        self.task_metadata: Mapping[str, Any] = task_metadata or {}

    def translate_nested(
        self, namespace: tuple[str, ...], mode: str, chunk: Any
    ) -> Iterator[tuple[str, Any]]:
        """Yield the events of one item of `graph.astream(..., subgraphs=True)`: the root
        graph's as `translate` gives them; a subgraph's tokens with its namespace (LangGraph
        names them `messages|<ns>`; without `subgraphs` its model streams none, and its
        message comes whole with its parent node's update), its other parts as `subgraph`
        events, for the modes the run asked for. A subgraph's messages reach the thread
        through its parent node's update, so they are not completed here."""
        if not namespace:
            yield from self.translate(mode, chunk)
        elif mode == "messages":
            message, meta = chunk
            yield from self._token(message, meta.get("langgraph_node"), "|".join(namespace))
        elif mode in self.nested_modes:
            if mode == "updates":
                chunk = {node: update for node, update in chunk.items() if node != "__metadata__"}
            if mode in STEP_MODES:
                data = step_part(mode, chunk, self.task_metadata)
            else:
                data = chunk if mode == "custom" else state_to_json(chunk)
            yield "subgraph", SubgraphData(ns="|".join(namespace), mode=mode, data=data)

    def translate(self, mode: str, chunk: Any) -> Iterator[tuple[str, Any]]:
        """Yield `(event, data)` pairs for one item of `graph.astream(stream_mode=[...])`."""
        if mode == "messages":
            message, meta = chunk
            yield from self._token(message, meta.get("langgraph_node"))
        elif mode == "values":
            yield "values", ValuesData(values=state_to_json(chunk))
        elif mode == "updates":
            if (chunk.get("__metadata__") or {}).get("cached"):
                # Writes a previous attempt saved, applied without re-running the node: the
                # stream already has these messages, or the retry re-sent them whole.
                return
            if self.record_updates:
                # As LangGraph streams them, `__interrupt__` included: its `updates` carry an
                # interrupt before the `values` that do (the LangGraph view then sends no
                # second one for the `pending` event the run's outcome writes).
                updates = {node: update for node, update in chunk.items() if node != "__metadata__"}
                if updates:
                    yield "updates", UpdatesData(updates=state_to_json(updates))
            for node, update in chunk.items():
                if node.startswith("__") or not isinstance(update, dict):
                    continue
                messages = update.get("messages")
                if isinstance(messages, BaseMessage):
                    messages = [messages]
                for message in messages or []:
                    if isinstance(message, BaseMessage) and message.type != "remove":
                        yield from self.complete(message)
        elif mode == "custom":
            yield "custom", chunk
        elif mode == "events":  # LangGraph's `events` mode (runner/graph_events.py)
            yield "events", state_to_json(chunk)
        elif mode in STEP_MODES:  # LangGraph's `debug`, `tasks`, `checkpoints` modes, whole
            yield mode, step_part(mode, chunk, self.task_metadata)

    def _token(
        self, message: Any, node: str | None, ns: str | None = None
    ) -> Iterator[tuple[str, Any]]:
        if not isinstance(message, AIMessage) or not message.id:
            return
        text = message_text(message.content)
        if not text:
            return
        if isinstance(message, AIMessageChunk) or message.id not in self.streamed:
            self.streamed.add(message.id)
            yield "token", TokenData(message_id=message.id, text=text, node=node, ns=ns)

    def complete(self, message: BaseMessage) -> Iterator[tuple[str, Any]]:
        """Events for a whole message: its `message`, after one token if none streamed."""
        if isinstance(message, AIMessage) and message.id and message.id not in self.streamed:
            text = message_text(message.content)
            if text:
                self.streamed.add(message.id)
                yield "token", TokenData(message_id=message.id, text=text)
        yield "message", MessageData(message=to_wire_message(message))
