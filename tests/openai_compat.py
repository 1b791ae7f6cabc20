"""A local OpenAI-compatible server: chat completions (streamed or not, with tool calls) and
embeddings, deterministic and offline, so the real `langchain-openai` path is what tests and
benchmarks exercise (point `OPENAI_BASE_URL` at `<url>/v1`).

It answers the way OpenAI's API does on the wire (the same JSON objects, the same
server-sent-event framing) and decides *what* to answer by these documented rules:

- **Reply.** The assistant's text is ``You said: <the last user message's text>``, streamed one
  word per chunk (the whitespace before a word travels with it, as models stream). With
  ``reply_tokens=N`` (``--tokens N``) the reply is exactly N such words instead (the same words,
  repeated or cut), for benchmarks. ``max_tokens`` / ``max_completion_tokens`` cut the reply and
  end it with ``finish_reason: "length"``.
- **Tool calls.** When the request offers ``tools`` (and ``tool_choice`` is not ``"none"``) and
  the last message is the user's, every offered function whose name appears in that message as
  a word is called, in order of appearance (the first one only when ``parallel_tool_calls`` is
  false); ``tool_choice: "required"`` or a named function forces a call even when no name
  appears. The arguments are the first JSON object written in the message after the tool's name
  when there is one; otherwise each parameter of the tool's schema is filled from the message:
  a string gets the text after the tool's name up to the next offered tool's name, less a
  leading "for", "in", "at", "of", "on", "to", "with" or "about", a trailing "and" or "then"
  and punctuation (``"get_weather for Paris"`` gives ``{"city": "Paris"}``); a number or
  integer gets the first number in the message (else 0); a boolean ``true``. The call's id is
  ``call_`` + a hash of the request, so it is deterministic.
- **After tools.** When the last messages are ``tool`` messages, the reply is
  ``The <name> tool returned: <content>`` for each of them (joined by a space).
- **Embeddings.** A hashed bag of words: every lower-cased ``\\w+`` word (or token id, when the
  input is token ids as `langchain-openai` sends with tiktoken on) adds ±1 to one of
  ``dimensions`` (default 1536) coordinates picked by a BLAKE2 hash; the vector is L2-normalised
  (an input with no word gives the unit vector on the first coordinate). ``encoding_format:
  "base64"`` (what the `openai` client asks for by default) gives little-endian float32 bytes.

``token_delay`` (``--delay`` seconds) sleeps between streamed chunks; ``first_token_delay``
before the first content chunk. Run it with ``python -m tests.openai_compat --port N``, in a
thread (`running_in_thread`), or in an event loop as an ASGI app (`build_app`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import re
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

DEFAULT_MODEL = "compat-gpt"
DEFAULT_EMBEDDING_DIMENSIONS = 1536
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_LEADING_PREPOSITION = re.compile(r"^(?:for|in|at|of|on|to|with|about)\s+", re.IGNORECASE)
_TRAILING_CONJUNCTION = re.compile(r"[\s,;]+(?:and|then)$", re.IGNORECASE)


@dataclass(frozen=True)
class CompatConfig:
    """How the server answers: reply length and pacing (the rules are in the module doc)."""

    reply_tokens: int | None = None
    token_delay: float = 0.0
    first_token_delay: float = 0.0


@dataclass
class ReceivedRequests:
    """Every request body the server was sent, in order, for tests to check what went upstream."""

    bodies: list[tuple[str, Any]] = field(default_factory=list)

    def for_path(self, path: str) -> list[Any]:
        return [body for seen, body in self.bodies if seen == path]


class BadRequest(Exception):
    """A request OpenAI would refuse: answered 400 with OpenAI's error object."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


# --- deciding the answer -------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """What the assistant says: text pieces (one chunk each) or tool calls, and why it stops."""

    pieces: list[str]
    tool_calls: list[ToolCall]
    finish_reason: str


