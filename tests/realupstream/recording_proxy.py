"""A TCP relay in front of llama-server that keeps every byte the server sent it, so a test
asserts on the request bodies llama-server really received (not on our own stored copy).

Each connection is relayed both ways unchanged; the client-to-upstream bytes are kept per
connection and split into HTTP/1.1 requests afterwards (our adapters send bodies with a
Content-Length, never chunked)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Received:
    """One HTTP request as llama-server received it."""

    method: str
    path: str
    body: bytes


@dataclass
class RecordingProxy:
    upstream_port: int
    port: int = 0
    _streams: list[bytearray] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self) -> list[Received]:
        """Every complete request received so far, in the order the connections opened."""
        with self._lock:
            streams = [bytes(s) for s in self._streams]
        out: list[Received] = []
        for data in streams:
            out.extend(_split(data))
        return out

    def chat_bodies(self) -> list[bytes]:
        return [r.body for r in self.requests() if r.path.endswith("/chat/completions")]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sent = bytearray()
        with self._lock:
            self._streams.append(sent)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, keep: bytearray | None
        ) -> None:
            try:
                while chunk := await src.read(65536):
                    if keep is not None:
                        with self._lock:
                            keep.extend(chunk)
                    dst.write(chunk)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer, sent), pipe(up_reader, writer, None))


def _split(data: bytes) -> list[Received]:
    out: list[Received] = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if len(rest) < length:
            break  # still arriving
        out.append(Received(method, path, rest[:length]))
        data = rest[length:]
    return out


@contextlib.contextmanager
def recording_proxy(upstream_port: int) -> Iterator[RecordingProxy]:
    """Run the relay on a free loopback port in its own thread for the block."""
    proxy = RecordingProxy(upstream_port)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        server = await asyncio.start_server(proxy._handle, "127.0.0.1", 0)
        proxy.port = int(server.sockets[0].getsockname()[1])
        ready.set()
        async with server:
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the recording proxy did not start")
    try:
        yield proxy
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
