"""GenerateImage's images, made by an OpenAI-compatible `/images/generations` endpoint.

One POST per image ({model, prompt, n: 1, size}, plus the operator's `extra_body`), answered
with `data[0].b64_json`. The aspect ratio the model asks for becomes the nearest size OpenAI's
image models take (square 1024x1024, landscape 1536x1024, portrait 1024x1536). Failures (an
error status, bad JSON, a URL instead of image data, no answer in time) are `JobFailed`
values with the endpoint's own words, the key redacted.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

import aiohttp
import msgspec

from ..llm.http import error_text_from_body, redact
from ..llm.settings import ProviderSettings
from ..llm.upstream import tls_context
from .types import ImageJob, ImageMade, JobFailed

__all__ = ["MAX_IMAGE_RESPONSE_BYTES", "ImageMaker", "size_for"]

# Largest answer read from the endpoint (a base64 PNG of 1536x1024 is a few MB).
MAX_IMAGE_RESPONSE_BYTES = 64 * 1024 * 1024

_SIZES = {
    "1:1": "1024x1024",
    "4:3": "1536x1024",
    "16:9": "1536x1024",
    "3:4": "1024x1536",
    "9:16": "1024x1536",
}
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"RIFF", "image/webp"),
)


def size_for(aspect_ratio: str) -> str | None:
    """The endpoint's `size` for an aspect ratio; None: the endpoint's default."""
    return _SIZES.get(aspect_ratio)


class ImageMaker:
    def __init__(
        self,
        provider: ProviderSettings,
        *,
        model: str,
        timeout_s: float = 120.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body or {})

    @property
    def url(self) -> str:
        return f"{self.provider.base_url.rstrip('/')}/images/generations"

    def body(self, job: ImageJob) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": job.description, "n": 1}
        size = size_for(job.aspect_ratio)
        if size is not None:
            body["size"] = size
        body.update(self.extra_body)
        return body

    async def make(self, job: ImageJob) -> ImageMade | JobFailed:
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._post(job)
        except TimeoutError:
            return JobFailed(
                message=f"the image endpoint gave no answer within {self.timeout_s:g} s"
            )
        except (aiohttp.ClientError, OSError) as exc:
            return JobFailed(
                message=f"the image endpoint could not be reached ({type(exc).__name__})"
            )

    async def _post(self, job: ImageJob) -> ImageMade | JobFailed:
        headers = {**self.provider.headers, "Content-Type": "application/json"}
        if self.provider.api_key:
            headers["Authorization"] = f"Bearer {self.provider.api_key}"
        connector = aiohttp.TCPConnector(ssl=tls_context())
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(
                self.url,
                data=msgspec.json.encode(self.body(job)),
                headers=headers,
                allow_redirects=False,
            ) as response,
        ):
            raw = await response.content.read(MAX_IMAGE_RESPONSE_BYTES + 1)
            status = response.status
        if len(raw) > MAX_IMAGE_RESPONSE_BYTES:
            return JobFailed(message="the image endpoint's answer was too large")
        if status >= 300:
            said = redact(error_text_from_body(raw), [self.provider.api_key])[:500]
            return JobFailed(message=f"the image endpoint answered HTTP {status}: {said}")
        return self._image(raw)

    def _image(self, raw: bytes) -> ImageMade | JobFailed:
        try:
            data: Any = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return JobFailed(message="the image endpoint's answer is not JSON")
        items = data.get("data") if isinstance(data, dict) else None
        first = items[0] if isinstance(items, list) and items else None
        if not isinstance(first, dict):
            return JobFailed(message="the image endpoint's answer has no image")
        encoded = first.get("b64_json")
        if not isinstance(encoded, str) or not encoded:
            if first.get("url"):
                return JobFailed(
                    message="the image endpoint answered with a URL, not the image data; set "
                    'extra_body = { response_format = "b64_json" } in [image_generation]'
                )
            return JobFailed(message="the image endpoint's answer has no image")
        try:
            image = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return JobFailed(message="the image endpoint's image data is not valid base64")
        mime = next((m for magic, m in _MAGIC if image.startswith(magic)), None)
        if mime is None:
            return JobFailed(message="the image endpoint's data is not a PNG, JPEG, GIF or WebP")
        return ImageMade(data=image, mime_type=mime)
