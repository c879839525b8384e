"""The user's message and the agent mode as the client sends them -> native values.

decode.py uses them for a run request, a follow-up and every action that carries a message.
"""

from __future__ import annotations

import base64

from ...llm.types import ImageContent, TextContent, UserContent
from ...llm.types import UserMessage as LlmUserMessage
from .proto import agent_pb2

__all__ = ["decode_user_message", "mode_name"]


def mode_name(mode: int) -> str:
    """AgentMode → "agent", "ask", "plan", "debug", "multitask", ... (unspecified → "agent")."""
    if mode == agent_pb2.AGENT_MODE_UNSPECIFIED:
        return "agent"
    try:
        name = str(agent_pb2.AgentMode.Name(mode))
        return name.removeprefix("AGENT_MODE_").lower()
    except ValueError:
        return f"mode_{mode}"


def _selected_context_texts(sc: agent_pb2.SelectedContext) -> list[str]:
    """Attachments the user picked, as text the model reads with the message."""
    out: list[str] = []
    for f in sc.files:
        path = f.relative_path if f.HasField("relative_path") and f.relative_path else f.path
        out.append(f"Attached file {path}:\n```\n{f.content}\n```")
    for c in sc.code_selections:
        path = c.relative_path if c.HasField("relative_path") and c.relative_path else c.path
        out.append(f"Selected code from {path}:\n```\n{c.content}\n```")
    for text in sc.extra_context:
        if text.strip():
            out.append(text)
    if sc.HasField("invocation_context") and sc.invocation_context.HasField("ide_state"):
        visible = sc.invocation_context.ide_state.visible_files
        shown = []
        for vf in visible:
            path = (
                vf.relative_path if vf.HasField("relative_path") and vf.relative_path else vf.path
            )
            line = (
                f" (cursor at line {vf.cursor_position.line})"
                if vf.HasField("cursor_position")
                else ""
            )
            shown.append(f"- {path}{line}")
        if shown:
            out.append("Files open in the user's editor:\n" + "\n".join(shown))
    return out


def decode_user_message(um: agent_pb2.UserMessage) -> LlmUserMessage:
    """The user's text, attachments as text parts before it, and inline images after it.
    Images only available as a blob id or an upload reference are named, not loaded."""
    content: list[UserContent] = []
    notes: list[str] = []
    if um.HasField("selected_context"):
        for text in _selected_context_texts(um.selected_context):
            content.append(TextContent(text=text))
    text = um.text
    if text or not um.HasField("text_blob_id"):
        content.append(TextContent(text=text))
    images: list[ImageContent] = []
    if um.HasField("selected_context"):
        for img in um.selected_context.selected_images:
            which = img.WhichOneof("data_or_blob_id")
            data = b""
            if which == "data":
                data = img.data
            elif which == "blob_id_with_data":
                data = img.blob_id_with_data.data
            if data:
                images.append(
                    ImageContent(
                        data=base64.b64encode(data).decode("ascii"),
                        mime_type=img.mime_type or "image/png",
                    )
                )
            else:
                notes.append(img.path or img.uuid or "an image")
    if notes:
        content.append(
            TextContent(
                text="(The user attached image(s) whose data was not sent to this server: "
                + ", ".join(notes)
                + ")"
            )
        )
    content.extend(images)
    if not content:
        content.append(TextContent(text=""))
    return LlmUserMessage(content=tuple(content))