def message_text(content: Any) -> str:
    """The text of a message's `content`: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    raise BadRequest("message content must be a string or a list of parts", "messages")


def split_words(text: str) -> list[str]:
    """Words with the whitespace before each kept on it, so joining them gives `text` back."""
    return re.findall(r"\s*\S+", text) or [""]


def fit_tokens(pieces: list[str], count: int) -> list[str]:
    """Exactly `count` pieces: `pieces` repeated (with a space before each repeat) or cut."""
    if count <= 0:
        return []
    words = [piece.strip() for piece in pieces if piece.strip()] or ["token"]
    out = [words[i % len(words)] for i in range(count)]
    return [out[0]] + [" " + word for word in out[1:]]


def tool_name(tool: Any) -> str:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise BadRequest("only tools of type 'function' are served", "tools")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BadRequest("a tool needs function.name", "tools")
    return str(function["name"])


def fill_arguments(tool: dict[str, Any], text: str, after: str) -> dict[str, Any]:
    """A tool's arguments from the user's words, by the rule in the module doc."""
    start = after.find("{")
    if start >= 0:
        with contextlib.suppress(ValueError):
            found, _ = json.JSONDecoder().raw_decode(after[start:])
            if isinstance(found, dict):
                return found
    schema = tool["function"].get("parameters") or {}
    properties = schema.get("properties") or {}
    rest = _LEADING_PREPOSITION.sub("", after.strip()).strip(" .?!,;:")
    rest = _TRAILING_CONJUNCTION.sub("", rest).strip(" .?!,;:")
    number = _NUMBER.search(text)
    arguments: dict[str, Any] = {}
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind == "integer":
            arguments[name] = int(float(number.group())) if number else 0
        elif kind == "number":
            arguments[name] = float(number.group()) if number else 0.0
        elif kind == "boolean":
            arguments[name] = True
        elif kind in ("string", None):
            arguments[name] = rest
    return arguments


def choose_tool_calls(body: dict[str, Any], text: str, call_seed: str) -> list[ToolCall]:
    tools = body.get("tools") or []
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return []
    by_name = {tool_name(tool): tool for tool in tools}
    positions: list[tuple[int, str]] = []
    for name in by_name:
        match = re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text)
        if match:
            positions.append((match.start(), name))
    positions.sort()
    if isinstance(choice, dict):
        forced = (choice.get("function") or {}).get("name")
        if forced not in by_name:
            raise BadRequest(f"tool_choice names a tool not offered: {forced!r}", "tool_choice")
        positions = [(text.find(forced), forced)]
    elif choice == "required" and not positions:
        positions = [(-1, next(iter(by_name)))]
    if body.get("parallel_tool_calls") is False:
        positions = positions[:1]
    calls = []
    for index, (at, name) in enumerate(positions):
        following = [other for other, _ in positions if other > at]
        after = text[at + len(name) : min(following, default=len(text))] if at >= 0 else text
        arguments = fill_arguments(by_name[name], text, after)
        digest = hashlib.blake2b(f"{call_seed}|{index}|{name}".encode(), digest_size=12)
        calls.append(ToolCall(f"call_{digest.hexdigest()}", name, json.dumps(arguments)))
    return calls


def tool_results_reply(messages: list[dict[str, Any]]) -> str:
    """`The <name> tool returned: <content>` for each trailing tool message."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            names[str(call.get("id"))] = str((call.get("function") or {}).get("name", "unknown"))
    trailing = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        trailing.append(message)
    parts = [
        f"The {names.get(str(m.get('tool_call_id')), 'unknown')} tool returned: "
        f"{message_text(m.get('content'))}"
        for m in reversed(trailing)
    ]
    return " ".join(parts)


