"""Native values → server messages (`agent.v1.AgentServerMessage`), serialized.

Every function returns the bytes of one message (a "frame"), ready for the transport to put in
a Connect envelope: the runtime never sees a protobuf object. Pure code: no I/O and no clock
reads (the stream encoder is handed one).
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import assert_never

from ...llm.events import (
    DoneEvent,
    ErrorEvent,
    ResponseEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ...llm.types import Usage
from ...loop.meter import Meter
from ...loop.state import PlanRecord
from ...loop.todos import TodoItem
from .proto import agent_pb2
from .tools import placeholder_tool_call, todo_items
from .tools.cards import sanitize_tool_call_id

__all__ = [
    "HEARTBEAT",
    "StreamEncoder",
    "blob_id",
    "call_id_for",
    "checkpoint",
    "get_blob",
    "request_context_exec",
    "set_blob",
    "text_delta",
    "turn_ended",
]

_ID_BAD = re.compile(r"[^a-zA-Z0-9_-]")


def blob_id(data: bytes) -> bytes:
    """A blob's id: SHA-256 of its bytes (32 raw bytes)."""
    return hashlib.sha256(data).digest()


def call_id_for(model_call_id: str, content_index: int) -> str:
    """The transport id of one tool call, stable across partial/started/delta/completed: the
    LLM call's id (in the tool id charset) and the call's content index."""
    return f"{_ID_BAD.sub('_', model_call_id)}-{content_index}"


def _update(iu: agent_pb2.InteractionUpdate) -> bytes:
    return bytes(agent_pb2.AgentServerMessage(interaction_update=iu).SerializeToString())


HEARTBEAT = _update(agent_pb2.InteractionUpdate(heartbeat=agent_pb2.HeartbeatUpdate()))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _text_update(tag: int, text: str) -> bytes:
    """`AgentServerMessage{interaction_update{<tag>{text}}}`, written by hand: the one frame
    per delta of a stream, with no protobuf object built for it. `tag`: the InteractionUpdate
    field's key byte (a length-delimited field under 16); its message has `text` as field 1,
    as TextDeltaUpdate and ThinkingDeltaUpdate do (tests/cursor/test_encode_deltas.py holds
    these bytes equal to protobuf's)."""
    data = text.encode("utf-8")  # a lone surrogate raises, as protobuf's encoder does
    n = len(data)
    if not n:  # proto3 leaves an empty string out
        return bytes((0x0A, 2, tag, 0))
    if n < 124:  # every length fits one byte
        return bytes((0x0A, n + 4, tag, n + 2, 0x0A, n)) + data
    inner = b"\x0a" + _varint(n) + data
    update = bytes((tag,)) + _varint(len(inner)) + inner
    return b"\x0a" + _varint(len(update)) + update


_TEXT_DELTA = 0x0A  # InteractionUpdate.text_delta = 1, length-delimited
_THINKING_DELTA = 0x22  # InteractionUpdate.thinking_delta = 4, length-delimited


def text_delta(text: str) -> bytes:
    return _text_update(_TEXT_DELTA, text)


def server_notice(text: str) -> bytes:
    """A line for the user that is not model output (TextDeltaUpdate.is_server_notice)."""
    delta = agent_pb2.TextDeltaUpdate(text=text, is_server_notice=True)
    return _update(agent_pb2.InteractionUpdate(text_delta=delta))


def turn_ended(usage: Usage) -> bytes:
    """turn_ended with the run's usage totals (input excludes cache reads and writes)."""
    return _update(
        agent_pb2.InteractionUpdate(
            turn_ended=agent_pb2.TurnEndedUpdate(
                input_tokens=usage.input,
                output_tokens=usage.output,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                reasoning_tokens=usage.reasoning,
            )
        )
    )


def get_blob(kv_id: int, blob: bytes) -> bytes:
    return bytes(
        agent_pb2.AgentServerMessage(
            kv_server_message=agent_pb2.KvServerMessage(
                id=kv_id, get_blob_args=agent_pb2.GetBlobArgs(blob_id=blob)
            )
        ).SerializeToString()
    )


def set_blob(kv_id: int, data: bytes) -> bytes:
    return bytes(
        agent_pb2.AgentServerMessage(
            kv_server_message=agent_pb2.KvServerMessage(
                id=kv_id,
                set_blob_args=agent_pb2.SetBlobArgs(blob_id=blob_id(data), blob_data=data),
            )
        ).SerializeToString()
    )


