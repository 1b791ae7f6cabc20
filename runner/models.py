"""The model factory: `ChatOpenAI`, or the deterministic `fake` model, behind one call.

Graph code receives a `BaseChatModel` from `make_chat_model` (through
`runner.run_scope.chat_model`) and cannot tell which it got; both stream through LangChain's
callbacks, so LangGraph's `messages` stream mode sees their tokens the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from project.configurable import fake_token_delay_ms
from stream_store.settings import Settings

__all__ = ["EchoChatModel", "make_chat_model", "split_tokens"]

# A chunk is a run of non-space characters with the whitespace before it.
_TOKEN = re.compile(r"\s*\S+|\s+")


def split_tokens(text: str) -> list[str]:
    """The fake model's chunks: concatenated, they give back `text` exactly."""
    return _TOKEN.findall(text)


def _last_user_text(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text if hasattr(message, "text") else str(message.content)
    return ""


class EchoChatModel(GenericFakeChatModel):
    """The `fake` model (`RUNSTREAM_MODEL=fake`): replies with the last user message.

    When tools are bound and the conversation ends with the user's message, it proposes a call
    of the first tool with that text as `content` (what the `approval` graph needs); otherwise
    it streams the reply one whitespace-split chunk at a time, `token_delay_s` apart.
    """

    messages: Iterator[AIMessage | str] = iter(())
    token_delay_s: float = 0.02
    bound_tools: list[dict[str, Any]] = []

    @property
    def _llm_type(self) -> str:
        return "runstream-echo"

    def _reply(self, messages: Sequence[BaseMessage]) -> AIMessage:
        text = _last_user_text(messages)
        if self.bound_tools and messages and isinstance(messages[-1], HumanMessage):
            name = self.bound_tools[0]["function"]["name"]
            call = {"name": name, "args": {"content": text}, "id": f"call_{uuid.uuid4().hex[:24]}"}
            return AIMessage(content="", tool_calls=[call])
        return AIMessage(content=text)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        reply = self._reply(messages)
        if reply.tool_calls:
            call = reply.tool_calls[0]
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {
                            "name": call["name"],
                            "args": json.dumps(call["args"]),
                            "id": call["id"],
                            "index": 0,
                        }
                    ],
                )
            )
            if run_manager:
                await run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk
            return
        tokens = split_tokens(str(reply.content)) or [""]  # no user text: one empty reply
        for index, token in enumerate(tokens):
            if index and self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
            if run_manager:
                await run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        specs = [convert_to_openai_tool(tool) for tool in tools]
        return self.model_copy(update={"bound_tools": specs})


def make_chat_model(settings: Settings, configurable: dict[str, Any]) -> BaseChatModel:
    """The chat model for one run: `fake`, or `ChatOpenAI` with streaming on."""
    if settings.model == "fake":
        delay_ms = float(settings.fake_token_delay_ms)
        # A value recorded before the server bounded it gives the default delay instead.
        if "fake_token_delay_ms" in configurable:
            with contextlib.suppress(ValueError):
                delay_ms = fake_token_delay_ms(configurable["fake_token_delay_ms"])
        return EchoChatModel(token_delay_s=max(0.0, delay_ms) / 1000)

    from langchain_openai import ChatOpenAI

    # An endpoint of your own may take no key; the OpenAI client insists on one
    key = settings.openai_api_key or ("no-key" if settings.openai_base_url else None)
    return ChatOpenAI(
        model=settings.model,
        api_key=key,  # type: ignore[arg-type]
        base_url=settings.openai_base_url,
        streaming=True,
    )


def __getattr__(name: str) -> Any:
    """`chat_model` and its error (`NoModelHere`, now `NotInARun`), deprecated here:
    `runner.run_scope` has them."""
    if name in ("chat_model", "NoModelHere"):
        from . import run_scope

        warnings.warn(
            f"runner.models.{name} is deprecated: import chat_model (and NotInARun, its error)"
            " from runner.run_scope",
            DeprecationWarning,
            stacklevel=2,
        )
        return run_scope.chat_model if name == "chat_model" else run_scope.NotInARun
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
