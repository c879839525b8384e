"""History the client holds → native messages (for conversations this server has never seen).

Two client-side forms are read (protocol §2.8, §3.6):

- `conversation_state.root_prompt_messages_json`: blobs of AI-SDK-style JSON messages
  (`history_from_root_prompt_blobs`);
- `UserMessageAction.conversation_history`: an inline provider-neutral transcript
  (`history_from_conversation_history`).

A third, `conversation_state.turns` (`ConversationTurnStructure` blobs), lists the turns of our
own checkpoints; it is read only to tell a rewind (docs/dialect.md), never as history.

Assistant messages are marked api/provider = "cursor"/"cursor" and model = the `modelName` the
blob names (else "unknown"), so provider transforms treat their thinking signatures as foreign.
Decoding is strict about JSON validity and structure (a clear `DialectError`) and lenient about
keys it does not know.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...llm.canonical import sorted_value
from ...llm.types import (
    AssistantContent,
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
    UserMessage,
)
from .proto import agent_pb2

__all__ = [
    "CURSOR_API",
    "CURSOR_PROVIDER",
    "INJECTED_CONTEXT_TAGS",
    "DialectError",
    "history_from_conversation_history",
    "history_from_root_prompt_blobs",
    "parse_root_prompt_message",
]

CURSOR_API = "cursor"
CURSOR_PROVIDER = "cursor"
UNKNOWN_MODEL = "unknown"

# Cursor's own server puts an injected-context user message (OS, workspace, git status, rules,
# ...) right after the system prompt, as XML-like sections. A user message before the first
# assistant message whose every text part starts with one of these tags is taken for it and
# skipped: this server rebuilds that context itself for every turn. [U] heuristic.
INJECTED_CONTEXT_TAGS: tuple[str, ...] = (
    "<user_info>",
    "<system_reminder>",
    "<rules>",
    "<agent_skills>",
    "<mcp_instructions>",
    "<git_status>",
    "<project_layout>",
    "<open_and_recently_viewed_files>",
    "<agent_transcripts>",
    "<environment_details>",
)


class DialectError(ValueError):
    """A client message this server cannot accept; the text says what was wrong."""


# -- AI-SDK JSON (root_prompt_messages_json) ----------------------------------------------------


def _where(index: int | None) -> str:
    return f"history blob {index}" if index is not None else "history message"


def _image_part(part: Mapping[str, Any], where: str) -> ImageContent:
    raw = part.get("image", part.get("data"))
    mime = part.get("mediaType") or part.get("mimeType") or part.get("mime_type")
    if not isinstance(raw, str) or not raw:
        raise DialectError(f"{where}: an image part has no image data")
    if raw.startswith("data:"):
        header, sep, data = raw.partition(",")
        if not sep or ";base64" not in header:
            raise DialectError(f"{where}: an image data URL is not base64-encoded")
        url_mime = header[5:].split(";", 1)[0]
        mime = mime or url_mime
        raw = data
    elif raw.startswith(("http://", "https://")):
        raise DialectError(f"{where}: image URLs are not supported, only inline base64 data")
    try:
        base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise DialectError(f"{where}: an image part is not valid base64") from None
    return ImageContent(data=raw, mime_type=str(mime) if mime else "image/png")


def _text_of(value: Any) -> str:
    """A tool result's text: strings as they are, AI-SDK output objects by their value, other
    JSON as canonical JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("value"), str):
        return str(value["value"])
    if isinstance(value, list) and all(
        isinstance(v, dict) and v.get("type") == "text" and isinstance(v.get("text"), str)
        for v in value
    ):
        return "\n".join(str(v["text"]) for v in value)
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _arguments(value: Any, where: str) -> tuple[dict[str, Any], str | None, str | None]:
    """(arguments, arguments_error, raw_arguments) of a tool call from history."""
    if value is None:
        return {}, None, None
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            return {}, f"invalid JSON: {exc}", value
        value = parsed
        if not isinstance(value, dict):
            return {}, "the arguments are not a JSON object", json.dumps(value)
    if not isinstance(value, dict):
        raise DialectError(f"{where}: tool-call args must be a JSON object")
    return dict(sorted_value(value)), None, None


