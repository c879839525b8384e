"""Images as a model without vision reads them: a note in place of each image (what it was, how
large), in a pasted message or a tool's result. Pure values, no decisions (loop/images.py
decides when they apply)."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.types import (
    ImageContent,
    Message,
    TextContent,
    ToolResultMessage,
    UserContent,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage

from .context import TurnContext
from .memo import ByIdentity
from .state import ImageMark


def kb_of(image: ImageContent) -> int:
    return max(1, len(image.data) * 3 // 4 // 1024)


def image_note(image: ImageContent) -> TextContent:
    return TextContent(
        text=(
            f"[The user attached an image ({image.mime_type}, about {kb_of(image)} KB). You "
            "cannot see images, so it was not sent to you: say so, and ask the user to "
            "describe it if it matters.]"
        )
    )


def noted(message: LLMUserMessage) -> tuple[LLMUserMessage, tuple[ImageMark, ...]]:
    """`message` with a note in place of each image, and where the images were."""
    parts: list[UserContent] = []
    marks: list[ImageMark] = []
    for i, p in enumerate(message.content):
        if isinstance(p, ImageContent):
            marks.append(ImageMark(at=i, mime_type=p.mime_type, kb=kb_of(p)))
            parts.append(image_note(p))
        else:
            parts.append(p)
    return LLMUserMessage(content=tuple(parts)), tuple(marks)


def _without_images(m: LLMUserMessage | ToolResultMessage) -> Message:
    if isinstance(m, LLMUserMessage):
        return noted(m)[0]
    parts = tuple(
        TextContent(
            text=(
                f"[The tool returned an image ({p.mime_type}, about {kb_of(p)} KB); this model "
                "cannot view images: not shown]"
            )
        )
        if isinstance(p, ImageContent)
        else p
        for p in m.content
    )
    return msgspec.structs.replace(m, content=parts)


# One text-only copy per stored message object: every request sends the very same copy.
_text_only: ByIdentity[LLMUserMessage | ToolResultMessage, Message] = ByIdentity(_without_images)


def sendable(context: TurnContext, messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The history as the run's model may read it: for a model without vision, each stored
    message that holds images with notes in their place (the store keeps the images); the
    history itself otherwise. One pass over the history, for a model without vision only."""
    if context.images is not False:
        return messages
    out: list[Message] | None = None
    for i, m in enumerate(messages):
        if isinstance(m, LLMUserMessage | ToolResultMessage) and any(
            isinstance(p, ImageContent) for p in m.content
        ):
            if out is None:
                out = list(messages[:i])
            out.append(_text_only(m))
        elif out is not None:
            out.append(m)
    return messages if out is None else tuple(out)
