"""Issue 24 §6: a pasted image for a model without vision that has a `vision_model`. The loop
holds the opening message, has the vision model describe the images (one call, shown to no
one), then stores the message with the description in place of the images and makes the
turn's own call; a failed description falls back to the note. Whole values asserted."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.canonical import messages_hash
from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import ImageContent, TextContent
from cursor_byok.llm.types import UserMessage as LLMUserMessage
from cursor_byok.loop import (
    AwaitLLM,
    CallEnd,
    CallLLM,
    CallOutcome,
    CallRefused,
    Cancel,
    Canceled,
    Describing,
    Failed,
    FailureKind,
    Final,
    ImageMark,
    Limit,
    ResendLLM,
    Resume,
    RuntimeState,
    Start,
    Status,
    Transition,
    TurnContext,
    UserMessage,
    admit,
    transition,
)
from cursor_byok.loop.image_notes import image_note
from cursor_byok.loop.images import (
    DESCRIBE_SYSTEM,
    DESCRIBE_TEXT,
    DESCRIPTION_TOKENS,
    USER_NOTICE,
    described_message,
)
from cursor_byok.loop.results import loop_failure
from tests.loop.loop_helpers import stream

CID = "conv"
VISION = "eye"
TEXT_ONLY = TurnContext(images=False, vision_model=VISION)
IMAGE = ImageContent(data="iVBORw0KGgo" * 200, mime_type="image/png")
SECOND = ImageContent(data="/9j/4AAQ" * 300, mime_type="image/jpeg")
DESCRIPTION = "A terminal showing: TypeError: x is undefined (line 3)."


def pasted(*images: ImageContent, text: str = "why does this fail?") -> LLMUserMessage:
    return LLMUserMessage(content=(TextContent(text=text), *images))


def opened(message: LLMUserMessage, context: TurnContext = TEXT_ONLY) -> Transition:
    return transition(RuntimeState.new(CID), Start(user_message=message, context=context))


def describe_prompt(text: str) -> str:
    return (
        DESCRIBE_TEXT + "\n\nThe user's message that came with them, for context only (do not "
        f"answer it):\n{text}"
    )


def notes_of(message: LLMUserMessage) -> LLMUserMessage:
    return LLMUserMessage(
        content=tuple(image_note(p) if isinstance(p, ImageContent) else p for p in message.content)
    )


def test_the_opening_message_waits_while_the_vision_model_describes_its_image() -> None:
    message = pasted(IMAGE)
    t = opened(message)
    request_user = LLMUserMessage(
        content=(TextContent(text=describe_prompt("why does this fail?")), IMAGE)
    )
    digest = messages_hash((request_user,))
    assert isinstance(t.command, CallLLM)
    assert t.command == CallLLM(
        call_id="conv:1:vision1",
        request=t.command.request,
        messages_hash=digest,
        model=VISION,
        max_output_tokens=DESCRIPTION_TOKENS,
    )
    assert t.command.request.system_prompt == DESCRIBE_SYSTEM
    assert t.command.request.messages == (request_user,)
    assert t.command.request.tools == ()
    c = t.state.committed
    # Nothing joined the history yet; the message waits with its notes (never its image).
    assert (c.log, c.messages, c.status, c.turn, c.llm_calls) == ((), (), Status.WAITING_LLM, 1, 1)
    kb = len(IMAGE.data) * 3 // 4 // 1024
    assert c.waiting == AwaitLLM(
        call_id="conv:1:vision1",
        messages_hash=digest,
        describing=Describing(
            message=notes_of(message),
            images=(ImageMark(at=1, mime_type="image/png", kb=kb),),
            model=VISION,
        ),
    )
    assert (t.emit, t.appended, t.notices) == ((), (), ())
    assert IMAGE.data[:40] not in msgspec.json.encode(c.waiting).decode()  # no image bytes


def test_the_description_stands_in_for_the_image_and_the_turn_goes_on() -> None:
    message = pasted(IMAGE)
    ts, _ = stream(opened(message).state, FauxResponse.text(DESCRIPTION))
    assert all(t.emit == () and t.notices == () for t in ts[:-1])  # nothing shown meanwhile
    done = ts[-1]
    kb = len(IMAGE.data) * 3 // 4 // 1024
    stored = LLMUserMessage(
        content=(
            TextContent(text="why does this fail?"),
            TextContent(text=f"[Image: image/png, about {kb} KB]"),
            TextContent(
                text=(
                    f"[You cannot see images, so the vision model {VISION} looked at the "
                    f"attached image and described it for you:\n{DESCRIPTION}\n]"
                )
            ),
        )
    )
    assert done.appended == (stored,)
    assert done.emit == ()
    assert done.call_end == CallEnd("conv:1:vision1", CallOutcome.COMMITTED)
    assert done.notices == (
        f"This model reads text only, so {VISION} described the image you attached and the "
        "model read that description.",
    )
    assert isinstance(done.command, CallLLM)
    assert (done.command.call_id, done.command.model) == ("conv:1:llm2", "")
    assert done.command.request.messages == (stored,)
    c = done.state.committed
    assert (c.log, c.messages, c.status, c.llm_calls) == (
        (stored,),
        (stored,),
        Status.WAITING_LLM,
        2,
    )
    assert isinstance(c.waiting, AwaitLLM) and c.waiting.describing is None

    # The turn's answer, then a second turn: its request extends the first one's messages.
    ts, _ = stream(done.state, FauxResponse.text("Line 3 reads x before it is set."))
    assert isinstance(ts[-1].command, Final)
    second = transition(ts[-1].state, UserMessage(message=LLMUserMessage.of_text("thanks")))
    assert isinstance(second.command, CallLLM)
    first_request = done.command.request.messages
    assert second.command.request.messages[: len(first_request)] == first_request
    assert second.command.request.messages[0] is done.appended[0]  # the stored value itself


def test_several_images_are_described_in_one_call_and_marked_in_place() -> None:
    message = LLMUserMessage(
        content=(TextContent(text="compare"), IMAGE, TextContent(text="with"), SECOND)
    )
    t = opened(message)
    assert isinstance(t.command, CallLLM)
    assert t.command.request.messages[0].content[1:] == (IMAGE, SECOND)
    waiting = t.state.committed.waiting
    assert isinstance(waiting, AwaitLLM) and waiting.describing is not None
    assert [m.at for m in waiting.describing.images] == [1, 3]
    stored = described_message(waiting.describing, "Image 1: a. Image 2: b.")
    texts = [p.text for p in stored.content if isinstance(p, TextContent)]
    assert len(stored.content) == 5 and len(texts) == 5
    assert texts[1].startswith("[Image 1 of 2: image/png") and texts[2] == "with"
    assert texts[3].startswith("[Image 2 of 2: image/jpeg")
    assert "described them for you:\nImage 1: a. Image 2: b.\n]" in texts[4]


def test_a_failed_description_falls_back_to_the_note_for_model_and_user() -> None:
    message = pasted(IMAGE)
    ts, _ = stream(opened(message).state, FauxResponse.error("vision provider down"))
    done = ts[-1]
    assert done.appended == (notes_of(message),)
    assert done.call_end == CallEnd("conv:1:vision1", CallOutcome.FAILED, "vision provider down")
    assert done.notices == (
        f"This model reads text only, and {VISION} could not describe the image you attached "
        "(vision provider down); the model was told an image was there.",
    )
    assert isinstance(done.command, CallLLM) and done.command.model == ""
    sent = done.command.request.messages
    assert sent == (notes_of(message),)
    assert not any(isinstance(p, ImageContent) for m in sent for p in getattr(m, "content", ()))


def test_an_empty_description_is_a_failure() -> None:
    ts, _ = stream(opened(pasted(IMAGE)).state, FauxResponse.text("   "))
    assert ts[-1].call_end == CallEnd(
        "conv:1:vision1", CallOutcome.FAILED, "the vision model answered no text"
    )
    assert ts[-1].appended == (notes_of(pasted(IMAGE)),)


def test_without_a_vision_model_the_note_stands_in_at_once() -> None:
    message = pasted(IMAGE)
    t = opened(message, TurnContext(images=False))
    assert t.appended == (notes_of(message),) and t.notices == (USER_NOTICE,)
    assert isinstance(t.command, CallLLM) and t.command.call_id == "conv:1:llm1"
    # A model that reads images gets the image itself, vision_model or not.
    seen = opened(message, TurnContext(images=True, vision_model=VISION))
    assert seen.appended == (message,) and seen.notices == ()
    # A message without images is never described.
    plain = opened(LLMUserMessage.of_text("hi"))
    assert isinstance(plain.command, CallLLM) and plain.command.call_id == "conv:1:llm1"


def test_a_resume_before_the_description_sends_the_same_call_again_and_after_never() -> None:
    describing = opened(pasted(IMAGE)).state
    waiting = describing.committed.waiting
    assert isinstance(waiting, AwaitLLM)
    again = transition(describing, Resume())
    assert again.command == ResendLLM(
        call_id="conv:1:vision1", messages_hash=waiting.messages_hash, model=VISION
    )
    assert again.state is describing
    ts, _ = stream(describing, FauxResponse.text(DESCRIPTION))
    after = transition(ts[-1].state, Resume())
    assert isinstance(after.command, ResendLLM)
    assert (after.command.call_id, after.command.model) == ("conv:1:llm2", "")


def test_a_refused_description_at_the_turns_opening_begins_no_turn() -> None:
    state = RuntimeState.new(CID)
    planned = transition(state, Start(user_message=pasted(IMAGE), context=TEXT_ONLY))
    why = "token 'alice' has spent its monthly budget"
    refusal = CallRefused(call_id="conv:1:vision1", limit=Limit.BUDGET, message=why)
    t = admit(state, planned, refusal)
    assert t.state is state  # nothing committed: the client sends the same message again
    assert t.command == Failed(
        message=loop_failure(why), kind=FailureKind.REFUSED, limit=Limit.BUDGET
    )


def test_a_refused_resumed_description_keeps_the_users_message() -> None:
    message = pasted(IMAGE)
    describing = opened(message).state
    refusal = CallRefused(call_id="conv:1:vision1", limit=Limit.RATE, message="over the rate")
    t = transition(describing, refusal)
    assert t.appended == (notes_of(message),)
    assert t.state.committed.status == Status.FAILED
    assert t.command == Failed(
        message=loop_failure("over the rate"), kind=FailureKind.REFUSED, limit=Limit.RATE
    )
    assert t.call_end == CallEnd("conv:1:vision1", CallOutcome.FAILED, "over the rate")


def test_a_cancel_while_describing_keeps_the_message_with_its_notes() -> None:
    message = pasted(IMAGE)
    t = transition(opened(message).state, Cancel(reason="user canceled"))
    assert t.appended == (notes_of(message),)
    assert t.command == Canceled(reason="user canceled")
    assert t.state.committed.status == Status.CANCELED and t.state.committed.waiting is None
    assert t.call_end is not None and t.call_end.call_id == "conv:1:vision1"
    assert t.call_end.outcome == CallOutcome.CANCELED


def test_steering_while_describing_is_described_in_its_turn_before_the_next_call() -> None:
    describing = opened(pasted(IMAGE)).state
    steer = pasted(SECOND, text="and this one")
    queued = transition(describing, UserMessage(message=steer))
    # It waits with its image (for the vision model), and nobody is told anything yet.
    assert queued.notices == () and queued.state.committed.queued == (steer,)
    ts, _ = stream(queued.state, FauxResponse.text(DESCRIPTION))
    first = ts[-1]
    assert len(first.appended) == 1 and "described it for you" in first.appended[0].text
    # Its own describing call next; the turn's call waits for it.
    assert isinstance(first.command, CallLLM)
    assert (first.command.call_id, first.command.model) == ("conv:1:vision2", VISION)
    assert first.command.request.messages[0].content[1:] == (SECOND,)
    c = first.state.committed
    assert c.queued == () and isinstance(c.waiting, AwaitLLM) and c.waiting.describing
    ts, _ = stream(first.state, FauxResponse.text("A second screenshot."))
    done = ts[-1]
    assert len(done.appended) == 1 and "A second screenshot." in done.appended[0].text
    assert done.appended[0].content[0] == TextContent(text="and this one")
    assert isinstance(done.command, CallLLM) and done.command.call_id == "conv:1:llm3"
    assert done.command.request.messages == (*first.appended, *done.appended)


def test_steering_with_an_image_while_a_tool_runs_is_described_after_its_result() -> None:
    from cursor_byok.loop import ToolResult
    from tests.loop.loop_helpers import result, tool_call

    t = opened(LLMUserMessage.of_text("look around"))
    ts, _ = stream(t.state, FauxResponse.tool_calls([tool_call("r1")]))
    steer = pasted(IMAGE, text="this is what I see")
    queued = transition(ts[-1].state, UserMessage(message=steer))
    after = transition(queued.state, ToolResult(message=result("r1")))
    assert len(after.appended) == 1  # the tool's result; the steering message waits
    assert isinstance(after.command, CallLLM) and after.command.model == VISION
    assert after.command.call_id == "conv:1:vision2"
    ts, _ = stream(after.state, FauxResponse.text(DESCRIPTION))
    done = ts[-1]
    assert DESCRIPTION in done.appended[0].text
    assert isinstance(done.command, CallLLM) and done.command.call_id == "conv:1:llm3"
    sent = done.command.request.messages
    assert sent[-1] is done.appended[0] and not any(
        isinstance(p, ImageContent) for m in sent for p in getattr(m, "content", ())
    )


def test_steering_without_a_vision_model_is_noted_at_once() -> None:
    t = opened(LLMUserMessage.of_text("hi"), TurnContext(images=False))
    steer = pasted(SECOND, text="and this")
    queued = transition(t.state, UserMessage(message=steer))
    assert queued.notices == (USER_NOTICE,)
    assert queued.state.committed.queued == (notes_of(steer),)


def test_after_the_description_the_turn_reads_its_mcp_definition_files_first() -> None:
    from cursor_byok.loop import (
        DefinitionFile,
        DefinitionsRead,
        McpServerInfo,
        McpToolInfo,
        ReadDefinitions,
    )

    path = "/ws/mcps/kb/tools/find.json"
    server = McpServerInfo(
        identifier="kb", name="kb", tools=(McpToolInfo(name="find", definition_path=path),)
    )
    context = msgspec.structs.replace(TEXT_ONLY, mcp_servers=(server,))
    t = opened(pasted(IMAGE), context)
    assert isinstance(t.command, CallLLM) and t.command.model == VISION  # the images first
    ts, _ = stream(t.state, FauxResponse.text(DESCRIPTION))
    done = ts[-1]
    assert done.command == ReadDefinitions(paths=(path,))
    assert done.state.committed.status == Status.READING
    assert len(done.appended) == 1 and "described it for you" in done.appended[0].text
    read = DefinitionFile(path=path, description="Find it.", parameters={"type": "object"})
    after = transition(done.state, DefinitionsRead(files=(read,)))
    assert isinstance(after.command, CallLLM) and after.command.call_id == "conv:1:llm2"
    assert after.command.request.messages == done.appended


def test_images_already_in_the_history_reach_a_text_only_model_as_notes() -> None:
    """An image pasted for a model that reads it stays stored; a later turn on a model
    without vision is sent that message with a note in its place, the very same copy at
    every call, so its requests still extend each other."""
    seeing = TurnContext(images=True)
    message = pasted(IMAGE)
    t = opened(message, seeing)
    ts, _ = stream(t.state, FauxResponse.text("A red square."))
    blind = TurnContext(images=False)
    second = transition(
        ts[-1].state, UserMessage(message=LLMUserMessage.of_text("and?"), context=blind)
    )
    assert isinstance(second.command, CallLLM)
    sent = second.command.request.messages
    assert second.state.committed.log[0] == message  # the store keeps the image
    assert sent[0] == notes_of(message) and sent[1:] == second.state.committed.messages[1:]
    ts, _ = stream(second.state, FauxResponse.text("Nothing more."))
    third = transition(ts[-1].state, UserMessage(message=LLMUserMessage.of_text("ok")))
    assert isinstance(third.command, CallLLM)
    again = third.command.request.messages
    assert again[: len(sent)] == sent and again[0] is sent[0]  # the same copy, extended
    # The model that reads images gets the image again.
    back = transition(
        ts[-1].state, UserMessage(message=LLMUserMessage.of_text("x"), context=seeing)
    )
    assert isinstance(back.command, CallLLM) and back.command.request.messages[0] == message


def test_a_tool_results_image_is_a_line_for_a_text_only_model() -> None:
    from cursor_byok.llm.types import ToolResultMessage
    from cursor_byok.loop.image_notes import sendable

    shown = ToolResultMessage(
        tool_call_id="r1", tool_name="Read", content=(TextContent(text="a.png:"), IMAGE)
    )
    history = (LLMUserMessage.of_text("read it"), shown)
    assert sendable(True, history) is history
    assert sendable(None, history) is history  # not said: as it is
    (asked, line) = sendable(False, history)
    assert asked is history[0]
    kb = len(IMAGE.data) * 3 // 4 // 1024
    assert line == ToolResultMessage(
        tool_call_id="r1",
        tool_name="Read",
        content=(
            TextContent(text="a.png:"),
            TextContent(
                text=f"[The tool returned an image (image/png, about {kb} KB); this model "
                "cannot view images: not shown]"
            ),
        ),
    )
    assert sendable(False, history)[1] is line  # one copy per message


def test_a_fallback_without_vision_is_sent_the_image_as_a_note() -> None:
    """The run's model reads images, its fallback does not: the fallback's request holds the
    note; the stored message keeps the image."""
    context = TurnContext(images=True, fallbacks=("blind",), fallback_images=(False,))
    message = pasted(IMAGE)
    t = opened(message, context)
    assert isinstance(t.command, CallLLM) and t.command.request.messages == (message,)
    ts, _ = stream(t.state, FauxResponse.error("down", started=False))
    fallback = ts[-1].command
    assert isinstance(fallback, CallLLM) and fallback.model == "blind"
    assert fallback.request.messages == (notes_of(message),)
    assert ts[-1].state.committed.log == (message,)
    # A fallback that reads images gets the image.
    seeing = msgspec.structs.replace(context, fallback_images=(True,))
    ts, _ = stream(opened(message, seeing).state, FauxResponse.error("down", started=False))
    assert isinstance(ts[-1].command, CallLLM) and ts[-1].command.request.messages == (message,)