def _user_content(content: Any, where: str) -> tuple[UserContent, ...]:
    if isinstance(content, str):
        return (TextContent(text=content),) if content.strip() else ()
    if not isinstance(content, list):
        raise DialectError(f"{where}: user content must be a string or a list of parts")
    out: list[UserContent] = []
    for part in content:
        if not isinstance(part, dict):
            raise DialectError(f"{where}: a user content part is not a JSON object")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise DialectError(f"{where}: a text part has no text string")
            if text.strip():
                out.append(TextContent(text=text))
        elif kind in ("image", "file") and (
            kind == "image" or str(part.get("mediaType", "")).startswith("image/")
        ):
            out.append(_image_part(part, where))
        # other part kinds (files, unknown) carry nothing the model can read here
    return tuple(out)


def _model_name(obj: Mapping[str, Any]) -> str | None:
    options = obj.get("providerOptions")
    if isinstance(options, dict):
        cursor = options.get("cursor")
        if isinstance(cursor, dict) and isinstance(cursor.get("modelName"), str):
            return str(cursor["modelName"]) or None
    return None


def _assistant(obj: Mapping[str, Any], where: str) -> AssistantMessage | None:
    content = obj.get("content")
    model = _model_name(obj)
    blocks: list[AssistantContent] = []
    if isinstance(content, str):
        if content:
            blocks.append(TextContent(text=content))
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                raise DialectError(f"{where}: an assistant content part is not a JSON object")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise DialectError(f"{where}: a text part has no text string")
                if text:
                    blocks.append(TextContent(text=text))
            elif kind == "reasoning":
                text = part.get("text")
                if not isinstance(text, str):
                    raise DialectError(f"{where}: a reasoning part has no text string")
                signature = part.get("signature")
                model = model or _model_name(part)
                blocks.append(
                    ThinkingContent(
                        thinking=text, signature=signature if isinstance(signature, str) else None
                    )
                )
            elif kind == "redacted-reasoning":
                data = part.get("data")
                if isinstance(data, str):
                    blocks.append(ThinkingContent(thinking="", signature=data, redacted=True))
            elif kind == "tool-call":
                call_id = part.get("toolCallId")
                name = part.get("toolName")
                if not isinstance(call_id, str) or not call_id:
                    raise DialectError(f"{where}: a tool-call part has no toolCallId")
                if not isinstance(name, str) or not name:
                    raise DialectError(f"{where}: a tool-call part has no toolName")
                raw = part.get("args", part.get("input"))
                args, error, raw_text = _arguments(raw, where)
                blocks.append(
                    ToolCall(
                        id=call_id,
                        name=name,
                        arguments=args,
                        arguments_error=error,
                        raw_arguments=raw_text,
                    )
                )
            # unknown part kinds (sources, files, ...) are skipped
    elif content is not None:
        raise DialectError(f"{where}: assistant content must be a string or a list of parts")
    if not blocks:
        return None
    has_calls = any(isinstance(b, ToolCall) for b in blocks)
    return AssistantMessage(
        content=tuple(blocks),
        api=CURSOR_API,
        provider=CURSOR_PROVIDER,
        model=model or UNKNOWN_MODEL,
        stop_reason="toolUse" if has_calls else "stop",
    )


def _tool_results(obj: Mapping[str, Any], where: str) -> list[ToolResultMessage]:
    content = obj.get("content")
    if not isinstance(content, list):
        raise DialectError(f"{where}: tool message content must be a list of tool-result parts")
    out: list[ToolResultMessage] = []
    for part in content:
        if not isinstance(part, dict):
            raise DialectError(f"{where}: a tool content part is not a JSON object")
        if part.get("type") != "tool-result":
            continue
        call_id = part.get("toolCallId") or obj.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise DialectError(f"{where}: a tool-result part has no toolCallId")
        name = part.get("toolName")
        result = part.get("result", part.get("output"))
        out.append(
            ToolResultMessage(
                tool_call_id=call_id,
                tool_name=name if isinstance(name, str) else "",
                content=(TextContent(text=_text_of(result)),),
                is_error=part.get("isError") is True,
            )
        )
    return out


def parse_root_prompt_message(data: bytes, index: int | None = None) -> list[Message] | None:
    """One root-prompt blob → native messages ([] when it holds nothing to keep, None for a
    system message)."""
    where = _where(index)
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise DialectError(f"{where} is not UTF-8 text") from None
    except ValueError as exc:
        raise DialectError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DialectError(f"{where} is not a JSON object")
    role = obj.get("role")
    if role in ("system", "developer"):
        return None
    if role == "user":
        content = _user_content(obj.get("content"), where)
        return [UserMessage(content=content)] if content else []
    if role == "assistant":
        message = _assistant(obj, where)
        return [message] if message is not None else []
    if role == "tool":
        return list(_tool_results(obj, where))
    raise DialectError(f"{where} has an unsupported role {role!r}")


