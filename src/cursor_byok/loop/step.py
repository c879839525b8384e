"""What a transition returns, and the pieces every rule builds one from.

`Transition` is the loop's whole answer to one input: the next state, the events to publish,
the command, and what the runtime must carry out for it (the messages appended, the tool calls
answered by the loop, how a model call ended, a finished compaction) or, for an input that does
not apply, why it was ignored (`Ignored`). The helpers here build committed states and
transitions; they decide nothing.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from cursor_byok.llm.events import ResponseEvent
from cursor_byok.llm.types import AssistantMessage, Message, ToolCall, ToolResultMessage

from . import ids
from .commands import WAIT_INPUT, Canceled, Command, Failed, FailureKind, Final
from .context import DEFAULT_CONTEXT, TurnContext
from .state import AwaitClient, CompactionReason, ConversationState, RuntimeState, Status
from .todos import TodoUpdate

_replace = msgspec.structs.replace


class LoopError(ValueError):
    """An input that cannot exist for this state (a bug of whoever built it), as opposed to one
    that merely does not apply now (those are ignored)."""


class CallOutcome(enum.StrEnum):
    """How a model call ended, for its record. Values are the store's call statuses."""

    COMMITTED = "committed"  # its answer is in the history
    FAILED = "failed"
    CANCELED = "canceled"


class CallEnd(msgspec.Struct, frozen=True, omit_defaults=True):
    call_id: str
    outcome: CallOutcome
    error: str | None = None


class LocalResult(msgspec.Struct, frozen=True):
    """A tool call the loop answered itself: `result` is in the history; the client's card
    for the call (`llm_call_id`, `content_index`) is still to be completed. `todos`: a
    TodoWrite the loop applied (its card shows the submitted items and the merged list)."""

    call: ToolCall
    llm_call_id: str
    content_index: int
    result: ToolResultMessage
    todos: TodoUpdate | None = None


class Compacted(msgspec.Struct, frozen=True, omit_defaults=True):
    """A compaction this transition finished (for the client's summary updates, the metrics
    and the log line). `call_id` empty: there was nothing to compact (a /summarize of a short
    conversation), no summary call was made and `summary` is empty."""

    reason: CompactionReason
    summary: str = ""
    call_id: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    summarized: int = 0  # messages the summary replaced in the view
    kept: int = 0  # messages kept after it


class WindowReport(msgspec.Struct, frozen=True, omit_defaults=True):
    """The provider's own word on the run's model's window (window.py): it refused a request
    as too long and gave its window (`tokens`), or it answered a request whose usage (`used`)
    is over the window the loop decided by (a silent overflow). The runtime keeps `tokens`
    per model for the process and warns once per model, quoting `said`."""

    said: str
    tokens: int = 0
    used: int = 0
    window: int = 0  # the window the loop had decided by


class Ignored(enum.StrEnum):
    """Why an input did not apply to the state (h11: an ignored event says why). The state is
    returned unchanged, nothing is emitted and the command is `WaitInput`; the runtime reads
    the reason and never infers it."""

    NOT_AWAITED = "not_awaited"  # the conversation waits on nothing this input answers
    OTHER_CALL = "other_call"  # an event or answer of a model call other than the awaited one
    UNKNOWN_TOOL_CALL = "unknown_tool_call"  # a result for no call of the current message
    ALREADY_ANSWERED = "already_answered"  # a result for a call answered (or held) before
    ANSWERED_BY_LOOP = "answered_by_loop"  # a client's result for a call the loop answers
    OTHER_OPERATION = "other_operation"  # a lost operation other than the awaited one
    BUSY = "busy"  # a rewind while a turn is in progress
    ALREADY_THERE = "already_there"  # a rewind to the view the conversation already has


class Checkpoint(msgspec.Struct, frozen=True):
    """A model call changed the history mid-turn: the client gets a checkpoint now (the IDE's
    meter and turn list move during a long turn), listing the tool calls still unanswered."""

    pending_tool_calls: tuple[str, ...] = ()


