"""Cross-provider history rules: the one place that adapts stored history to a target model.

Signatures and encrypted reasoning are only valid for the exact provider, API and model that
produced them: they are replayed byte-for-byte there and dropped everywhere else. Visible text is
always kept. Tool call ids are rewritten to what the target accepts, consistently for a call and
its result. Every rule is a pure function of one message and the target, so the output for an
older message never changes as history grows (provider prefix caches depend on that).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

import msgspec

from .types import (
    AssistantContent,
    AssistantMessage,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

IdNormalizer = Callable[[str], str]

MISSING_RESULT_TEXT = "No result provided"


class Target(msgspec.Struct, frozen=True):
    api: str
    provider: str
    model: str

    def produced(self, message: AssistantMessage) -> bool:
        """Same model = same provider, API and model id."""
        return (
            message.provider == self.provider
            and message.api == self.api
            and message.model == self.model
        )


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def sanitize_id(raw: str, max_len: int) -> str:
    """Replace characters outside [A-Za-z0-9_-] and bound the length. Long ids keep a hash of
    the whole id so two long ids with a common prefix stay distinct."""
    clean = _UNSAFE.sub("_", raw)
    if len(clean) <= max_len:
        return clean or "call"
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return clean[: max_len - 11] + "_" + digest


def strip_surrogates(text: str) -> str:
    """Drop lone UTF-16 surrogates, which cannot be encoded as UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="ignore").decode("utf-8")


def _transform_assistant(
    message: AssistantMessage, target: Target, normalize_id: IdNormalizer, id_map: dict[str, str]
) -> AssistantMessage:
    same = target.produced(message)
    content: list[AssistantContent] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if block.redacted:
                if same:
                    content.append(block)
            elif same and block.signature:
                content.append(block)  # encrypted reasoning may have empty visible text
            elif not block.thinking.strip():
                continue
            elif same:
                content.append(block)
            else:
                content.append(TextContent(text=block.thinking))
        elif isinstance(block, TextContent):
            if same or block.signature is None:
                content.append(block)
            else:
                content.append(TextContent(text=block.text))
        else:
            new_id = block.id if same else normalize_id(block.id)
            if new_id != block.id:
                id_map[block.id] = new_id
            if same:
                content.append(block)
            else:
                content.append(msgspec.structs.replace(block, id=new_id, thought_signature=None))
    new_content = tuple(content)
    if new_content == message.content:
        return message
    return msgspec.structs.replace(message, content=new_content)


class HistoryTransform:
    """`transform_messages` one message at a time, so a longer history can continue from a
    copy of the state a shorter one left (prefix_memo.py).

    `feed` returns what a message turns into once the messages before it were fed (the
    synthetic results of calls left unanswered come out when the next assistant or user
    message arrives); `finish` what the end of the history adds, without changing the state.
    """

    __slots__ = ("answered", "id_map", "normalize_id", "pending", "target")

    def __init__(self, target: Target, normalize_id: IdNormalizer) -> None:
        self.target = target
        self.normalize_id = normalize_id
        self.id_map: dict[str, str] = {}
        self.pending: list[ToolCall] = []
        self.answered: set[str] = set()

    def copy(self) -> HistoryTransform:
        other = HistoryTransform(self.target, self.normalize_id)
        other.id_map = dict(self.id_map)
        other.pending = list(self.pending)
        other.answered = set(self.answered)
        return other

    def feed(self, message: Message) -> list[Message]:
        if isinstance(message, AssistantMessage):
            out = self._flush_missing()
            if message.stop_reason in ("error", "aborted"):
                return out
            converted = _transform_assistant(message, self.target, self.normalize_id, self.id_map)
            self.pending.extend(converted.tool_calls)
            out.append(converted)
            return out
        if isinstance(message, ToolResultMessage):
            new_id = self.id_map.get(message.tool_call_id, message.tool_call_id)
            if new_id != message.tool_call_id:
                message = msgspec.structs.replace(message, tool_call_id=new_id)
            self.answered.add(new_id)
            return [message]
        assert isinstance(message, UserMessage)
        out = self._flush_missing()
        out.append(message)
        return out

    def finish(self) -> list[ToolResultMessage]:
        return self._missing()

    def _missing(self) -> list[ToolResultMessage]:
        return [
            ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=(TextContent(text=MISSING_RESULT_TEXT),),
                is_error=True,
            )
            for call in self.pending
            if call.id not in self.answered
        ]

    def _flush_missing(self) -> list[Message]:
        out: list[Message] = []
        out.extend(self._missing())
        self.pending.clear()
        self.answered.clear()
        return out


def transform_messages(
    messages: Sequence[Message], target: Target, normalize_id: IdNormalizer
) -> list[Message]:
    """History as the target should see it.

    Assistant messages that ended in error or abort are dropped (their reasoning items cannot be
    replayed without what followed them); a tool call left without a result before the next
    assistant or user message gets a synthetic error result, so the provider sees a valid
    call/result pairing.
    """
    transform = HistoryTransform(target, normalize_id)
    out: list[Message] = []
    for message in messages:
        out.extend(transform.feed(message))
    out.extend(transform.finish())
    return out