def _is_injected_context(message: UserMessage) -> bool:
    texts = [p.text.lstrip() for p in message.content if isinstance(p, TextContent)]
    if not texts or len(texts) != len(message.content):
        return False
    return all(t.startswith(INJECTED_CONTEXT_TAGS) for t in texts)


def history_from_root_prompt_blobs(blobs: Sequence[bytes]) -> tuple[Message, ...]:
    """`root_prompt_messages_json` blobs, in order → native history. System messages are
    skipped (this server builds its own system prompt), as is Cursor's injected-context user
    message before the first assistant message (see INJECTED_CONTEXT_TAGS)."""
    out: list[Message] = []
    seen_assistant = False
    for i, blob in enumerate(blobs):
        messages = parse_root_prompt_message(blob, i)
        if messages is None:
            continue
        for m in messages:
            if isinstance(m, AssistantMessage):
                seen_assistant = True
            elif isinstance(m, UserMessage) and not seen_assistant and _is_injected_context(m):
                continue
            out.append(m)
    return tuple(out)


# -- inline ConversationHistory (§3.6) ----------------------------------------------------------


def _history_image(image: agent_pb2.ConversationHistoryImageContent, where: str) -> ImageContent:
    mime = image.mime_type if image.HasField("mime_type") and image.mime_type else None
    return _image_part({"image": image.data, "mediaType": mime}, where)


def history_from_conversation_history(
    history: agent_pb2.ConversationHistory,
) -> tuple[Message, ...]:
    out: list[Message] = []
    for i, item in enumerate(history.messages):
        where = f"conversation_history message {i}"
        kind = item.WhichOneof("message")
        if kind == "user":
            content: list[UserContent] = []
            for part in item.user.content:
                which = part.WhichOneof("content")
                if which == "text" and part.text.text.strip():
                    content.append(TextContent(text=part.text.text))
                elif which == "image":
                    content.append(_history_image(part.image, where))
            if content:
                out.append(UserMessage(content=tuple(content)))
        elif kind == "assistant":
            blocks: list[AssistantContent] = []
            for apart in item.assistant.content:
                which = apart.WhichOneof("content")
                if which == "text" and apart.text.text:
                    blocks.append(TextContent(text=apart.text.text))
                elif which == "reasoning":
                    r = apart.reasoning
                    sig = r.signature if r.HasField("signature") and r.signature else None
                    blocks.append(ThinkingContent(thinking=r.text, signature=sig))
                elif which == "redacted_reasoning":
                    blocks.append(
                        ThinkingContent(
                            thinking="", signature=apart.redacted_reasoning.data, redacted=True
                        )
                    )
                elif which == "tool_call":
                    tc = apart.tool_call
                    if not tc.tool_call_id or not tc.tool_name:
                        raise DialectError(f"{where}: a tool call has no id or name")
                    args, error, raw = _arguments(tc.args_json, where)
                    blocks.append(
                        ToolCall(
                            id=tc.tool_call_id,
                            name=tc.tool_name,
                            arguments=args,
                            arguments_error=error,
                            raw_arguments=raw,
                        )
                    )
            if blocks:
                out.append(
                    AssistantMessage(
                        content=tuple(blocks),
                        api=CURSOR_API,
                        provider=CURSOR_PROVIDER,
                        model=UNKNOWN_MODEL,
                        stop_reason="toolUse"
                        if any(isinstance(b, ToolCall) for b in blocks)
                        else "stop",
                    )
                )
        elif kind == "tool":
            t = item.tool
            if not t.tool_call_id:
                raise DialectError(f"{where}: a tool result has no tool_call_id")
            parts: list[UserContent] = []
            for tpart in t.content:
                which = tpart.WhichOneof("content")
                if which == "text":
                    parts.append(TextContent(text=tpart.text.text))
                elif which == "image":
                    parts.append(_history_image(tpart.image, where))
            if not parts:
                parts.append(TextContent(text=""))
            out.append(
                ToolResultMessage(
                    tool_call_id=t.tool_call_id,
                    tool_name=t.tool_name,
                    content=tuple(parts),
                    is_error=t.is_error,
                )
            )
    return tuple(out)