class Transition(msgspec.Struct, frozen=True):
    state: RuntimeState
    emit: tuple[ResponseEvent, ...]
    command: Command
    appended: tuple[Message, ...] = ()  # appended to the log, in order, by this transition
    local_results: tuple[LocalResult, ...] = ()
    call_end: CallEnd | None = None
    compacted: Compacted | None = None
    ignored: Ignored | None = None  # set when the input did not apply, saying why
    notices: tuple[str, ...] = ()  # for the user, as server notices (not model output)
    window_report: WindowReport | None = None
    # A checkpoint to publish once this transition is committed (the end of a turn has its
    # own, after turn_ended: the runtime sends it for Final).
    checkpoint: Checkpoint | None = None


def with_checkpoint(t: Transition) -> Transition:
    """`t` (the answer of a model call is in) with a mid-turn checkpoint, unless the turn ends
    with it: then its end publishes one."""
    if isinstance(t.command, Final | Failed | Canceled):
        return t
    waiting = t.state.committed.waiting
    pending: tuple[str, ...] = ()
    if isinstance(waiting, AwaitClient):
        held = {r.tool_call_id for r in waiting.early}
        pending = tuple(k.id for k in waiting.calls[waiting.next :] if k.id not in held)
    return _replace(t, checkpoint=Checkpoint(pending_tool_calls=pending))


def ignore(state: RuntimeState, why: Ignored) -> Transition:
    return Transition(state, (), WAIT_INPUT, ignored=why)


def commit(c: ConversationState, **changes: Any) -> ConversationState:
    """The next committed state: `changes` applied and a new commit id (O(fields))."""
    n = c.commit + 1
    return _replace(c, commit=n, last_commit_id=ids.commit_id(c.conversation_id, n), **changes)


def with_messages(c: ConversationState, *messages: Message) -> ConversationState:
    """`c` with `messages` appended to the log and to the active history (uncommitted)."""
    if not messages:
        return c
    # One tuple concatenation each (one copy), not an unpacking (a list, then its tuple).
    log = c.log + messages
    active = log if c.messages is c.log else c.messages + messages
    return _replace(c, log=log, messages=active)


def settle(
    c: ConversationState,
    emit: tuple[ResponseEvent, ...],
    command: Command,
    *,
    local: tuple[LocalResult, ...] = (),
    call_end: CallEnd | None = None,
) -> Transition:
    return Transition(
        RuntimeState(committed=c), emit, command, local_results=local, call_end=call_end
    )


def prepend(
    emit: tuple[ResponseEvent, ...], t: Transition, call_end: CallEnd | None = None
) -> Transition:
    if not emit and call_end is None:
        return t
    return _replace(t, emit=emit + t.emit, call_end=call_end or t.call_end)


def context_of(c: ConversationState) -> TurnContext:
    return c.context if c.context is not None else DEFAULT_CONTEXT


def fail(
    c: ConversationState,
    message: AssistantMessage,
    emit: tuple[ResponseEvent, ...] = (),
    call_end: CallEnd | None = None,
    kind: FailureKind = FailureKind.PROVIDER,
) -> Transition:
    c2 = commit(c, status=Status.FAILED, waiting=None, queued=(), queued_context=None)
    return settle(c2, emit, Failed(message=message, kind=kind), call_end=call_end)


def flush_queue(c: ConversationState) -> ConversationState:
    """Steering: the queued user messages join the history before the turn's next model call,
    and the context a queued follow-up brought applies from that call on."""
    if not c.queued and c.queued_context is None:
        return c
    c = with_messages(c, *c.queued)
    context = c.queued_context if c.queued_context is not None else c.context
    return _replace(c, queued=(), queued_context=None, context=context)


def content_index(messages: tuple[Message, ...], tool_call_id: str) -> int:
    """Where the call sits in the assistant message that made it (the latest one)."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            for i, block in enumerate(message.content):
                if isinstance(block, ToolCall) and block.id == tool_call_id:
                    return i
            return 0
    return 0


def take_early(early: list[ToolResultMessage], tool_call_id: str) -> ToolResultMessage | None:
    for k, result in enumerate(early):
        if result.tool_call_id == tool_call_id:
            return early.pop(k)
    return None
