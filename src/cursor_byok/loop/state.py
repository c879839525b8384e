"""Loop state: the committed conversation and the in-memory response being streamed.

`ConversationState` is what the store persists. `log` is every message the conversation ever
committed, in order: it only grows by whole messages, and a message once in it never changes
(the store appends it as a row and never deletes one). `messages` is the active history, the
one the model sees: a view over the log (`view`, see view.py). Usually the view is the whole
log and `messages` is `log` itself; a rewind makes it a prefix of the log followed by what is
appended after the rewind, and the compaction epochs will reuse the same mechanism.

`PendingResponse` lives only in memory while an LLM stream runs; it holds counters, never text
(the assistant message that is committed is the adapter's `done.message`), so each streamed
event costs O(1).
"""

from __future__ import annotations

import enum
from typing import Literal, TypeAlias

import msgspec

from cursor_byok.llm.types import Message, ToolCall, ToolResultMessage, UserMessage

from . import ids
from .categories import PromptChars
from .context import TurnContext
from .definitions import DefinitionFile
from .inputs import ToolEffect
from .todos import TodoItem
from .view import WHOLE_LOG, Span


class Status(enum.StrEnum):
    """Where the conversation stands. Stored by value ("Ready", ...)."""

    READY = "Ready"  # no turn yet
    WAITING_LLM = "WaitingLLM"  # a model call is in flight
    WAITING_CLIENT = "WaitingClient"  # a tool call is on the client
    FINAL = "Final"  # the last turn ended with the model's answer
    FAILED = "Failed"  # the last turn failed
    CANCELED = "Canceled"  # the last turn was canceled (or superseded)
    SUMMARIZING = "Summarizing"  # a compaction's summary call is in flight
    READING = "ReadingDefinitions"  # the turn's MCP definition files are read (definitions.py)


BlockKind: TypeAlias = Literal["text", "thinking", "toolCall"]

# Statuses of a turn in progress: an LLM call or a client operation is outstanding.
BUSY: frozenset[Status] = frozenset(
    {Status.WAITING_LLM, Status.WAITING_CLIENT, Status.SUMMARIZING, Status.READING}
)
# Statuses in which a new turn may simply start.
IDLE: frozenset[Status] = frozenset({Status.READY, Status.FINAL, Status.FAILED, Status.CANCELED})


