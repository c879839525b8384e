"""Server-sent events, parsed incrementally from bytes (no I/O).

Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR; `data` lines of one event
join with newlines; comments (`:`) are skipped; a leading BOM is dropped. At end of input an
event still being collected is flushed, since some servers omit the final blank line.
"""

from __future__ import annotations

import msgspec

MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEEvent(msgspec.Struct, frozen=True):
    data: str
    event: str = "message"
    id: str | None = None


class SSEError(ValueError):
    pass


class SSEParser:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = bytearray()
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._size = 0
        self._max = max_event_bytes
        self._started = False
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._started and not self._pending_cr and b"\r" not in chunk:
            # Every provider ends its lines in LF alone: split on it. The buffer never holds a
            # CR between feeds (the general path below consumes every CR it sees).
            return self._feed_lf(chunk)
        if self._pending_cr:
            # A CR ended the last chunk; a LF starting this one belongs to the same line end.
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        self._buffer += chunk
        if not self._started:
            if len(self._buffer) < 3 and b"\xef\xbb\xbf".startswith(bytes(self._buffer)):
                return []
            if self._buffer.startswith(b"\xef\xbb\xbf"):
                del self._buffer[:3]
            self._started = True
        out: list[SSEEvent] = []
        buf = self._buffer
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            if cr >= 0:
                end, nxt = cr, cr + 1
                if nxt < n and buf[nxt] == 0x0A:
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True
            elif lf >= 0:
                end, nxt = lf, lf + 1
            else:
                break
            ev = self._line(bytes(buf[start:end]))
            if ev is not None:
                out.append(ev)
            start = nxt
        del buf[:start]
        if len(buf) > self._max:
            raise SSEError(f"an SSE line exceeds {self._max} bytes")
        return out

    def _feed_lf(self, chunk: bytes) -> list[SSEEvent]:
        """`feed` for a chunk without CR, past the BOM: the same events, fewer steps."""
        buf = self._buffer
        if buf:
            buf += chunk
            lines = bytes(buf).split(b"\n")
            buf.clear()
        else:
            lines = chunk.split(b"\n")
        rest = lines.pop()  # what follows the last LF: the start of a line not yet ended
        out: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if not line:  # an event ends
                if data:
                    out.append(
                        SSEEvent(
                            data=data[0] if len(data) == 1 else "\n".join(data),
                            event=self._event or "message",
                            id=self._id,
                        )
                    )
                    self._data = data = []
                    self._size = 0
                self._event = None
            elif line[:6] == b"data: ":
                value = line[6:].decode("utf-8", errors="replace")
                self._size += len(value)
                if self._size > self._max:
                    raise SSEError(f"an SSE event exceeds {self._max} bytes")
                data.append(value)
            else:
                self._line(line)  # never an event: only an empty line dispatches
        if rest:
            if len(rest) > self._max:
                raise SSEError(f"an SSE line exceeds {self._max} bytes")
            buf += rest
        return out

    def finish(self) -> list[SSEEvent]:
        """End of input: flush a last line and event that were not terminated."""
        out: list[SSEEvent] = []
        if self._buffer:
            line = bytes(self._buffer)
            self._buffer.clear()
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        ev = self._dispatch()
        if ev is not None:
            out.append(ev)
        return out

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        if raw[:1] == b":":
            return None
        line = raw.decode("utf-8", errors="replace")
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._size += len(value)
            if self._size > self._max:
                raise SSEError(f"an SSE event exceeds {self._max} bytes")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = None
            return None
        ev = SSEEvent(data="\n".join(self._data), event=self._event or "message", id=self._id)
        self._data = []
        self._event = None
        self._size = 0
        return ev
