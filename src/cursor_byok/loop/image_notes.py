"""Images as a model without vision reads them: a note in place of each image (what it was, how
large), in a pasted message or a tool's result. Pure values, no decisions (loop/images.py
decides when they apply)."""

from __future__ import annotations

import msgspec

from cursor_byok.llm.append_only import Shared
from cursor_byok.llm.prefix_memo import PrefixMemo, fold_history
from cursor_byok.llm.types import (
    ImageContent,
    Message,
    TextContent,
    ToolResultMessage,
    UserContent,
)
from cursor_byok.llm.types import UserMessage as LLMUserMessage

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


class _TextOnly:
    """The history folded for a model without vision (llm/prefix_memo.py: a longer history
    feeds only what was appended): the messages from the first one that holds images on,
    each of those with notes. Until an image comes it holds nothing (a copy costs nothing)."""

    __slots__ = ("fed", "first", "out")

    def __init__(self) -> None:
        self.fed = 0
        self.first = -1  # the position of the first message with images; -1: none yet
        self.out: Shared[Message] = Shared()  # shared by copies (llm/append_only.py)

    def copy(self) -> _TextOnly:
        fold = _TextOnly()
        fold.fed, fold.first, fold.out = self.fed, self.first, self.out.copy()
        return fold

    def feed(self, message: Message) -> None:
        if isinstance(message, LLMUserMessage | ToolResultMessage) and any(
            isinstance(p, ImageContent) for p in message.content
        ):
            if self.first < 0:
                self.first = self.fed
            self.out.append(_text_only(message))
        elif self.first >= 0:
            self.out.append(message)
        self.fed += 1


_folds: PrefixMemo[_TextOnly] = PrefixMemo()


def sendable(images: bool | None, messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """The history as the run's model may read it: for a model without vision, each stored
    message that holds images with notes in their place (the store keeps the images); the
    history itself otherwise. Resumed from the previous call's fold: only what was appended
    since is looked at."""
    if images is not False:
        return messages
    fold = fold_history(messages, "text-only", _TextOnly, _folds)
    return messages if fold.first < 0 else (*messages[: fold.first], *fold.out)