def decide(body: dict[str, Any], config: CompatConfig) -> Answer:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array", "messages")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise BadRequest("every message needs a role", "messages")
    if body.get("n", 1) != 1:
        raise BadRequest("only n=1 is served", "n")
    last = messages[-1]
    if last["role"] == "tool":
        text = tool_results_reply(messages)
    else:
        users = [m for m in messages if m["role"] == "user"]
        said = message_text(users[-1].get("content")) if users else ""
        if last["role"] == "user":
            seed = json.dumps(messages, sort_keys=True)
            calls = choose_tool_calls(body, said, seed)
            if calls:
                return Answer([], calls, "tool_calls")
        text = f"You said: {said}"
    pieces = split_words(text)
    if config.reply_tokens is not None:
        pieces = fit_tokens(pieces, config.reply_tokens)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and 0 < limit < len(pieces):
        return Answer(pieces[:limit], [], "length")
    return Answer(pieces, [], "stop")


def count_words(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(_WORD.findall(message_text(m.get("content")))) + 3 for m in messages)


def usage_of(body: dict[str, Any], answer: Answer) -> dict[str, Any]:
    prompt = count_words(body["messages"])
    completion = len(answer.pieces) + sum(
        len(_WORD.findall(call.name + " " + call.arguments)) for call in answer.tool_calls
    )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


# --- the wire ------------------------------------------------------------------------------


def error_response(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    error = {"message": message, "type": kind, "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=status)


def argument_fragments(arguments: str) -> list[str]:
    """The arguments' JSON in small fragments, as OpenAI streams them."""
    return [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]


async def chat_chunks(
    body: dict[str, Any], answer: Answer, config: CompatConfig, completion_id: str
) -> AsyncIterator[bytes]:
    created = int(time.time())
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    header = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": body.get("model", DEFAULT_MODEL),
        "service_tier": "default",
        "system_fingerprint": "fp_compat",
    }

    def frame(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk: dict[str, Any] = {
            **header,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if include_usage:
            chunk["usage"] = None
        return f"data: {json.dumps(chunk)}\n\n".encode()

    if answer.tool_calls:
        for index, call in enumerate(answer.tool_calls):
            opening = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            delta: dict[str, Any] = {"tool_calls": [opening]}
            if index == 0:
                delta = {"role": "assistant", "content": None, **delta, "refusal": None}
            yield frame(delta)
            for fragment in argument_fragments(call.arguments):
                await asyncio.sleep(config.token_delay)
                yield frame({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    else:
        yield frame({"role": "assistant", "content": "", "refusal": None})
        await asyncio.sleep(config.first_token_delay)
        for number, piece in enumerate(answer.pieces):
            if number:
                await asyncio.sleep(config.token_delay)
            yield frame({"content": piece})
    yield frame({}, answer.finish_reason)
    if include_usage:
        usage_chunk = {**header, "choices": [], "usage": usage_of(body, answer)}
        yield f"data: {json.dumps(usage_chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def chat_completion(body: dict[str, Any], answer: Answer, completion_id: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if answer.tool_calls else "".join(answer.pieces),
        "refusal": None,
        "annotations": [],
    }
    if answer.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in answer.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", DEFAULT_MODEL),
        "service_tier": "default",
        "system_fingerprint": "fp_compat",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": answer.finish_reason,
            }
        ],
        "usage": usage_of(body, answer),
    }


def embed(words: Sequence[str], dimensions: int) -> list[float]:
    """A hashed bag of words, L2-normalised."""
    vector = [0.0] * dimensions
    for word in words:
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        vector[value % dimensions] += 1.0 if (value >> 63) & 1 else -1.0
    norm = sum(x * x for x in vector) ** 0.5
    if norm == 0.0:
        vector[0] = 1.0
        return vector
    return [x / norm for x in vector]


def embedding_inputs(raw: Any) -> list[list[str]]:
    """Each input's words: strings are split into words, token ids become `#<id>` words."""
    if isinstance(raw, str):
        return [[w.lower() for w in _WORD.findall(raw)]]
    if isinstance(raw, list) and raw and all(isinstance(x, int) for x in raw):
        return [[f"#{x}" for x in raw]]
    if isinstance(raw, list) and raw:
        out = []
        for item in raw:
            if isinstance(item, str):
                out.append([w.lower() for w in _WORD.findall(item)])
            elif isinstance(item, list) and all(isinstance(x, int) for x in item):
                out.append([f"#{x}" for x in item])
            else:
                raise BadRequest("input items must be strings or arrays of token ids", "input")
        return out
    raise BadRequest("input must be a string, an array of strings or of token ids", "input")


def encode_vector(vector: list[float], encoding_format: str) -> Any:
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def build_app(
    config: CompatConfig | None = None, received: ReceivedRequests | None = None
) -> Starlette:
    """The server as an ASGI app; `received`, when given, records every request body."""
    settings = config or CompatConfig()

    async def read_body(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise BadRequest("the body is not JSON") from exc
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if received is not None:
            received.bodies.append((request.url.path, body))
        return body

    async def chat(request: Request) -> Response:
        try:
            body = await read_body(request)
            answer = decide(body, settings)
        except BadRequest as exc:
            return error_response(400, str(exc), exc.param)
        seed = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=12)
        completion_id = f"chatcmpl-{seed.hexdigest()}"
        if body.get("stream") is True:
            return StreamingResponse(
                chat_chunks(body, answer, settings, completion_id),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        return JSONResponse(chat_completion(body, answer, completion_id))

    async def embeddings(request: Request) -> Response:
        try:
            body = await read_body(request)
            inputs = embedding_inputs(body.get("input"))
            dimensions = body.get("dimensions", DEFAULT_EMBEDDING_DIMENSIONS)
            if not isinstance(dimensions, int) or dimensions < 1:
                raise BadRequest("dimensions must be a positive integer", "dimensions")
            encoding_format = body.get("encoding_format", "float")
            if encoding_format not in ("float", "base64"):
                raise BadRequest("encoding_format must be 'float' or 'base64'", "encoding_format")
        except BadRequest as exc:
            return error_response(400, str(exc), exc.param)
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": encode_vector(embed(words, dimensions), encoding_format),
            }
            for index, words in enumerate(inputs)
        ]
        tokens = sum(len(words) for words in inputs)
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "compat-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def models(request: Request) -> Response:
        listed = [DEFAULT_MODEL, "compat-embedding"]
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "compat"} for m in listed]
        return JSONResponse({"object": "list", "data": data})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


