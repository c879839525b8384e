"""How a turn starts and how a busy one is closed: a run request (`Start`), a note from outside
a turn (`Note`), a follow-up (`UserMessage`: a new turn, or steering)."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.types import TextContent, ToolResultMessage
from cursor_byok.llm.types import UserMessage as LLMUserMessage

from . import definitions as files
from . import derived, ids
from .commands import WAIT_INPUT, Final
from .context import TurnContext
from .forks import forked
from .images import after_queue, describe, describes, held_message, queued_for, withhold_images
from .inputs import DefinitionsRead, Note, Start, UserMessage
from .model_calls import call_llm, first_call
from .results import (
    CALL_SUPERSEDED,
    CANCELED_RESULT_TEXT,
    build_message,
    error_result,
    loop_answer,
)
from .state import (
    AwaitClient,
    AwaitDefinitions,
    AwaitLLM,
    AwaitSummary,
    ConversationState,
    RuntimeState,
    Status,
    TodoReset,
)
from .step import (
    CallEnd,
    CallOutcome,
    Ignored,
    LocalResult,
    Transition,
    commit,
    content_index,
    context_of,
    ignore,
    prepend,
    settle,
    take_early,
    with_messages,
)
from .subagents import kept_place, start_context, with_reports

_replace = msgspec.structs.replace


def opening_message(context: TurnContext, user_message: LLMUserMessage) -> LLMUserMessage:
    """The one message that opens a turn: supplements as text parts, then the user's parts."""
    if not context.supplements:
        return user_message
    parts = tuple(TextContent(text=s) for s in context.supplements)
    return LLMUserMessage(content=parts + user_message.content)


def without_supplements(context: TurnContext) -> TurnContext:
    # Supplements belong to the opening message of their turn only.
    return _replace(context, supplements=()) if context.supplements else context


def _opened_turn(c: ConversationState, context: TurnContext) -> ConversationState:
    """`c` with a new turn begun (its mark, id and context), nothing appended yet."""
    turn = c.turn + 1
    return _replace(
        derived.opened(c),
        turn=turn,
        turn_id=ids.turn_id(c.conversation_id, turn),
        context=without_supplements(files.filled(context, c.definitions)),
        llm_calls=0,
        waiting=None,
        queued=(),
        queued_context=None,
    )


def begin_turn(c: ConversationState, context: TurnContext, message: LLMUserMessage) -> Transition:
    """Open a turn with `message`; its first model call goes out now, or once the MCP
    definition files its tools need and the run has not read are read (definitions.py)."""
    return first_call(with_messages(_opened_turn(c, context), message))


def open_turn(c: ConversationState, context: TurnContext, said: LLMUserMessage) -> Transition:
    """A new turn for the user's message `said`: its pasted images described first for a
    model without vision that has a vision_model, else noted (loop/images.py)."""
    if describes(context, said):
        return describe(_opened_turn(c, context), opening_message(context, said), said)
    said, notices = withhold_images(context, said)
    return _told(begin_turn(c, context, opening_message(context, said)), notices)


def on_definitions_read(state: RuntimeState, input: DefinitionsRead) -> Transition:
    """The definition files the turn waited on: kept for the run, per path, and the turn's
    tools offered with what they say (a failed read with a note); then the first model call,
    after the follow-ups that came meanwhile."""
    c = state.committed
    waiting = c.waiting
    if c.status != Status.READING or not isinstance(waiting, AwaitDefinitions):
        return ignore(state, Ignored.NOT_AWAITED)
    read = (*c.definitions, *files.answered(waiting.paths, input.files))

    def then(c2: ConversationState) -> Transition:
        return call_llm(_replace(c2, context=files.filled(context_of(c2), read)))

    return after_queue(_replace(c, definitions=read, waiting=None), then)


