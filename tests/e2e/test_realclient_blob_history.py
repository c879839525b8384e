"""History through blobs with the real client: turn 1 goes to one server, turn 2 to another
server that has never seen the conversation, so it must rebuild the history from the blobs the
client holds (kv get_blob_args), exactly as after a move to a new machine or a lost database.

oh-my-pi opens a new HTTP/2 connection per turn; a TCP relay in front of the two servers sends
the first connection to server A and every later one to server B."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.conftest import bun
from tests.support.live import brain_config, server_process
from tests.support.upstream import FakeUpstream

pytestmark = pytest.mark.realclient


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def relay(first: int, rest: int) -> AsyncIterator[tuple[int, list[int]]]:
    """A TCP relay: connection 1 goes to port `first`, every later one to port `rest`."""
    used: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = first if not used else rest
        used.append(target)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], used
    finally:
        server.close()


async def test_second_turn_rebuilds_history_from_client_blobs(
    realclient: Path, upstream: FakeUpstream, tmp_path: Path
) -> None:
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    with (
        server_process(brain_config(upstream.base_url, db=work_a / "db"), work_a) as a,
        server_process(brain_config(upstream.base_url, db=work_b / "db"), work_b) as b,
    ):
        async with relay(a.port, b.port) as (port, used):
            proc = await asyncio.create_subprocess_exec(
                bun(realclient),
                str(realclient / "drive.ts"),
                "--base",
                f"http://127.0.0.1:{port}",
                "--prompt",
                "blob turn one",
                "--followup",
                "blob turn two",
                "--model",
                "brain-1",
                "--quiet",
                cwd=str(realclient),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 90)
        logs = a.log() + b.log()
    text = out.decode()
    assert proc.returncode == 0, text + err.decode() + logs
    assert used[0] == a.port and b.port in used[1:], used
    assert text.strip().endswith("DRIVE OK")
    assert "You said: blob turn two" in text
    body = json.loads(upstream.requests[-1].body)
    turns = [(m["role"], m.get("content")) for m in body["messages"][1:]]
    assert turns == [
        ("user", "blob turn one"),
        ("assistant", "You said: blob turn one"),
        ("user", "blob turn two"),
    ]