# --- running it ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunningServer:
    url: str  # http://127.0.0.1:<port>

    @property
    def base_url(self) -> str:
        """What `OPENAI_BASE_URL` / `ChatOpenAI(base_url=...)` take."""
        return f"{self.url}/v1"


def uvicorn_server(app: Starlette, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
    )
    return uvicorn.Server(config)


@contextlib.contextmanager
def running_in_thread(
    config: CompatConfig | None = None,
    *,
    port: int = 0,
    received: ReceivedRequests | None = None,
) -> Iterator[RunningServer]:
    """Serve on loopback from a thread with its own event loop, until the block ends (uvicorn
    installs no signal handlers outside the main thread)."""
    server = uvicorn_server(build_app(config, received), "127.0.0.1", port)
    thread = threading.Thread(target=server.run, name="openai-compat", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the OpenAI-compatible server did not start")
        if time.monotonic() > deadline:
            raise RuntimeError("the OpenAI-compatible server did not start within 30 s")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield RunningServer(f"http://127.0.0.1:{bound}")
    finally:
        server.should_exit = True
        thread.join(10)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.openai_compat",
        description="A local, deterministic OpenAI-compatible server (chat and embeddings).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--tokens", type=int, default=None, help="reply with exactly N words")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between chunks")
    parser.add_argument(
        "--first-token-delay", type=float, default=0.0, help="seconds before the first word"
    )
    args = parser.parse_args(argv)
    config = CompatConfig(
        reply_tokens=args.tokens, token_delay=args.delay, first_token_delay=args.first_token_delay
    )
    uvicorn_server(build_app(config), args.host, args.port).run()


if __name__ == "__main__":
    main()