def close_turn(
    c: ConversationState, reason: str
) -> tuple[ConversationState, tuple[LocalResult, ...], CallEnd | None]:
    """End the turn in progress (uncommitted): every tool call of the current message without a
    result gets one (an early result if one arrived, else "canceled"), in call order, so the
    history keeps a valid call/result pairing; a model call in flight ends canceled. Partial
    model output is never appended."""
    waiting = c.waiting
    if c.status == Status.WAITING_CLIENT and isinstance(waiting, AwaitClient):
        early = list(waiting.early)
        closing: list[ToolResultMessage] = []
        local: list[LocalResult] = []
        for call in waiting.calls[waiting.next :]:
            found = take_early(early, call.id)
            if found is None:
                found = error_result(call, CANCELED_RESULT_TEXT)
                index = content_index(c.messages, call.id)
                local.append(LocalResult(call, waiting.call_id, index, found))
            closing.append(found)
        return with_messages(c, *closing), tuple(local), None
    if c.status == Status.WAITING_LLM and isinstance(waiting, AwaitLLM):
        held = held_message(waiting)  # the opening message, its images being described
        if held is not None:
            c = with_messages(c, held)
        return c, (), CallEnd(waiting.call_id, CallOutcome.CANCELED, reason)
    if c.status == Status.SUMMARIZING and isinstance(waiting, AwaitSummary):
        # The summary is dropped; the history stays as it was, unsummarized.
        return c, (), CallEnd(waiting.call_id, CallOutcome.CANCELED, reason)
    return c, (), None


def on_start(state: RuntimeState, input: Start) -> Transition:
    """A run request. A conversation still busy with a turn of a run that is gone (or that was
    told to give way, see Supersede) has that turn closed first: a newer run supersedes the
    busy one and starts from the committed state."""
    c = state.committed
    call_end: CallEnd | None = None
    if c.busy:
        # Closed without cards: the tool calls belonged to another run's client stream.
        c, _, call_end = close_turn(c, CALL_SUPERSEDED)
    if c.definitions:  # what a run read is its own: this run reads its files again
        c = _replace(c, definitions=())
    if not c.log and c.commit == 0 and input.fork is not None:
        c = forked(c, input.fork)  # the source's turns, epochs and list up to the fork
    else:
        if not c.log and input.history:
            c = with_messages(c, *input.history)
        if c.commit == 0 and c.log:  # the client's history and list, for a new conversation
            c = _replace(c, todos=input.todos, todo_seed=input.todos, todo_from=len(c.log))
        elif c.commit == 0 and input.todos:
            c = _replace(c, todos=input.todos, todo_seed=input.todos)
    message = with_reports(input.user_message, input.reports)
    if input.build is not None:
        plan = derived.plan_to_build(c, input.build)
        message = build_message(plan)
        if plan.todos:  # the plan's steps are the todo list from the Build on
            reset = TodoReset(at=len(c.log), todos=plan.todos)
            c = _replace(c, todos=plan.todos, todo_resets=(*c.todo_resets, reset))
    context = start_context(input, state.committed)
    return prepend((), open_turn(c, context, message), call_end)


def _told(t: Transition, notices: tuple[str, ...]) -> Transition:
    return _replace(t, notices=t.notices + notices) if notices else t


def on_note(state: RuntimeState, input: Note) -> Transition:
    """A note from outside a turn: appended to the history (a busy turn of a run that is gone
    is closed first, as for Start); no model call; the run ends with an empty answer that is
    not appended. The conversation is then FINAL, so a replay of this input ends the same way.
    """
    c = state.committed
    call_end: CallEnd | None = None
    if c.busy:
        c, _, call_end = close_turn(c, CALL_SUPERSEDED)
    c2 = commit(
        with_messages(derived.opened(c), input.message),  # a turn of the checkpoint too
        status=Status.FINAL,
        waiting=None,
        queued=(),
        queued_context=None,
    )
    return settle(c2, (), Final(message=loop_answer("")), call_end=call_end)


def _follow_up_context(c: ConversationState, input: UserMessage) -> TurnContext | None:
    """The context a follow-up asks for, or None when it asks for nothing new."""
    if input.context is None and input.mode is None:
        return None
    base = input.context
    if base is None:
        base = c.queued_context if c.queued_context is not None else context_of(c)
    elif c.context is not None:
        base = kept_place(base, c.context)
    if input.mode is not None and input.mode != base.mode:
        base = _replace(base, mode=input.mode)
    return files.filled(base, c.definitions)  # the files this run read (definitions.py)


def on_user_message(state: RuntimeState, input: UserMessage) -> Transition:
    c = state.committed
    asked = _follow_up_context(c, input)
    context = asked if asked is not None else context_of(c)
    if not c.busy:
        return open_turn(c, context, input.message)
    # Steering: joins the history before the turn's next model call (images: queued_for).
    said, notices = queued_for(context, input.message)
    c2 = commit(
        c,
        queued=(*c.queued, opening_message(context, said)),
        queued_context=(without_supplements(asked) if asked is not None else c.queued_context),
    )
    return Transition(RuntimeState(c2, state.pending_response), (), WAIT_INPUT, notices=notices)
