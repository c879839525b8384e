"""The process that turns pages into text for web/convert.py (`python -m` this module).

Frames on stdin and stdout: a 4-byte big-endian length, then a msgpack `ConvertRequest` in and
a `ConvertReply` out; an empty frame out says the worker is ready. It reads until stdin ends.
It runs at a lower CPU priority than the server (nice +10) under an address-space limit, and
dies with its parent (PR_SET_PDEATHSIG), so a page it is still chewing on never outlives the
server. Anything printed by mistake goes to stderr: stdout carries frames only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
from typing import BinaryIO

import msgspec
from selectolax.lexbor import SelectolaxError

from .charsets import decode_body
from .page_text import is_html, page_text

__all__ = ["ConvertReply", "ConvertRequest", "convert", "main"]

_PR_SET_PDEATHSIG = 1
NICENESS = 10


class ConvertRequest(msgspec.Struct, frozen=True):
    body: bytes
    content_type: str
    utf8: bool = False  # the body is text the client decoded already (not the page's charset)


class ConvertReply(msgspec.Struct, frozen=True):
    text: str = ""
    error: str = ""  # "memory": the page needed more than the worker may use


def convert(request: ConvertRequest) -> ConvertReply:
    """Decode (the page's charset, or UTF-8), then HTML to text; other text as it is."""
    content_type = request.content_type
    if request.utf8:
        content = request.body.decode("utf-8", errors="replace")
        return ConvertReply(text=page_text(content, content_type))
    kind = content_type.split(";", 1)[0].strip().lower()
    maybe_html = kind in ("", "text/html", "application/xhtml+xml")
    content, _codec = decode_body(request.body, content_type, html=maybe_html)
    if is_html(content, content_type):
        return ConvertReply(text=page_text(content, content_type))
    return ConvertReply(text=content.strip())


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's close of stdin ends it
        pass
    if os.getppid() == 1:  # the parent died before the line above
        sys.exit(0)


def _limit(memory_mb: int) -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) < NICENESS:  # the parent sets both when it can
        with contextlib.suppress(OSError):
            os.nice(NICENESS)
    # Below every ordinary task: the server preempts a worker the moment it has work.
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    size = int.from_bytes(head, "big")
    body = stream.read(size)
    return body if len(body) == size else None


def _write_frame(stream: BinaryIO, payload: bytes) -> None:
    stream.write(len(payload).to_bytes(4, "big") + payload)
    stream.flush()


def main(argv: list[str]) -> int:
    _die_with_parent()
    _limit(int(argv[0]) if argv else 0)
    frames_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not break the framing
    frames_in = sys.stdin.buffer
    decoder = msgspec.msgpack.Decoder(ConvertRequest)
    encoder = msgspec.msgpack.Encoder()
    _write_frame(frames_out, b"")  # ready
    while (frame := _read_frame(frames_in)) is not None:
        try:
            reply = convert(decoder.decode(frame))
        except (MemoryError, SelectolaxError):  # lexbor fails a parse only when out of memory
            reply = ConvertReply(error="memory")
        except Exception as exc:  # a bug must answer, not hang the caller until its deadline
            reply = ConvertReply(error=f"{type(exc).__name__}: {str(exc)[:200]}")
        try:
            payload = encoder.encode(reply)
        except MemoryError:
            payload = encoder.encode(ConvertReply(error="memory"))
        _write_frame(frames_out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
