"""Loopback servers that send exactly the bytes a test scripts, for HTTP client tests.

A script is a list of steps played on each connection after the request was read: bytes are
written (and drained), a float sleeps, and `Act` steps do what a broken server or network
does: reset the connection, hold it open in silence, or write a record that is not valid TLS
under the TLS layer. Certificates come from the openssl CLI (no Python crypto dependency).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import shutil
import socket
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest


class Act(enum.Enum):
    CLOSE = "close"  # close the connection (a FIN) even when the server keeps alive
    RESET = "reset"  # close with SO_LINGER 0: the peer reads ECONNRESET
    HOLD = "hold"  # keep the connection open and say nothing more
    BAD_TLS_RECORD = "bad_tls_record"  # an application-data record no key decrypts


Step = bytes | float | Act


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


@dataclass
class ScriptedServer:
    """Plays `scripts[min(n, len - 1)]` for the n-th request (0-based, over all connections);
    the connection closes after each script, or with `keep_alive` waits for the next request
    (unless the script ends it with `Act.CLOSE` or `Act.RESET`)."""

    scripts: Sequence[Sequence[Step]]
    keep_alive: bool = False
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # ends every `Act.HOLD`

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                self.requests.append(await read_request(reader))
                script = self.scripts[min(len(self.requests) - 1, len(self.scripts) - 1)]
                for step in script:
                    if not await play(step, writer, self.stopping):
                        return
                if not self.keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()


async def play(step: Step, writer: asyncio.StreamWriter, stopping: asyncio.Event) -> bool:
    """Play one step; False when the connection is finished with."""
    if isinstance(step, bytes):
        writer.write(step)
        await writer.drain()
    elif isinstance(step, float):
        await asyncio.sleep(step)
    elif step is Act.CLOSE:
        return False
    elif step is Act.RESET:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return False
    elif step is Act.HOLD:
        await stopping.wait()
        return False
    elif step is Act.BAD_TLS_RECORD:
        # Straight onto the socket, under asyncio's TLS layer: a record of the right type and
        # version whose content is garbage, so the client's TLS layer fails to decrypt it.
        os.write(writer.get_extra_info("socket").fileno(), b"\x17\x03\x03\x00\x20" + b"G" * 32)
    return True


@contextlib.asynccontextmanager
async def scripted(
    *scripts: Sequence[Step], tls: ssl.SSLContext | None = None, keep_alive: bool = False
) -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer(scripts or [[]], keep_alive=keep_alive)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=tls)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        server.stopping.set()
        for _ in range(3):  # the handlers holding connections finish
            await asyncio.sleep(0)


def split_every_byte(data: bytes, pause: float = 0.002) -> list[Step]:
    """One write per byte with a pause between: the client reads them one by one."""
    steps: list[Step] = []
    for i in range(len(data)):
        steps += [data[i : i + 1], pause]
    return steps


# -- certificates ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA certificate to trust (for a self-signed leaf: the leaf itself)
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context


_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(tmp: Path, *args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl CLI is needed to make test certificates")
    subprocess.run([openssl, *args], check=True, capture_output=True, cwd=tmp)


def issued_cert(tmp: Path, san: str, name: str = "leaf") -> Certs:
    """A throwaway CA and a leaf it signed for `san` (e.g. "IP:127.0.0.1,DNS:localhost")."""
    _openssl(tmp, "req", "-x509", *_EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=cursor-byok test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl(tmp, "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", "/CN=cursor-byok test leaf")  # fmt: skip
    (tmp / f"{name}.ext").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(tmp, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "1",
             "-extfile", f"{name}.ext")  # fmt: skip
    return Certs(tmp / "ca.pem", tmp / f"{name}.pem", tmp / f"{name}.key")


def self_signed_cert(tmp: Path) -> Certs:
    """A leaf for 127.0.0.1 that signed itself: no CA vouches for it."""
    _openssl(tmp, "req", "-x509", *_EC, "-keyout", "self.key", "-out", "self.pem",
             "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1")  # fmt: skip
    return Certs(tmp / "self.pem", tmp / "self.pem", tmp / "self.key")
