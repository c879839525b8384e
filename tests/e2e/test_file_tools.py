"""Grep, Glob, ReadLints, Read of an image and EditNotebook against the REAL server process,
through both `Run` on HTTP/2 and the HTTP/1.1 shim, with our own client answering the execs as
the IDE does. Each test checks the exec sent, the cards, the tool result the scripted upstream
reads in its next request, and turn_ended."""

from __future__ import annotations

import base64
import contextlib
import json
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    chat_requests,
    exec_of,
    exec_reply,
    http,
    kind,
    run_request,
    unique,
)
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

Send = Callable[[agent_pb2.AgentClientMessage], Awaitable[None]]


# A model that sees images, beside the test server's usual ones (which do not).
VISION_MODEL = """
[models."brain-vision"]
provider = "brain"
model = "brain-1"
vision = true
"""


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("server")
    config = brain_config(upstream.base_url, db=work / "byok.db") + VISION_MODEL
    with server_process(config, work) as srv:
        yield srv


@pytest.fixture(params=["h2", "shim"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.asynccontextmanager
async def session(server: ServerProcess, transport: str) -> AsyncIterator[tuple[Send, Reader]]:
    """One run over `transport`: a send function and the reader of the server's messages."""
    if transport == "h2":
        async with h2_run(server) as (stream, reader):

            async def send_h2(message: agent_pb2.AgentClientMessage) -> None:
                await stream.send(message)

            yield send_h2, reader
        return
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            yield run.send, reader


def cards(reader: Reader, event: str) -> list[agent_pb2.ToolCall]:
    """The ToolCall of every tool_call_started / tool_call_completed the reader saw."""
    out = []
    for m in reader.messages:
        if kind(m) == f"interaction_update.{event}":
            out.append(getattr(m.interaction_update, event).tool_call)
    return out


def tool_message(upstream: FakeUpstream, prompt: str) -> dict[str, Any]:
    """The tool result the model reads: in the second upstream request of the turn."""
    bodies = chat_requests(upstream, prompt)
    assert len(bodies) == 2, len(bodies)
    first, second = bodies
    # The second request extends the first (prompt cache): same tools, same earlier messages.
    assert second["tools"] == first["tools"]
    assert second["messages"][: len(first["messages"])] == first["messages"]
    (tool,) = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool["tool_call_id"] == "call_t1"
    return tool


def assert_ended(end: dict[str, Any], reader: Reader) -> None:
    assert end == {} and reader.turn_ended, (end, reader.kinds)
    kinds = reader.kinds
    assert kinds.index("interaction_update.tool_call_completed") < kinds.index(
        "interaction_update.turn_ended"
    )


# -- Grep --------------------------------------------------------------------------------------


async def test_grep_with_every_flag(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    args = {
        "pattern": "todo", "path": "/w/src", "glob": "*.py", "type": "py",
        "output_mode": "content", "-A": 1, "-B": 2, "-C": 0, "-i": True, "head_limit": 5,
        "offset": 10, "multiline": True,
    }  # fmt: skip
    prompt = unique(f"[tool Grep {json.dumps(args)}]")
    expected = agent_pb2.GrepArgs(
        pattern="todo", path="/w/src", glob="*.py", type="py", output_mode="content",
        context_after=1, context_before=2, context=0, case_insensitive=True, head_limit=5,
        offset=10, multiline=True, tool_call_id="call_t1",
    )  # fmt: skip
    success = agent_pb2.GrepSuccess(pattern="todo", path="/w/src", output_mode="content")
    content = success.workspace_results["/w"].content
    fm = content.matches.add(file="src/app.py")
    fm.matches.add(line_number=11, content="import os", is_context_line=True)
    fm.matches.add(line_number=12, content="# TODO: tidy")
    content.client_truncated, content.head_limit_applied, content.offset_applied = True, 5, 10
    async with session(server, transport) as (send, reader):
        await send(run_request(prompt))
        ask = (await reader.wait_for(exec_of("grep_args"))).exec_server_message
        assert ask.grep_args == expected
        result = agent_pb2.GrepResult(success=success)
        await send(exec_reply(ask.id, grep_result=result))
        end = await reader.wait_end()
    assert_ended(end, reader)
    (started,) = cards(reader, "tool_call_started")
    assert started.WhichOneof("tool") == "grep_tool_call"
    assert started.grep_tool_call.args == expected
    assert not started.grep_tool_call.HasField("result")
    (done,) = cards(reader, "tool_call_completed")
    assert done.grep_tool_call.args == expected and done.grep_tool_call.result == result
    assert done.tool_call_id == "call_t1"
    assert tool_message(upstream, prompt)["content"] == (
        "src/app.py:\n  11- import os\n  12: # TODO: tidy\n[At least 15 results; more exist. "
        "Page on with offset=15 and the same head_limit, or narrow the search.]"
    )


# -- Glob --------------------------------------------------------------------------------------


async def test_glob_as_cursor_shapes_it(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool Glob {"glob_pattern": "*.md", "target_directory": "/w/docs"}]')
    async with session(server, transport) as (send, reader):
        await send(run_request(prompt))
        ask = (await reader.wait_for(exec_of("grep_args"))).exec_server_message
        assert ask.grep_args == agent_pb2.GrepArgs(
            pattern="", glob="**/*.md", path="/w/docs", output_mode="files_with_matches",
            tool_call_id="call_t1",
        )  # fmt: skip
        success = agent_pb2.GrepSuccess(path="/w/docs", output_mode="files_with_matches")
        files = success.workspace_results["/w"].files
        files.files.extend(["/w/docs/b.md", "/w/docs/a.md"])
        files.total_files, files.ripgrep_truncated = 7, True
        await send(exec_reply(ask.id, grep_result=agent_pb2.GrepResult(success=success)))
        end = await reader.wait_end()
    assert_ended(end, reader)
    (started,) = cards(reader, "tool_call_started")
    assert started.glob_tool_call.args == agent_pb2.GlobToolArgs(
        glob_pattern="*.md", target_directory="/w/docs"
    )
    (done,) = cards(reader, "tool_call_completed")
    assert done.glob_tool_call.result.success == agent_pb2.GlobToolSuccess(
        pattern="**/*.md", path="/w/docs", files=["/w/docs/b.md", "/w/docs/a.md"],
        total_files=7, client_truncated=False, ripgrep_truncated=True,
    )  # fmt: skip
    assert tool_message(upstream, prompt)["content"] == (
        "/w/docs/b.md\n/w/docs/a.md\n[Showing 2 files; at least 7 matched. Narrow the pattern "
        "or the directory to see the rest.]"
    )


# -- ReadLints ---------------------------------------------------------------------------------


def diagnostics(path: str, *items: tuple[int, int, str, str]) -> agent_pb2.DiagnosticsResult:
    success = agent_pb2.DiagnosticsSuccess(path=path, total_diagnostics=len(items))
    for line, col, message, source in items:
        d = success.diagnostics.add(
            severity=agent_pb2.DIAGNOSTIC_SEVERITY_ERROR, message=message, source=source
        )
        d.range.start.line, d.range.start.column = line, col
        d.range.end.line, d.range.end.column = line, col + 1
    return agent_pb2.DiagnosticsResult(success=success)


async def test_read_lints_one_exec_per_path(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique('[tool ReadLints {"paths": ["/w/a.py", "/w/b.py"]}]')
    async with session(server, transport) as (send, reader):
        await send(run_request(prompt))
        first = (await reader.wait_for(exec_of("diagnostics_args"))).exec_server_message
        assert first.diagnostics_args == agent_pb2.DiagnosticsArgs(
            path="/w/a.py", tool_call_id="call_t1"
        )
        await send(exec_reply(first.id, diagnostics_result=diagnostics("/w/a.py")))
        second = (
            await reader.wait_for(
                lambda m: exec_of("diagnostics_args")(m) and m.exec_server_message.id != first.id
            )
        ).exec_server_message
        assert second.diagnostics_args.path == "/w/b.py"
        found = diagnostics("/w/b.py", (4, 7, "name 'y' is not defined", "pyright"))
        await send(exec_reply(second.id, diagnostics_result=found))
        end = await reader.wait_end()
    assert_ended(end, reader)
    (started,) = cards(reader, "tool_call_started")
    assert list(started.read_lints_tool_call.args.paths) == ["/w/a.py", "/w/b.py"]
    (done,) = cards(reader, "tool_call_completed")
    ok = done.read_lints_tool_call.result.success
    assert (ok.total_files, ok.total_diagnostics) == (1, 1)
    (fd,) = ok.file_diagnostics
    assert (fd.path, fd.diagnostics_count, fd.diagnostics[0].message) == (
        "/w/b.py", 1, "name 'y' is not defined",
    )  # fmt: skip
    assert tool_message(upstream, prompt)["content"] == (
        "/w/b.py:4:7 error name 'y' is not defined (pyright)"
    )
    first_body = chat_requests(upstream, prompt)[0]
    names = [t["function"]["name"] for t in first_body["tools"]]
    assert names.index("EditNotebook") < names.index("ReadLints")  # catalogue order


async def test_read_lints_is_not_offered_when_the_client_switched_it_off(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt = unique("no lints here")
    request = run_request(prompt)
    request.run_request.action.user_message_action.request_context.read_lints_enabled = False
    async with session(server, transport) as (send, reader):
        await send(request)
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    (body,) = chat_requests(upstream, prompt)
    names = [t["function"]["name"] for t in body["tools"]]
    assert "ReadLints" not in names and "EditNotebook" in names and "Grep" in names


# -- Read of an image --------------------------------------------------------------------------

JPEG = (
    b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    b"\xff\xc0\x00\x0b\x08\x00\x30\x00\x40\x01\x01\x11\x00\xff\xda\x00\x02\x00\x00\xff\xd9"
)


async def test_read_of_an_image_for_a_model_without_vision(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """The test server's models have no vision setting: the model reads what the file is. The
    bytes are JPEG under a `.png` name, as the IDE saves pasted images."""
    prompt = unique('[tool Read {"path": "/w/pasted.png"}]')
    async with session(server, transport) as (send, reader):
        await send(run_request(prompt))
        ask = (await reader.wait_for(exec_of("read_args"))).exec_server_message
        assert ask.read_args == agent_pb2.ReadArgs(path="/w/pasted.png", tool_call_id="call_t1")
        success = agent_pb2.ReadSuccess(path="/w/pasted.png", data=JPEG, file_size=len(JPEG))
        await send(exec_reply(ask.id, read_result=agent_pb2.ReadResult(success=success)))
        end = await reader.wait_end()
    assert_ended(end, reader)
    (done,) = cards(reader, "tool_call_completed")
    ok = done.read_tool_call.result.success
    assert (ok.path, ok.file_size, ok.data, ok.content, ok.is_empty) == (
        "/w/pasted.png", len(JPEG), b"", "", False,
    )  # fmt: skip
    tool = tool_message(upstream, prompt)
    assert tool["content"] == (
        f"/w/pasted.png is an image file ({len(JPEG)} bytes, JPEG 64x48). This model cannot "
        "view images, so its content is not shown."
    )
    second = chat_requests(upstream, prompt)[1]
    assert "image_url" not in json.dumps(second)


def png(width: int, height: int) -> bytes:
    """A real (tiny, grey) PNG file."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(tag + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )  # fmt: skip


async def test_read_of_an_image_for_a_model_with_vision(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """A `vision = true` model gets the image itself: the tool message says so, and the image
    follows it as a Chat user message with a data: URL; the card carries the bytes shown."""
    image = png(3, 2)
    prompt = unique('[tool Read {"path": "/w/shot.png"}]')
    async with session(server, transport) as (send, reader):
        await send(run_request(prompt, model="brain-vision"))
        ask = (await reader.wait_for(exec_of("read_args"))).exec_server_message
        assert ask.read_args == agent_pb2.ReadArgs(path="/w/shot.png", tool_call_id="call_t1")
        success = agent_pb2.ReadSuccess(path="/w/shot.png", data=image, file_size=len(image))
        await send(exec_reply(ask.id, read_result=agent_pb2.ReadResult(success=success)))
        end = await reader.wait_end()
    assert_ended(end, reader)
    (started,) = cards(reader, "tool_call_started")
    assert started.read_tool_call.args.path == "/w/shot.png"
    assert not started.read_tool_call.HasField("result")
    (done,) = cards(reader, "tool_call_completed")
    assert done.tool_call_id == "call_t1"
    ok = done.read_tool_call.result.success
    assert (ok.path, ok.file_size, ok.data, ok.content, ok.is_empty) == (
        "/w/shot.png", len(image), image, "", False,
    )  # fmt: skip
    about = f"/w/shot.png is an image file ({len(image)} bytes, PNG 3x2); the image is attached."
    assert tool_message(upstream, prompt)["content"] == about
    second = chat_requests(upstream, prompt)[1]
    messages = second["messages"]
    tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    data_url = "data:image/png;base64," + base64.b64encode(image).decode("ascii")
    assert messages[tool_at + 1 :] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attached image(s) from tool result:"},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        }
    ]
    # The scripted model answered from the tool message, past the image message.
    assert "".join(reader.texts) == f"Let me check.The tool said: {about}"


# -- EditNotebook ------------------------------------------------------------------------------

NOTEBOOK = (
    json.dumps(
        {
            "cells": [
                {"cell_type": "markdown", "id": "m", "metadata": {}, "source": ["# Notes"]},
                {
                    "cell_type": "code",
                    "execution_count": 1,
                    "id": "c",
                    "metadata": {},
                    "outputs": [],
                    "source": ["total = 1 + 1\n", "total"],
                },
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )
    + "\n"
)


async def test_edit_notebook_reads_edits_and_writes(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    args = {
        "target_notebook": "/w/calc.ipynb", "cell_idx": 1, "is_new_cell": False,
        "cell_language": "python", "old_string": "1 + 1", "new_string": "2 + 2",
    }  # fmt: skip
    prompt = unique(f"[tool EditNotebook {json.dumps(args)}]")
    async with session(server, transport) as (send, reader):
        await send(run_request(prompt))
        read = (await reader.wait_for(exec_of("read_args"))).exec_server_message
        assert read.read_args == agent_pb2.ReadArgs(path="/w/calc.ipynb", tool_call_id="call_t1")
        success = agent_pb2.ReadSuccess(path="/w/calc.ipynb", content=NOTEBOOK)
        await send(exec_reply(read.id, read_result=agent_pb2.ReadResult(success=success)))
        write = (await reader.wait_for(exec_of("write_args"))).exec_server_message
        assert (write.write_args.path, write.write_args.tool_call_id) == (
            "/w/calc.ipynb", "call_t1",
        )  # fmt: skip
        after = write.write_args.file_text
        assert after == NOTEBOOK.replace("1 + 1", "2 + 2")
        ok = agent_pb2.WriteResult(success=agent_pb2.WriteSuccess(path="/w/calc.ipynb"))
        await send(exec_reply(write.id, write_result=ok))
        end = await reader.wait_end()
    assert_ended(end, reader)
    (started,) = cards(reader, "tool_call_started")
    assert started.edit_tool_call.args.path == "/w/calc.ipynb"
    (done,) = cards(reader, "tool_call_completed")
    edited = done.edit_tool_call.result.success
    assert (edited.path, edited.before_full_file_content, edited.after_full_file_content) == (
        "/w/calc.ipynb", NOTEBOOK, after,
    )  # fmt: skip
    assert (edited.lines_removed, edited.lines_added) == (1, 1)
    assert tool_message(upstream, prompt)["content"] == "Edited cell 1 of /w/calc.ipynb."
