"""Recognising "the request is over the model's context window" in each provider's error body,
so the loop can compact once and make a new call (ErrorKind.CONTEXT_LENGTH). Each adapter asks
the function for its own provider; bodies that do not match stay ordinary errors.

The shapes, as each provider documents or sends them (the tests quote them with their source):
- Anthropic: HTTP 400 `{"type":"error","error":{"type":"invalid_request_error","message":
  "prompt is too long: 208310 tokens > 200000 maximum"}}` (and the `input length and
  max_tokens exceed context limit` wording).
- OpenAI Chat Completions and Responses: HTTP 400 `{"error":{..., "code":
  "context_length_exceeded"}}`; Responses also in a `response.failed` event's `error.code`.
- OpenAI-compatible servers: llama-server's HTTP 400 `{"error":{"code":400,"type":
  "exceed_context_size_error","message":"request (9412 tokens) exceeds the available context
  size (8192 tokens), try increasing it","n_prompt_tokens":9412,"n_ctx":8192}}`; vLLM and
  others say "maximum context length" in the message.
- Gemini: HTTP 400 `{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"The input
  token count (1300000) exceeds the maximum number of tokens allowed (1048576)."}}`.

Where the answer gives the numbers, `*_limit` reads the provider's window and its count of the
refused request (`ContextLimit`): llama-server's `n_ctx` and `n_prompt_tokens` fields (or its
message), OpenAI's and vLLM's "maximum context length is N tokens ... you requested M tokens
(P in the messages, ...)" / "resulted in M tokens", Anthropic's "prompt is too long: M tokens >
N maximum" and "exceed context limit: P + O > N", Gemini's "input token count (M) exceeds the
maximum number of tokens allowed (N)". The loop compacts to fit that window.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .events import ContextLimit, ErrorKind

CONTEXT_LENGTH = ErrorKind.CONTEXT_LENGTH


def _error_object(body: bytes) -> dict[str, Any]:
    try:
        data: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return {}
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return {}
    err = data.get("error", data)
    return err if isinstance(err, dict) else {}


def _text(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


def anthropic(status: int, body: bytes) -> ErrorKind | None:
    if status not in (400, 413):
        return None
    err = _error_object(body)
    message = _text(err.get("message"))
    if _text(err.get("type")) != "invalid_request_error" and status != 413:
        return None
    if "prompt is too long" in message or "exceed context limit" in message:
        return CONTEXT_LENGTH
    return None


_OPENAI_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_OPENAI_PHRASES = (
    "maximum context length",
    "exceeds the available context size",
    "context window",
    "context length",
)


def openai_code(code: Any) -> ErrorKind | None:
    """An in-band error code (a Responses `response.failed` event's `error.code`)."""
    return CONTEXT_LENGTH if _text(code) in _OPENAI_CODES else None


def openai(status: int, body: bytes) -> ErrorKind | None:
    """OpenAI's own APIs and the servers that speak them (llama-server, vLLM, OpenRouter)."""
    if status not in (400, 413):
        return None
    err = _error_object(body)
    if openai_code(err.get("code")) or openai_code(err.get("type")):
        return CONTEXT_LENGTH
    message = _text(err.get("message"))
    if any(phrase in message for phrase in _OPENAI_PHRASES) and (
        "exceed" in message or "reduce" in message or "too long" in message
    ):
        return CONTEXT_LENGTH
    return None


def gemini(status: int, body: bytes) -> ErrorKind | None:
    if status != 400:
        return None
    err = _error_object(body)
    message = _text(err.get("message"))
    if "exceeds the maximum number of tokens" in message:
        return CONTEXT_LENGTH
    return None


_MAX_TOKENS = 100_000_000  # a number past this is not a window


def _count(match: re.Match[str] | None, group: int = 1) -> int:
    if match is None:
        return 0
    n = int(match.group(group))
    return n if 0 < n < _MAX_TOKENS else 0


def _field(err: dict[str, Any], name: str) -> int:
    value = err.get(name)
    return value if isinstance(value, int) and 0 < value < _MAX_TOKENS else 0


def _limit(window: int, prompt: int) -> ContextLimit | None:
    return ContextLimit(window=window, prompt=prompt) if window or prompt else None


_LLAMA_WINDOW = re.compile(r"available context size \((\d+) tokens\)")
_LLAMA_PROMPT = re.compile(r"request \((\d+) tokens\)")
_OPENAI_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
_OPENAI_REQUESTED = re.compile(r"(?:requested|resulted in) (\d+) tokens(?: \((\d+) in the)?")
_ANTHROPIC_PROMPT = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_ANTHROPIC_SUM = re.compile(r"exceed context limit: (\d+) \+ \d+ > (\d+)")
_GEMINI = re.compile(
    r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)"
)


def openai_limit_text(message: str) -> ContextLimit | None:
    """The numbers in an OpenAI-style message (also a Responses in-band error's)."""
    text = message.lower()
    window = _count(_LLAMA_WINDOW.search(text)) or _count(_OPENAI_WINDOW.search(text))
    prompt = _count(_LLAMA_PROMPT.search(text))
    requested = _OPENAI_REQUESTED.search(text)
    if not prompt and requested is not None:
        prompt = _count(requested, 2) if requested.group(2) else _count(requested)
    return _limit(window, prompt)


def openai_limit(body: bytes) -> ContextLimit | None:
    err = _error_object(body)
    window, prompt = _field(err, "n_ctx"), _field(err, "n_prompt_tokens")
    message = err.get("message")
    said = openai_limit_text(message if isinstance(message, str) else "")
    if said is not None:
        window, prompt = window or said.window, prompt or said.prompt
    return _limit(window, prompt)


def anthropic_limit(body: bytes) -> ContextLimit | None:
    message = _text(_error_object(body).get("message"))
    match = _ANTHROPIC_PROMPT.search(message) or _ANTHROPIC_SUM.search(message)
    return _limit(_count(match, 2), _count(match, 1))


def gemini_limit(body: bytes) -> ContextLimit | None:
    match = _GEMINI.search(_text(_error_object(body).get("message")))
    return _limit(_count(match, 2), _count(match, 1))