class _Value(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    pass


class _Waiting(_Value, frozen=True, tag_field="kind"):
    pass


class ImageMark(_Value, frozen=True, array_like=True):
    """A pasted image's place in the message that held it: the part's index, its type and
    size (what stands in for it says them)."""

    at: int
    mime_type: str
    kb: int


class Describing(_Value, frozen=True):
    """The call in flight describes the pasted images of the message that opens the turn,
    for a model without vision (loop/images.py). `message` is that message as the model will
    read it without a description (a note in place of each image, at `images`); it joins the
    history when the call ends: with the description once it is in, as it is when the call
    fails or the turn ends first. `model`: the vision model's id."""

    message: UserMessage
    images: tuple[ImageMark, ...]
    model: str


class AwaitLLM(_Waiting, frozen=True, tag="llm"):
    """An LLM call is in flight; only events carrying `call_id` are accepted. `fallback`: 0
    for the run's own model, k for the k-th of the context's `fallbacks`. `compacted`: the
    call's request was built right after a compaction (or one was tried for it), so a "context
    length exceeded" answer fails the turn instead of compacting again (never a loop)."""

    call_id: str
    messages_hash: str
    fallback: int = 0
    compacted: bool = False
    # The call's request per meter category: at its answer it becomes the state's meter.
    prompt: PromptChars | None = None
    # Set for a call that describes pasted images instead of answering (loop/images.py).
    describing: Describing | None = None


class CompactionReason(enum.StrEnum):
    """Why a compaction runs. Stored by value."""

    THRESHOLD = "threshold"  # the next request would pass the window's threshold
    OVERFLOW = "overflow"  # the provider answered "context length exceeded"
    REQUESTED = "requested"  # the user's /summarize


class AfterSummary(enum.StrEnum):
    """What the turn does once the summary is in. Stored by value."""

    CALL_LLM = "call_llm"  # the model call that was about to go out, over the compacted view
    END = "end"  # nothing more (/summarize): the run ends with an empty answer


class AwaitSummary(_Waiting, frozen=True, tag="summary"):
    """A compaction's summary call is in flight. `cut`: the position in `messages` where the
    kept tail starts (everything before it is summarized); `tokens_before`: the estimate of
    the request that set it off; `summary_tokens`: the summary's answer bound (window.py;
    0: the summarizing model's own, as before it was planned per compaction)."""

    call_id: str
    cut: int
    reason: CompactionReason
    then: AfterSummary
    tokens_before: int = 0
    summary_tokens: int = 0


class PendingEffect(_Value, frozen=True):
    """What an answered call means beyond its text (a created plan, an approved mode switch),
    held with its early result until the result joins the history in call order."""

    tool_call_id: str
    effect: ToolEffect


class AwaitClient(_Waiting, frozen=True, tag="client"):
    """The tool calls of the last assistant message: every call the client answers is sent at
    once, answered in any order, and the results join the history in call order.

    `calls[:next]` have results in `messages`; `outstanding` are the operations sent to the
    client and not answered yet (the loop's own answers need none); `early` holds results of
    calls after `next` that came (or the loop made) before an earlier one's; they are appended
    once every call before them is. `operation_id` is the first outstanding operation (a state
    stored before `outstanding` existed has only it). `call_id` is the LLM call that asked.
    """

    call_id: str
    calls: tuple[ToolCall, ...]
    next: int
    operation_id: str
    early: tuple[ToolResultMessage, ...] = ()
    # A call of this message asked for the turn to end once all are answered (CreatePlan).
    ends_turn: bool = False
    outstanding: tuple[str, ...] = ()
    effects: tuple[PendingEffect, ...] = ()

    def unanswered(self) -> tuple[str, ...]:
        """The operations the client still owes an answer."""
        if self.outstanding or not self.operation_id:
            return self.outstanding
        return (self.operation_id,)


class AwaitDefinitions(_Waiting, frozen=True, tag="definitions"):
    """The turn began and its first model call waits on the read of `paths`, the MCP
    definition files its tools need (definitions.py): one DefinitionsRead answers them."""

    paths: tuple[str, ...]


Waiting: TypeAlias = AwaitLLM | AwaitClient | AwaitSummary | AwaitDefinitions


class PlanRecord(_Value, frozen=True):
    """The conversation's plan, as the last successful CreatePlan left it: what a Build
    carries out when the IDE does not send the plan itself."""

    text: str
    uri: str = ""
    name: str = ""
    overview: str = ""
    todos: tuple[TodoItem, ...] = ()  # its steps: the todo list once it is built


class TodoReset(_Value, frozen=True):
    """A Build made its plan's steps the todo list: from its opening message (log position
    `at`) on, a view's list starts from `todos` (derived.todos_in_view)."""

    at: int
    todos: tuple[TodoItem, ...]


class PlanMark(_Value, frozen=True):
    """A plan a CreatePlan saved, and the log position of that call's tool result: the plan
    belongs to every view that selects the position (a rewind finds it again)."""

    at: int
    plan: PlanRecord


class CompactionMark(_Value, frozen=True):
    """A compaction: the summary message at log position `at`, followed in its epoch's view by
    a kept tail of `kept` messages. Append-only, like the log; a rewind finds the epoch of any
    turn by them."""

    at: int
    kept: int
    reason: CompactionReason
    tokens_before: int = 0
    tokens_after: int = 0
    call_id: str = ""
    # The todo list and plan when it ran: the summarized messages are outside the new view,
    # so a rewind into this epoch starts from these (derived.py).
    todos: tuple[TodoItem, ...] = ()
    plan: PlanRecord | None = None


class TurnStart(_Value, frozen=True, array_like=True):
    """A turn of the active branch: the closed view of the history it began from. The end of
    turn k is where turn k+1 began (the current view for the last turn), so a rewind to the
    end of any turn, in any compaction epoch, finds its view here."""

    view: tuple[Span, ...]
    # The conversation the turn was made in, when it is not this one: a fork's first turns are
    # its source's, and their checkpoint blobs name the source, as the client holds them.
    conversation: str = ""


class MeterBasis(_Value, frozen=True):
    """The prompt of the active history's last model call: its characters per category and
    the provider's prompt tokens for it (0: none reported, the estimate stands). A checkpoint's
    meter is this, scaled (meter.meter_of_state): no pass over the history."""

    chars: PromptChars
    used: int = 0


class ConversationState(_Value, frozen=True):
    conversation_id: str
    turn_id: str
    messages: tuple[Message, ...] = ()  # the active history: `view` over `log`
    waiting: Waiting | None = None
    status: Status = Status.READY
    last_commit_id: str = ""
    turn: int = 0
    commit: int = 0
    llm_calls: int = 0  # LLM calls issued in the current turn
    context: TurnContext | None = None  # the context of the current (or last) turn
    queued: tuple[UserMessage, ...] = ()  # user messages that arrived while busy (steering)
    # The context a queued follow-up brought; it applies from the call its message joins.
    queued_context: TurnContext | None = None
    log: tuple[Message, ...] = ()  # every committed message, append-only
    view: tuple[Span, ...] = WHOLE_LOG
    # The todo list (TodoWrite, todos.py): the seed, then the TodoWrite calls of the active
    # history from log position `todo_from` on (derived.todos_in_view).
    todos: tuple[TodoItem, ...] = ()
    # The IDE's checkpoint todos, taken once for a conversation this server did not know; the
    # history it brought (log[:todo_from]) is covered by them, its TodoWrite calls are not replayed.
    todo_seed: tuple[TodoItem, ...] = ()
    todo_from: int = 0
    # The plan the active history's last successful CreatePlan saved (a Build's fallback), and
    # every plan saved, by log position: a rewind takes the view's last (derived.plan_in_view).
    plan: PlanRecord | None = None
    plans: tuple[PlanMark, ...] = ()
    todo_resets: tuple[TodoReset, ...] = ()  # each Build that set the list to its plan's steps
    # Every compaction, in log order (compaction.py), and the position in `messages` from which
    # the history was sent after the view's last compaction: the provider's usage of an answer
    # before it measured a request that no longer exists.
    compactions: tuple[CompactionMark, ...] = ()
    fresh_from: int = 0
    # The turns of the active branch, oldest first, across compaction epochs (the client's
    # checkpoint lists one blob per turn: derived.turn_ends). A rewind truncates them.
    turn_starts: tuple[TurnStart, ...] = ()
    # The context meter of the last model call of the active history; None: none yet (or a
    # state stored before it was kept): meter_of_state then measures the history once.
    meter_basis: MeterBasis | None = None
    # The MCP definition files this run read (definitions.py), per path: the run's Start
    # empties it, its later turns (follow-ups) take their tools' files from it.
    definitions: tuple[DefinitionFile, ...] = ()

    @classmethod
    def new(cls, conversation_id: str) -> ConversationState:
        """An empty conversation: status Ready, no messages, no turn yet."""
        return cls(
            conversation_id=conversation_id,
            turn_id=ids.turn_id(conversation_id, 0),
            last_commit_id=ids.commit_id(conversation_id, 0),
        )

    @property
    def busy(self) -> bool:
        return self.status in BUSY


class _KindNode(_Value, frozen=True, array_like=True):
    """A cons cell of the block kinds seen so far, newest first (O(1) to extend)."""

    kind: BlockKind
    prev: _KindNode | None = None


class PendingResponse(_Value, frozen=True):
    """Bookkeeping for the stream of `call_id`. Discarded on done, error and cancel."""

    call_id: str
    events: int = 0
    deltas: int = 0
    blocks: int = 0  # *_start events seen
    open_blocks: int = 0  # *_start minus *_end
    kinds: _KindNode | None = None

    def block_kinds(self) -> tuple[BlockKind, ...]:
        """Kinds of the started blocks in content order (O(blocks), used once at done)."""
        out: list[BlockKind] = []
        node = self.kinds
        while node is not None:
            out.append(node.kind)
            node = node.prev
        out.reverse()
        return tuple(out)


class RuntimeState(_Value, frozen=True):
    committed: ConversationState
    pending_response: PendingResponse | None = None

    @classmethod
    def new(cls, conversation_id: str) -> RuntimeState:
        return cls(committed=ConversationState.new(conversation_id))

    @classmethod
    def of(cls, committed: ConversationState) -> RuntimeState:
        """The runtime view of a state loaded from the store (nothing pending)."""
        return cls(committed=committed)

    @property
    def status(self) -> Status:
        return self.committed.status

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.committed.messages
