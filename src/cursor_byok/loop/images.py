"""Images the user pastes, for a model that reads text only: never a silent image_url to it.

Which models read images is configuration (`vision`), handed to the loop as
`TurnContext.images`; None (not said) forwards images as they are. For a model without vision:

- with a `vision_model` (`TurnContext.vision_model`), the message that opens a turn waits
  while that model describes its images: one call (`describe`, a `CallLLM` to that model,
  admitted and charged like any call, its stream shown to nobody). The message then joins the
  history with a marker in place of each image and the description after the last one, and
  the turn's own call follows. The description is part of the stored message, so every later
  request carries the same bytes; a run resumed before its answer was committed sends the
  describing call again from its stored bytes, one resumed after it never describes again.
- without one, or when the describing call fails: a note in place of each image, and the user
  is told (a server notice) once per message. A turn that ends while its images are being
  described (a cancel, a newer run) keeps the message with the notes.

A steering message (sent while a turn is busy) waits in the queue with its images when a
vision model will describe them: it joins the history before the turn's next call, after its
own describing call (`after_queue`); without a vision model it waits with the notes.

Images already in the history (pasted in a turn of a model that reads them, or a tool's result
for one) stay stored as they are; a model without vision is sent each such message with a note
in place of each image (`image_notes.sendable`), the same copy every call, so its requests
still extend each other byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.events import DoneEvent, ErrorEvent, ResponseEvent
from cursor_byok.llm.types import ImageContent, RequestMessages, TextContent
from cursor_byok.llm.types import UserMessage as LLMUserMessage

from . import ids
from .commands import CONTINUE_LLM, CallLLM, Canceled
from .context import TurnContext
from .image_notes import noted
from .model_calls import call_llm, first_call
from .state import AwaitLLM, ConversationState, Describing, RuntimeState, Status
from .step import (
    CallEnd,
    CallOutcome,
    Transition,
    commit,
    context_of,
    flush_queue,
    settle,
    with_messages,
)

_replace = msgspec.structs.replace

USER_NOTICE = (
    "This model reads text only, so the image you attached was not sent to it; it was told "
    "an image was there. Pick a model configured with `vision = true` to have it read images."
)

# The describing call's answer bound, and how much of the user's text it gets as context.
DESCRIPTION_TOKENS = 2048
CONTEXT_CHARS = 2000
WHY_CHARS = 200

DESCRIBE_SYSTEM = (
    "You describe images for a coding assistant that cannot see them. It will answer the "
    "user from your description alone, so be exact and complete, and concise."
)
DESCRIBE_TEXT = (
    "Describe the attached image(s). Transcribe every piece of visible text exactly (code, "
    "error messages, logs, labels, URLs), then describe the layout, any UI state, diagram, "
    "chart or picture, and anything that looks wrong. No preamble. With several images, "
    "describe each under its own heading: Image 1, Image 2, in order."
)


def _has_images(message: LLMUserMessage) -> bool:
    return any(isinstance(p, ImageContent) for p in message.content)


def withhold_images(
    context: TurnContext, message: LLMUserMessage
) -> tuple[LLMUserMessage, tuple[str, ...]]:
    """`message` as the run's model may read it without a description, and the notices for
    the user."""
    if context.images is not False or not _has_images(message):
        return message, ()
    return noted(message)[0], (USER_NOTICE,)


def describes(context: TurnContext, said: LLMUserMessage) -> bool:
    """Whether the turn `said` opens first has its images described (a vision_model)."""
    return context.images is False and bool(context.vision_model) and _has_images(said)


def describe_request(said: LLMUserMessage) -> RequestMessages:
    """The describing call's request: our prompt, the user's own text as context (bounded;
    never the turn's supplements), then the images in their order."""
    images = tuple(p for p in said.content if isinstance(p, ImageContent))
    text = " ".join(p.text for p in said.content if isinstance(p, TextContent)).strip()
    prompt = DESCRIBE_TEXT
    if text:
        prompt += (
            "\n\nThe user's message that came with them, for context only (do not answer "
            f"it):\n{text[:CONTEXT_CHARS]}"
        )
    user = LLMUserMessage(content=(TextContent(text=prompt), *images))
    return RequestMessages(system_prompt=DESCRIBE_SYSTEM, messages=(user,), tools=())


def describe(c: ConversationState, message: LLMUserMessage, said: LLMUserMessage) -> Transition:
    """The describing call for a turn just begun (`c`: its mark and context set, nothing
    appended yet); `message` opens the turn once the call ends, `said` is the user's part."""
    model = c.context.vision_model if c.context is not None else ""
    notes, marks = noted(message)
    n = c.llm_calls + 1
    call = ids.vision_call_id(c.turn_id, n)
    request = describe_request(said)
    digest = messages_hash(request.messages)
    waiting = AwaitLLM(
        call_id=call,
        messages_hash=digest,
        describing=Describing(message=notes, images=marks, model=model),
    )
    c2 = commit(c, llm_calls=n, status=Status.WAITING_LLM, waiting=waiting)
    command = CallLLM(
        call_id=call,
        request=request,
        messages_hash=digest,
        model=model,
        max_output_tokens=DESCRIPTION_TOKENS,
    )
    return settle(c2, (), command)


def described_message(d: Describing, text: str) -> LLMUserMessage:
    """The held message with a marker in place of each image and the description after the
    last one: what the model reads, stored as it is."""
    parts = list(d.message.content)
    n = len(d.images)
    for k, mark in enumerate(d.images, 1):
        which = f"Image {k} of {n}" if n > 1 else "Image"
        parts[mark.at] = TextContent(text=f"[{which}: {mark.mime_type}, about {mark.kb} KB]")
    them = "them" if n > 1 else "it"
    description = TextContent(
        text=(
            f"[You cannot see images, so the vision model {d.model} looked at the attached "
            f"image{'s' if n > 1 else ''} and described {them} for you:\n{text}\n]"
        )
    )
    parts.insert(d.images[-1].at + 1 if d.images else len(parts), description)
    return LLMUserMessage(content=tuple(parts))


def on_describing_event(
    state: RuntimeState, waiting: AwaitLLM, d: Describing, event: ResponseEvent
) -> Transition:
    """An event of the describing call: nothing is shown while it streams; its answer puts
    the description in, its failure the notes."""
    c = state.committed
    match event:
        case DoneEvent(message=answer):
            text = answer.text.strip()
            if text:
                notice = (
                    f"This model reads text only, so {d.model} described the image you "
                    "attached and the model read that description."
                )
                end = CallEnd(waiting.call_id, CallOutcome.COMMITTED)
                return _joined(c, described_message(d, text), end, notice)
            return _failed(c, waiting, d, "the vision model answered no text")
        case ErrorEvent(reason="aborted"):
            end = CallEnd(waiting.call_id, CallOutcome.CANCELED, event.error_message)
            c2 = commit(
                with_messages(c, d.message),
                status=Status.CANCELED,
                waiting=None,
                queued=(),
                queued_context=None,
            )
            return settle(c2, (), Canceled(reason=event.error_message), call_end=end)
        case ErrorEvent():
            return _failed(c, waiting, d, event.error_message or "the call failed")
        case _:
            return Transition(state, (), CONTINUE_LLM)


def _failed(c: ConversationState, waiting: AwaitLLM, d: Describing, why: str) -> Transition:
    notice = (
        f"This model reads text only, and {d.model} could not describe the image you "
        f"attached ({why[:WHY_CHARS]}); the model was told an image was there."
    )
    return _joined(c, d.message, CallEnd(waiting.call_id, CallOutcome.FAILED, why), notice)


def _joined(c: ConversationState, message: LLMUserMessage, end: CallEnd, notice: str) -> Transition:
    """The described message joins the history (steering that came meanwhile after it), then
    the turn's next call (a turn's first after its MCP definition files, when it needs some)."""
    t = after_queue(_replace(with_messages(c, message), waiting=None), first_call)
    return _replace(t, call_end=end, notices=(notice, *t.notices))


def after_queue(
    c: ConversationState, then: Callable[[ConversationState], Transition] = call_llm
) -> Transition:
    """Steering: the queued messages join the history before the turn's next call (`then`).
    A queued message with images (kept for a vision_model, `queued_for`) has them described
    first: the messages before it join now, those after it once it has joined."""
    queued = c.queued
    at = next((i for i, m in enumerate(queued) if _has_images(m)), -1)
    if at < 0:
        return then(flush_queue(c))
    c2 = _replace(flush_queue(_replace(c, queued=queued[:at])), queued=queued[at + 1 :])
    message = queued[at]
    context = context_of(c2)
    if describes(context, message):
        return describe(c2, message, message)
    said, notices = withhold_images(context, message)  # the model changed meanwhile
    t = after_queue(with_messages(c2, said), then)
    return _replace(t, notices=(*notices, *t.notices)) if notices else t


def queued_for(
    context: TurnContext, said: LLMUserMessage
) -> tuple[LLMUserMessage, tuple[str, ...]]:
    """A steering message as it waits in the queue: with its images when a vision model will
    describe them before it joins (`after_queue`), else with the notes, and the notices."""
    if describes(context, said):
        return said, ()
    return withhold_images(context, said)


def held_message(waiting: object) -> LLMUserMessage | None:
    """The opening message a describing call holds (with its notes), for a turn that ends
    before the call does."""
    if isinstance(waiting, AwaitLLM) and waiting.describing is not None:
        return waiting.describing.message
    return None
