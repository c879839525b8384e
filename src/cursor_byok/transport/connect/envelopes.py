"""Connect protocol codec: envelopes, end-stream JSON, error codes, lenient unary bodies.

No I/O here. Bytes go in, frames come out (`EnvelopeReader`); messages go in, bytes come out
(`encode_envelope`, `end_stream_payload`). See docs/transport.md and
https://connectrpc.com/docs/protocol for the wire format.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from dataclasses import dataclass, field

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
FLAG_GRPC_WEB_TRAILERS = 0x80
HEADER_SIZE = 5
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

_HEADER = struct.Struct(">BI")

# Connect code -> HTTP status for unary errors (https://connectrpc.com/docs/protocol#error-codes).
CODE_TO_HTTP: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}

# gRPC status numbers, for gRPC-Web trailers.
CODE_TO_GRPC: dict[str, int] = {
    "canceled": 1,
    "unknown": 2,
    "invalid_argument": 3,
    "deadline_exceeded": 4,
    "not_found": 5,
    "already_exists": 6,
    "permission_denied": 7,
    "resource_exhausted": 8,
    "failed_precondition": 9,
    "aborted": 10,
    "out_of_range": 11,
    "unimplemented": 12,
    "internal": 13,
    "unavailable": 14,
    "data_loss": 15,
    "unauthenticated": 16,
}


def http_status_for(code: str) -> int:
    return CODE_TO_HTTP.get(code, 500)


def b64_nopad(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def b64_decode_lenient(text: str) -> bytes:
    """Standard or URL-safe base64, with or without padding (the Connect spec allows both)."""
    text = text.strip()
    padded = text + "=" * (-len(text) % 4)
    if "-" in text or "_" in text:
        return base64.urlsafe_b64decode(padded)
    return base64.b64decode(padded, validate=True)


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """One `details` entry: a fully-qualified protobuf message name and its serialized bytes."""

    type: str
    value: bytes

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, "value": b64_nopad(self.value)}


class ConnectError(Exception):
    """A Connect error: code (snake_case name), message, optional details."""

    def __init__(self, code: str, message: str = "", details: list[ErrorDetail] | None = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.details: list[ErrorDetail] = list(details or [])

    @property
    def http_status(self) -> int:
        return http_status_for(self.code)

    def to_json_obj(self) -> dict[str, object]:
        obj: dict[str, object] = {"code": self.code}
        if self.message:
            obj["message"] = self.message
        if self.details:
            obj["details"] = [d.to_json() for d in self.details]
        return obj

    def unary_body(self) -> bytes:
        """The JSON body of a unary error response."""
        return json.dumps(self.to_json_obj(), separators=(",", ":")).encode()

    @classmethod
    def from_json_obj(cls, obj: object) -> ConnectError:
        if not isinstance(obj, dict):
            raise ValueError("error is not a JSON object")
        code = obj.get("code")
        message = obj.get("message", "")
        details: list[ErrorDetail] = []
        for d in obj.get("details") or []:
            if isinstance(d, dict) and isinstance(d.get("type"), str):
                details.append(ErrorDetail(d["type"], b64_decode_lenient(str(d.get("value", "")))))
        return cls(str(code or "unknown"), str(message or ""), details)


# ---------------------------------------------------------------------------------------------
# Envelopes
# ---------------------------------------------------------------------------------------------


def encode_envelope(payload: bytes, flags: int = 0) -> bytes:
    return _HEADER.pack(flags, len(payload)) + payload


def end_stream_payload(error: ConnectError | None = None) -> bytes:
    """`{}` on success, `{"error": {...}}` on failure."""
    if error is None:
        return b"{}"
    return json.dumps({"error": error.to_json_obj()}, separators=(",", ":")).encode()


def end_stream_frame(error: ConnectError | None = None) -> bytes:
    return encode_envelope(end_stream_payload(error), FLAG_END_STREAM)


def grpc_web_trailers_frame(error: ConnectError | None = None) -> bytes:
    """The gRPC-Web equivalent of the end-stream frame (flag 0x80, HTTP/1-style header lines)."""
    if error is None:
        text = "grpc-status: 0\r\n"
    else:
        msg = error.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        text = f"grpc-status: {CODE_TO_GRPC.get(error.code, 2)}\r\ngrpc-message: {msg}\r\n"
    return encode_envelope(text.encode("utf-8"), FLAG_GRPC_WEB_TRAILERS)


def parse_end_stream(payload: bytes) -> ConnectError | None:
    """Decode an end-stream payload: None for success, the ConnectError otherwise."""
    try:
        obj = json.loads(payload.decode("utf-8")) if payload else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConnectError("internal", f"end-stream payload is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConnectError("internal", "end-stream payload is not a JSON object")
    err = obj.get("error")
    if err is None:
        return None
    return ConnectError.from_json_obj(err)


def gunzip_limited(data: bytes, limit: int) -> bytes:
    """Decompress gzip data, refusing output larger than `limit` (no zip bombs)."""
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ConnectError("invalid_argument", f"bad gzip data: {exc}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise ConnectError("resource_exhausted", f"decompressed message larger than {limit} bytes")
    if not d.eof:
        raise ConnectError("invalid_argument", "truncated gzip data")
    return out


def decompress(data: bytes, encoding: str | None, limit: int) -> bytes:
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return data
    if enc == "gzip":
        return gunzip_limited(data, limit)
    raise ConnectError("unimplemented", f"unsupported compression {enc!r}; use gzip or identity")


@dataclass(frozen=True, slots=True)
class Frame:
    flags: int
    payload: bytes  # already decompressed

    @property
    def end_stream(self) -> bool:
        return bool(self.flags & FLAG_END_STREAM)


@dataclass(slots=True)
class EnvelopeReader:
    """Incremental envelope parser. `feed(bytes)` returns the complete frames so far.

    A declared length above `max_frame` raises `resource_exhausted` as soon as the 5-byte header
    is seen, before anything is buffered for it. A compressed frame (flag 0x01) is decompressed
    with `encoding` (from `connect-content-encoding`); without an encoding it is an error.
    """

    max_frame: int = DEFAULT_MAX_FRAME
    encoding: str | None = None
    _buf: bytearray = field(default_factory=bytearray)
    _need: int = -1  # payload length of the frame being read, -1 while reading a header
    _flags: int = 0

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while True:
            if self._need < 0:
                if len(self._buf) < HEADER_SIZE:
                    return frames
                flags, length = _HEADER.unpack_from(self._buf)
                if length > self.max_frame:
                    raise ConnectError(
                        "resource_exhausted",
                        f"message of {length} bytes exceeds the limit of {self.max_frame} bytes",
                    )
                del self._buf[:HEADER_SIZE]
                self._flags, self._need = flags, length
            if len(self._buf) < self._need:
                return frames
            payload = bytes(self._buf[: self._need])
            del self._buf[: self._need]
            flags, self._need = self._flags, -1
            if flags & FLAG_COMPRESSED:
                if not self.encoding or self.encoding.lower() == "identity":
                    raise ConnectError(
                        "invalid_argument",
                        "compressed frame without connect-content-encoding",
                    )
                payload = decompress(payload, self.encoding, self.max_frame)
            frames.append(Frame(flags, payload))

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held (0 at a frame boundary)."""
        return len(self._buf) + (HEADER_SIZE if self._need >= 0 else 0)

    def close(self) -> None:
        """Call at end of input: raises if the input stopped inside a frame."""
        if self.pending:
            raise ConnectError("invalid_argument", "request body ends inside an envelope")


