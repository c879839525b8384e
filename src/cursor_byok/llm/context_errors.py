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
"""

from __future__ import annotations

from typing import Any

import msgspec

from .events import ErrorKind

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
