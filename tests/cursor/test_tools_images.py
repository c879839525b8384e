"""Read of an image: the type by its magic bytes, the size from its header, and what the model
gets (the image itself for a vision model, a line of text otherwise), down to the provider
request bodies that carry it."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from cursor_byok.llm import anthropic, openai_chat, openai_responses
from cursor_byok.llm.types import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ToolCall,
    UserMessage,
)
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.tools import Finished, machine_for
from cursor_byok.transport.cursor.tools.images import (
    MAX_IMAGE_BYTES,
    ImageInfo,
    ImageKind,
    image_read_result,
    sniff_image,
)
from tests.cursor.tool_support import CALL_ID, MODEL_CALL_ID, T0, Ids, completed, reply


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    raw = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof2 = b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + b"\xff\xff" + sof2 + b"\xff\xda\x00\x02" + b"\x00" * 8 + b"\xff\xd9"


def webp(chunk: bytes, body: bytes) -> bytes:
    payload = b"WEBP" + chunk + struct.pack("<I", len(body)) + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload


VP8 = webp(b"VP8 ", b"\x00" * 3 + b"\x9d\x01\x2a" + struct.pack("<HH", 640, 480) + b"\x00" * 4)
# VP8L: signature 0x2f, then 14-bit width-1 and height-1 packed little-endian.
_bits = (300 - 1) | ((200 - 1) << 14)
VP8L = webp(b"VP8L", b"\x2f" + _bits.to_bytes(4, "little") + b"\x00" * 4)
VP8X = webp(b"VP8X", b"\x10\x00\x00\x00" + (1920 - 1).to_bytes(3, "little")
            + (1080 - 1).to_bytes(3, "little"))  # fmt: skip


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (png(3, 2), ImageInfo(ImageKind.PNG, 3, 2)),
        (b"\x89PNG\r\n\x1a\n", ImageInfo(ImageKind.PNG)),  # cut short: kind, no size
        (jpeg(800, 600), ImageInfo(ImageKind.JPEG, 800, 600)),
        (b"\xff\xd8\xff\xe0\x00", ImageInfo(ImageKind.JPEG)),
        (b"GIF89a" + struct.pack("<HH", 16, 9) + b"\x00" * 8, ImageInfo(ImageKind.GIF, 16, 9)),
        (b"GIF87a" + struct.pack("<HH", 1, 1), ImageInfo(ImageKind.GIF, 1, 1)),
        (VP8, ImageInfo(ImageKind.WEBP, 640, 480)),
        (VP8L, ImageInfo(ImageKind.WEBP, 300, 200)),
        (VP8X, ImageInfo(ImageKind.WEBP, 1920, 1080)),
        (b"hello world", None),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", None),  # RIFF, but audio
        (b"GIF8", None),
        (b"", None),
        (b"\x00\x01\x02\xff", None),
    ],
    ids=["png", "png-short", "jpeg", "jpeg-short", "gif89", "gif87", "webp-vp8", "webp-vp8l",
         "webp-vp8x", "text", "wav", "gif-short", "empty", "binary"],
)  # fmt: skip
def test_sniff_image(data: bytes, expected: ImageInfo | None) -> None:
    assert sniff_image(data) == expected


def test_type_comes_from_the_bytes_not_the_name() -> None:
    """The IDE saves pasted images as JPEG bytes in `.png` files."""
    result = image_read_result("/w/pasted.png", jpeg(2, 2), vision=False)
    assert result is not None
    assert "JPEG 2x2" in result[0] and result[1] == ()


def test_image_decision_by_vision() -> None:
    data = png(3, 2)
    assert image_read_result("/w/a.txt", b"plain", vision=True) is None
    text, images = image_read_result("/w/a.png", data, vision=False) or ("", ())
    assert text == (
        f"/w/a.png is an image file ({len(data)} bytes, PNG 3x2). This model cannot view "
        "images, so its content is not shown."
    )
    assert images == ()
    text, images = image_read_result("/w/a.png", data, vision=True) or ("", ())
    assert text == f"/w/a.png is an image file ({len(data)} bytes, PNG 3x2); the image is attached."
    assert images == (ImageContent(data=base64.b64encode(data).decode(), mime_type="image/png"),)
    big = data + b"\x00" * MAX_IMAGE_BYTES
    text, images = image_read_result("/w/big.png", big, vision=True) or ("", ())
    assert images == () and "larger than the 3932160 bytes" in text


def _read_image(data: bytes, *, vision: bool) -> Finished:
    tool = machine_for(
        ToolCall(id="toolu_1", name="Read", arguments={"path": "/w/shot.png"}),
        call_id=CALL_ID,
        model_call_id=MODEL_CALL_ID,
        conversation_id="conv",
        vision=vision,
    )
    tool.start(Ids(), T0)
    result = a.ReadResult(success=a.ReadSuccess(path="/w/shot.png", data=data, file_size=len(data)))
    step = tool.feed(reply(1, read_result=result), T0)
    assert isinstance(step, Finished)
    return step


def test_read_of_an_image_for_a_vision_model() -> None:
    data = jpeg(4, 4)
    done = _read_image(data, vision=True)
    b64 = base64.b64encode(data).decode()
    assert done.result.content == (
        TextContent(text=f"/w/shot.png is an image file ({len(data)} bytes, JPEG 4x4); the "
                         "image is attached."),
        ImageContent(data=b64, mime_type="image/jpeg"),
    )  # fmt: skip
    assert not done.result.is_error
    ok = completed(done).read_tool_call.result.success
    assert (ok.data, ok.path, ok.file_size, ok.is_empty) == (data, "/w/shot.png", len(data), False)
    # The provider bodies carry it: Anthropic inside the tool_result, Responses inside the
    # function_call_output, Chat Completions (tool messages are text only) in a user message
    # right after the tool message.
    call = AssistantMessage(
        content=(ToolCall(id="toolu_1", name="Read", arguments={"path": "/w/shot.png"}),),
        api="x", provider="x", model="x", stop_reason="toolUse",
    )  # fmt: skip
    history = (UserMessage.of_text("look"), call, done.result)
    (_, _, results) = anthropic.provider_messages(history)
    block = results["content"][0]
    assert block["type"] == "tool_result"
    assert {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                         "data": b64}} in block["content"]  # fmt: skip
    item = openai_responses.tool_result_item(done.result)
    assert {"type": "input_image", "detail": "auto",
            "image_url": f"data:image/jpeg;base64,{b64}"} in item["output"]  # fmt: skip
    chat = openai_chat.convert_messages(history, openai_chat.ChatCompat())
    tool_message, images_message = chat[-2:]
    assert tool_message["role"] == "tool" and "JPEG 4x4" in tool_message["content"]
    assert images_message["role"] == "user"
    assert {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{b64}"}} in (
        images_message["content"]
    )


def test_read_of_an_image_for_a_text_model() -> None:
    data = png(5, 7)
    done = _read_image(data, vision=False)
    assert done.result.content == (
        TextContent(text=f"/w/shot.png is an image file ({len(data)} bytes, PNG 5x7). This "
                         "model cannot view images, so its content is not shown."),
    )  # fmt: skip
    ok = completed(done).read_tool_call.result.success
    assert ok.data == b"" and ok.content == "" and not ok.is_empty


def test_read_of_other_binary_bytes_is_unchanged() -> None:
    done = _read_image(b"\x00\x01\xfe\xff", vision=True)
    assert done.result.text == "/w/shot.png is a binary file (4 bytes); its content is not shown."
