"""Images the user pastes, for a model that reads text only: each becomes a note the model
reads, and the user is told once per message (never a silent image_url to a text-only model).

Which models read images is configuration (`vision`), handed to the loop as
`TurnContext.images`; None (not said) forwards images as they are.
"""

from __future__ import annotations

from cursor_byok.llm.types import ImageContent, TextContent, UserContent
from cursor_byok.llm.types import UserMessage as LLMUserMessage

from .context import TurnContext

USER_NOTICE = (
    "This model reads text only, so the image you attached was not sent to it; it was told "
    "an image was there. Pick a model configured with `vision = true` to have it read images."
)


def image_note(image: ImageContent) -> TextContent:
    size_kb = max(1, len(image.data) * 3 // 4 // 1024)
    return TextContent(
        text=(
            f"[The user attached an image ({image.mime_type}, about {size_kb} KB). You cannot "
            "see images, so it was not sent to you: say so, and ask the user to describe it "
            "if it matters.]"
        )
    )


def withhold_images(
    context: TurnContext, message: LLMUserMessage
) -> tuple[LLMUserMessage, tuple[str, ...]]:
    """`message` as the run's model may read it, and the notices for the user."""
    if context.images is not False or not any(isinstance(p, ImageContent) for p in message.content):
        return message, ()
    parts: list[UserContent] = [
        image_note(p) if isinstance(p, ImageContent) else p for p in message.content
    ]
    return LLMUserMessage(content=tuple(parts)), (USER_NOTICE,)
