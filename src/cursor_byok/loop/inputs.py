"""The semantic inputs of the loop. Transports decode their wire messages into these; the
runtime adds the ones it observes itself (a stream event, a tool deadline, a reopened run)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from cursor_byok.llm import types as llm
from cursor_byok.llm.events import ResponseEvent

from .context import DEFAULT_CONTEXT, TurnContext
from .definitions import DefinitionFile
from .limits import Limit
from .todos import TodoItem
from .view import Span

if TYPE_CHECKING:  # a fork carries its source's state, which is never encoded as an input
    from .state import ConversationState


class _Input(msgspec.Struct, frozen=True, tag_field="input", omit_defaults=True):
    pass


DEFAULT_MAX_DEPTH = 2  # server.subagent_max_depth's default


class ParentCall(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The parent's Task call a child run was matched to."""

    parent_conversation_id: str
    depth: int  # the parent's depth
    root_conversation_id: str


class Helper(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """What the runtime saw of a run request's place among subagents.

    `child`: the request is a child run's (transport/cursor/children.py), of `subagent_type`;
    `parent`: the Task call of this process it was matched to (None: not known here);
    `max_depth`: server.subagent_max_depth, the depth at which Task is no longer offered."""

    child: bool = False
    subagent_type: str = ""
    parent: ParentCall | None = None
    max_depth: int = DEFAULT_MAX_DEPTH


class HelperReport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A finished helper's final message, read from its own conversation."""

    conversation_id: str
    text: str


class ForkOf(msgspec.Struct, frozen=True):
    """A chat forked from a conversation of this server (forks.py): the source's committed
    state, and the turn of it the fork starts after: `turns` (0: its latest state), whose end
    view the store's record of the source's checkpoint gave as `view` (the loop checks it
    against the source's own turn marks)."""

    source: ConversationState
    turns: int = 0
    view: tuple[Span, ...] = ()


class Start(_Input, frozen=True, tag="start"):
    """A run request: the user's message and the context for this turn.

    `history`: messages the client holds for a conversation this server has never seen; they
    open the log of a new conversation (ignored once it has one). `todos`: the todo list of the
    client's checkpoint, taken on the same terms (our own list wins once we know the
    conversation)."""

    user_message: llm.UserMessage
    context: TurnContext = DEFAULT_CONTEXT
    history: tuple[llm.Message, ...] = ()
    todos: tuple[TodoItem, ...] = ()
    # Set for a Build: the turn opens with the loop's own message carrying the plan, and
    # `user_message` is not used.
    build: PlanBuild | None = None
    # Where the run sits among subagents, as the runtime saw it (loop/subagents.py places it;
    # None: `context` is taken as placed already).
    helper: Helper | None = None
    # A background completion's finished helpers: their final messages join `user_message`.
    reports: tuple[HelperReport, ...] = ()
    # A fork of one of ours, for a conversation this server has never seen: the new
    # conversation opens with a copy of the source's log, turns and epochs up to the fork
    # (forks.py); `history` is not used then.
    fork: ForkOf | None = None


class Note(_Input, frozen=True, tag="note"):
    """Something the user did outside a turn that the model should know of later (a command
    typed into the chat's terminal): `message` joins the history, no model call is made, and
    the run ends with an empty turn."""

    message: llm.UserMessage


class LLMEvent(_Input, frozen=True, tag="llm_event"):
    """One event of the stream opened for `call_id`."""

    call_id: str
    event: ResponseEvent


class PlanCreated(msgspec.Struct, frozen=True, tag="plan_created", omit_defaults=True):
    """A CreatePlan call succeeded: the IDE saved `plan` as the document at `uri`."""

    plan: str
    uri: str = ""
    name: str = ""
    overview: str = ""
    todos: tuple[TodoItem, ...] = ()  # the plan's steps (a Build makes them the todo list)


class ModeSwitched(msgspec.Struct, frozen=True, tag="mode_switched"):
    """The user approved a SwitchMode call: the conversation moves to `mode`."""

    mode: str


ToolEffect: TypeAlias = PlanCreated | ModeSwitched


class ToolResult(_Input, frozen=True, tag="tool_result"):
    """The client's answer to a tool call, matched by `message.tool_call_id` only.

    `effect`: what the answer means for the conversation beyond the text the model reads (a
    plan the IDE saved, a mode the user approved); the loop decides what follows from it."""

    message: llm.ToolResultMessage
    effect: ToolEffect | None = None


class PlanBuild(msgspec.Struct, frozen=True, omit_defaults=True):
    """The IDE's Build button (execute_plan_action): carry out a plan. `plan` and `uri` are
    what the IDE sent (empty: use the conversation's recorded plan)."""

    plan: str = ""
    uri: str = ""


class UserMessage(_Input, frozen=True, tag="user_message"):
    """A follow-up user message on a run: starts a turn when idle, steers when busy.

    `context`: the context the follow-up brought (None: keep the turn's); `mode`: the mode it
    asked for (None: keep the context's)."""

    message: llm.UserMessage
    context: TurnContext | None = None
    mode: str | None = None


class Cancel(_Input, frozen=True, tag="cancel"):
    """The user canceled the turn."""

    reason: str = "canceled by the user"


class Supersede(_Input, frozen=True, tag="supersede"):
    """A newer run request for this conversation arrived while this run holds it."""

    reason: str = "a newer request for this conversation arrived"


class ClientGone(_Input, frozen=True, tag="client_gone"):
    """The client's stream of this run is gone for good and no cancel came: it closed an
    HTTP/2 `Run` (which cannot be reopened), or did not reopen its `RunSSE` within the shim's
    reconnect grace, `grace_s` (design §14.2; 0 for a closed stream). The loop cancels the
    turn: nobody will read its answer."""

    grace_s: float = 0.0


class SuspendCause(enum.StrEnum):
    SHUTDOWN = "shutdown"  # the server is stopping
    MOVED = "moved"  # the same run was reopened on another replica, which goes on with it


class Suspend(_Input, frozen=True, tag="suspend"):
    """The run stops here without deciding its turn. The committed state stays as it is, so
    the run reopened (after the restart, or on the other replica) resumes the turn, sending
    an interrupted call again from its stored bytes; the model or summary call in flight
    here ends, its record saying why."""

    cause: SuspendCause


class ToolOperation(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the store knows of the client operation a turn waits on."""

    operation_id: str
    sent: bool = False  # the request went to the client
    result: llm.ToolResultMessage | None = None  # its answer, when one was recorded


class HelperFound(_Input, frozen=True, tag="helper_found"):
    """The runtime's answer to FindHelper: the Task call's result built from its helper's
    final message, or None when no ended helper of it was found in time (the outcome stays
    unknown, as for any side-effecting call whose answer was lost)."""

    operation_id: str
    result: llm.ToolResultMessage | None = None
    operations: tuple[ToolOperation, ...] = ()  # FindHelper's, carried back


class Resume(_Input, frozen=True, tag="resume"):
    """Continue from the committed state: a run reopened after a restart or a reconnect, the
    same run request seen again, or a state that changed under the run.

    `turn_id`: the turn the run was driving (None for a reopened run, which takes whatever
    turn the conversation is in); `operations`: the store's record of each operation the turn
    waits on, when it waits on the client (`operation`: the first of them)."""

    turn_id: str | None = None
    operation: ToolOperation | None = None
    operations: tuple[ToolOperation, ...] = ()

    def records(self) -> dict[str, ToolOperation]:
        """The store's records by operation id."""
        found = {op.operation_id: op for op in self.operations}
        if self.operation is not None:
            found.setdefault(self.operation.operation_id, self.operation)
        return found


class LostCause(enum.StrEnum):
    TIMED_OUT = "timed_out"  # the client did not answer within the tool deadline
    ANSWER_LOST = "answer_lost"  # sent, but the answer never came back (restart, disconnect)


class ToolLost(_Input, frozen=True, tag="tool_lost"):
    """The operation the turn waits on will not be answered: its outcome is unknown."""

    operation_id: str
    cause: LostCause
    waited_ms: int | None = None


class SummaryDone(_Input, frozen=True, tag="summary_done"):
    """The summary call `call_id` answered: `message` is its whole answer (its text is the
    summary, its usage the call's)."""

    call_id: str
    message: llm.AssistantMessage


class SummaryFailed(_Input, frozen=True, tag="summary_failed"):
    """The summary call `call_id` failed (`message` says how; never appended)."""

    call_id: str
    message: llm.AssistantMessage


class Compact(_Input, frozen=True, tag="compact"):
    """The user's /summarize: compact the conversation now, whatever its size."""


class CallRefused(_Input, frozen=True, tag="call_refused"):
    """The runtime's admission answer for model call `call_id` (a CallLLM, a resent call, a
    summary call): a person token's `limit` refuses it, `message` says so in words naming the
    limit. Answered before the call's commit (admission.py); a call admitted needs no input."""

    call_id: str
    limit: Limit
    message: str


class Admitted(msgspec.Struct, frozen=True):
    """The admission answer that lets a planned model call go out as planned."""


ADMITTED = Admitted()

# The runtime's answer to each model call the loop plans, before that call's commit.
Admission: TypeAlias = Admitted | CallRefused


class DefinitionsRead(_Input, frozen=True, tag="definitions_read"):
    """The runtime's answer to ReadDefinitions: what each file's read gave (a path the
    command named and `files` does not is a failed read)."""

    files: tuple[DefinitionFile, ...]


class TurnMarksFound(_Input, frozen=True, tag="turn_marks_found"):
    """The turns the store recorded as published for a conversation stored before the loop
    kept its own marks (`turn_starts`): `ends`, the closed view at the end of each, oldest
    first. The loop rebuilds its marks from them (recovery.on_turn_marks_found), so a rewind
    to those turns works again."""

    ends: tuple[tuple[Span, ...], ...]


class Rewind(_Input, frozen=True, tag="rewind"):
    """The client's checkpoint is behind ours: it went back to the end of an earlier turn.
    `turns`: its checkpoint lists our first `turns` turns; the loop restores the end of the
    last of them from its turn marks (`turn_starts`), in whatever compaction epoch it was.
    `view` instead (turns 0): restore exactly that active history (closed spans over the log)."""

    turns: int = 0
    view: tuple[Span, ...] = ()


Input: TypeAlias = (
    Start
    | Note
    | LLMEvent
    | ToolResult
    | UserMessage
    | Cancel
    | Supersede
    | ClientGone
    | Suspend
    | Resume
    | HelperFound
    | ToolLost
    | Rewind
    | SummaryDone
    | SummaryFailed
    | Compact
    | CallRefused
    | DefinitionsRead
    | TurnMarksFound
)

# The same class, for callers that also import the LLM's UserMessage.
UserMessageInput = UserMessage