def request_context_exec(exec_id: int) -> bytes:
    return bytes(
        agent_pb2.AgentServerMessage(
            exec_server_message=agent_pb2.ExecServerMessage(
                id=exec_id, request_context_args=agent_pb2.RequestContextArgs()
            )
        ).SerializeToString()
    )


def agent_mode(mode: str) -> int | None:
    """A mode name ("agent", "plan", ...) → its AgentMode value; None when the enum has none."""
    try:
        return int(agent_pb2.AgentMode.Value(f"AGENT_MODE_{mode.upper()}"))
    except ValueError:
        return None


def plan_path(uri: str) -> str:
    """The file a plan URI names (`file:///w/.cursor/plans/x.plan.md` → `/w/.cursor/plans/
    x.plan.md`); any other URI as it is."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file":
        return urllib.parse.unquote(parsed.path)
    return uri


def plan_id(uri: str) -> str:
    """A plan's registry id: its file's name without `.plan.md` (or `.md`) [U: GoL's ids are
    not documented; the IDE only needs them unique and stable]."""
    name = plan_path(uri).rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".plan.md", ".md"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


_UINT32_MAX = 2**32 - 1


def _u32(n: int) -> int:
    return min(max(n, 0), _UINT32_MAX)


def token_details(meter: Meter) -> agent_pb2.ConversationTokenDetails:
    """The context meter (`token_details` 5, reference §5): used of max, and the breakdown by
    category (every category, zeros included, in the meter's order)."""
    used, window = _u32(meter.used_tokens), _u32(meter.max_tokens)
    categories = [
        agent_pb2.PromptTokenBreakdownCategory(
            id=str(c.category),
            label=c.label,
            estimated_tokens=_u32(c.tokens),
            character_count=_u32(c.chars),
        )
        for c in meter.categories
    ]
    return agent_pb2.ConversationTokenDetails(
        used_tokens=used,
        max_tokens=window,
        breakdown=agent_pb2.PromptTokenBreakdownSnapshot(
            total_used_tokens=used, max_tokens=window, categories=categories
        ),
    )


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    """One compaction, for the checkpoint: its summary and how many recent messages it kept."""

    summary: str
    window_tail: int


def summary_started() -> bytes:
    """`interaction_update.summary_started` (10): a compaction's summary is being written."""
    return _update(agent_pb2.InteractionUpdate(summary_started=agent_pb2.SummaryStartedUpdate()))


def summary_text(summary: str) -> bytes:
    """`interaction_update.summary` (9) with the summary text."""
    return _update(agent_pb2.InteractionUpdate(summary=agent_pb2.SummaryUpdate(summary=summary)))


def summary_completed(hook_message: str) -> bytes:
    """`interaction_update.summary_completed` (11), the line the IDE shows for it."""
    return _update(
        agent_pb2.InteractionUpdate(
            summary_completed=agent_pb2.SummaryCompletedUpdate(hook_message=hook_message)
        )
    )


def checkpoint(
    turn_blob_ids: Sequence[bytes],
    todos: Sequence[TodoItem] = (),
    mode: str | None = None,
    plan: PlanRecord | None = None,
    plans: Sequence[PlanRecord] = (),
    meter: Meter | None = None,
    summaries: Sequence[SummaryRecord] = (),
    carried: bytes = b"",
    pending_tool_calls: Sequence[str] = (),
) -> bytes:
    """`carried`: the client's own helper fields (children.subagent_state), as it sent them.
    `pending_tool_calls` (4): the tool calls of the turn still unanswered, by the ids the
    IDE's cards carry (a checkpoint sent while tools run).

    `conversation_checkpoint_update` listing one blob per turn (the loop's marks), the todo list
    (`todos` (3): each TodoItem serialized inline, as GoL writes it; reference §3.4 [S]), the
    mode the conversation is in (`mode` 10, reference §3.3: after an approved SwitchMode it
    is the new one), its plan (`plan` 7: a serialized ConversationPlan), every plan document it
    has, by id (`plans` 20; reference §2.11 [S]) and the context meter (`token_details` 5).
    `summaries`: the compactions of the active history, oldest first (reference §5 [S]):
    `summary` (6) is the latest as a ConversationSummary, `summary_archives` (13) one
    ConversationSummaryArchive each ([U]: GoL writes ConversationSummary bytes there; the
    archive is the message the field's name says, and carries window_tail, never 0), and
    `self_summary_count` (17) how many there are."""
    state = agent_pb2.ConversationStateStructure(
        turns=list(turn_blob_ids), todos=[t.SerializeToString() for t in todo_items(todos)]
    )
    if carried:
        state.MergeFromString(carried)
    state.pending_tool_calls.extend(sanitize_tool_call_id(c) for c in pending_tool_calls)
    if meter is not None:
        state.token_details.CopyFrom(token_details(meter))
    value = agent_mode(mode) if mode is not None else None
    if value is not None:
        state.mode = value  # type: ignore[assignment]
    if plan is not None:
        state.plan = agent_pb2.ConversationPlan(plan=plan.text).SerializeToString()
    for each in plans:  # a later revision of the same document replaces the earlier one
        if each.uri:
            key = plan_id(each.uri)
            state.plans[key].CopyFrom(agent_pb2.PlanRegistryEntry(id=key, path=plan_path(each.uri)))
    if summaries:
        latest = agent_pb2.ConversationSummary(summary=summaries[-1].summary)
        state.summary = latest.SerializeToString()
        state.summary_archives.extend(
            agent_pb2.ConversationSummaryArchive(
                summary=s.summary, window_tail=max(1, s.window_tail)
            ).SerializeToString()
            for s in summaries
        )
        state.self_summary_count = len(summaries)
    return bytes(
        agent_pb2.AgentServerMessage(conversation_checkpoint_update=state).SerializeToString()
    )


class StreamEncoder:
    """Native stream events of one LLM call → interaction updates. One per LLM call.

    text_delta → text_delta; thinking_delta → thinking_delta; thinking_end →
    thinking_completed (duration from the injected clock); toolcall_start → partial_tool_call
    with a typed placeholder; toolcall_delta → partial_tool_call with args_text_delta;
    everything else → nothing (the runtime ends turns and starts tools)."""

    __slots__ = ("_now_ms", "_thinking_since", "_tools", "model_call_id")

    def __init__(self, *, model_call_id: str, now_ms: Callable[[], int]) -> None:
        self.model_call_id = model_call_id
        self._now_ms = now_ms
        self._thinking_since: dict[int, int] = {}
        self._tools: dict[int, tuple[str, str]] = {}  # content index → (name, tool call id)

    def encode(self, event: ResponseEvent) -> bytes | None:
        """The frame for `event`, or None when it has none."""
        match event:
            case TextDelta(delta=delta):
                return _text_update(_TEXT_DELTA, delta) if delta else None
            case ThinkingStart(content_index=index):
                self._thinking_since.setdefault(index, self._now_ms())
                return None
            case ThinkingDelta(content_index=index, delta=delta):
                self._thinking_since.setdefault(index, self._now_ms())
                return _text_update(_THINKING_DELTA, delta) if delta else None
            case ThinkingEnd(content_index=index):
                now = self._now_ms()
                since = self._thinking_since.pop(index, now)
                duration = max(0, min(now - since, 2**31 - 1))
                return _update(
                    agent_pb2.InteractionUpdate(
                        thinking_completed=agent_pb2.ThinkingCompletedUpdate(
                            thinking_duration_ms=duration
                        )
                    )
                )
            case ToolCallStart(content_index=index, id=tool_call_id, name=name):
                self._tools[index] = (name, tool_call_id)
                partial = agent_pb2.PartialToolCallUpdate(
                    call_id=call_id_for(self.model_call_id, index),
                    tool_call=placeholder_tool_call(name, tool_call_id),
                    model_call_id=self.model_call_id,
                )
                return _update(agent_pb2.InteractionUpdate(partial_tool_call=partial))
            case ToolCallDelta(content_index=index, delta=delta):
                if not delta:
                    return None
                partial = agent_pb2.PartialToolCallUpdate(
                    call_id=call_id_for(self.model_call_id, index),
                    args_text_delta=delta,
                    model_call_id=self.model_call_id,
                )
                known = self._tools.get(index)
                if known is not None:
                    partial.tool_call.CopyFrom(placeholder_tool_call(*known))
                return _update(agent_pb2.InteractionUpdate(partial_tool_call=partial))
            case (
                StartEvent() | TextStart() | TextEnd() | ToolCallEnd() | DoneEvent() | ErrorEvent()
            ):
                return None  # the runtime starts tools and ends turns
            case _:
                assert_never(event)
