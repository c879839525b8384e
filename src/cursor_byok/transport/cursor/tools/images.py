"""Images among the files the model reads: what the bytes are, and what the model gets.

The type comes from the first bytes, never from the name: the IDE saves pasted images as JPEG
bytes in `.png` files. A model that can see images gets the image itself as content of the tool
result (each provider adapter puts it where its API allows); any other model, or an image too
large to send, gets one line saying what the file is.
"""

from __future__ import annotations

import base64
import enum
import struct
from dataclasses import dataclass

from ....llm.types import ImageContent

__all__ = ["MAX_IMAGE_BYTES", "ImageInfo", "ImageKind", "image_read_result", "sniff_image"]

# Largest image sent to the model: 3.75 MiB, 5 MiB once base64-encoded (Anthropic's per-image
# limit, the strictest of the providers). A larger one is described, not sent.
MAX_IMAGE_BYTES = 3_932_160


class ImageKind(enum.Enum):
    """The image formats Cursor's Read accepts, with their MIME type."""

    PNG = "image/png"
    JPEG = "image/jpeg"
    GIF = "image/gif"
    WEBP = "image/webp"

    @property
    def mime_type(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ImageInfo:
    kind: ImageKind
    width: int | None = None  # None when the header does not say (or is cut short)
    height: int | None = None

    def describe(self, size: int) -> str:
        dims = f" {self.width}x{self.height}" if self.width and self.height else ""
        return f"{size} bytes, {self.kind.name}{dims}"


def sniff_image(data: bytes) -> ImageInfo | None:
    """The image format of `data` by its magic bytes, with its size when the header gives it;
    None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(data) >= 24 and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return ImageInfo(ImageKind.PNG, width, height)
        return ImageInfo(ImageKind.PNG)
    if data.startswith(b"\xff\xd8\xff"):
        return ImageInfo(ImageKind.JPEG, *_jpeg_size(data))
    if data.startswith((b"GIF87a", b"GIF89a")):
        if len(data) >= 10:
            width, height = struct.unpack("<HH", data[6:10])
            return ImageInfo(ImageKind.GIF, width, height)
        return ImageInfo(ImageKind.GIF)
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ImageInfo(ImageKind.WEBP, *_webp_size(data))
    return None


# JPEG start-of-frame markers (baseline, progressive, ...), which carry the size; C4 (Huffman
# tables), C8 (reserved) and CC (arithmetic coding) share the range but are not frames.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None, None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        if marker == 0xD9 or marker == 0xDA:  # end of image / start of scan: no frame header seen
            return None, None
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if marker in _SOF:
            if i + 9 > len(data):
                return None, None
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None, None


def _webp_size(data: bytes) -> tuple[int | None, int | None]:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        b0, b1, b2, b3 = data[21:25]
        width = 1 + (((b1 & 0x3F) << 8) | b0)
        height = 1 + (((b3 & 0x0F) << 10) | (b2 << 2) | ((b1 & 0xC0) >> 6))
        return width, height
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    return None, None


def image_read_result(
    path: str, data: bytes, *, vision: bool
) -> tuple[str, tuple[ImageContent, ...]] | None:
    """What the model reads for a Read whose bytes are an image: a line of text, and the image
    itself when the model can see it (`vision`) and it is small enough. None when `data` is not
    an image."""
    info = sniff_image(data)
    if info is None:
        return None
    about = f"{path} is an image file ({info.describe(len(data))})"
    if not vision:
        return f"{about}. This model cannot view images, so its content is not shown.", ()
    if len(data) > MAX_IMAGE_BYTES:
        return (
            f"{about}. It is larger than the {MAX_IMAGE_BYTES} bytes an image may have to be "
            "shown to the model, so its content is not shown.",
            (),
        )
    image = ImageContent(data=base64.b64encode(data).decode("ascii"), mime_type=info.kind.mime_type)
    return f"{about}; the image is attached.", (image,)