def looks_enveloped(body: bytes) -> bool:
    """A unary body that is exactly one envelope (flags without end-stream, length matches)."""
    if len(body) < HEADER_SIZE:
        return False
    flags, length = _HEADER.unpack_from(body)
    return bool(flags & ~FLAG_COMPRESSED == 0 and length == len(body) - HEADER_SIZE)


def decode_unary_body(
    body: bytes,
    *,
    content_encoding: str | None = None,
    envelope_encoding: str | None = None,
    enveloped: bool | None = None,
    max_size: int = DEFAULT_MAX_FRAME,
) -> bytes:
    """The serialized request message of a unary call, leniently.

    The body may be raw protobuf (Connect unary, optionally `content-encoding: gzip`) or one
    envelope whose length matches the body (connect+proto / grpc-web clients). `enveloped=None`
    detects; True requires an envelope; False takes the body as raw.
    """
    body = decompress(body, content_encoding, max_size)
    if enveloped is None:
        enveloped = looks_enveloped(body)
    if not enveloped:
        return body
    reader = EnvelopeReader(max_frame=max_size, encoding=envelope_encoding)
    frames = reader.feed(body)
    reader.close()
    data = [f for f in frames if not f.flags & (FLAG_END_STREAM | FLAG_GRPC_WEB_TRAILERS)]
    if len(data) != 1:
        raise ConnectError("invalid_argument", f"expected one message, got {len(data)}")
    return data[0].payload
