"""The prompt-cache invariant across every tool family: one conversation against the REAL server
process, through `Run` on HTTP/2 and the HTTP/1.1 shim, whose turns call in sequence Shell,
Read (of a text file, and of an image the model sees), Write, StrReplace, Delete, LS, Grep,
Glob, TodoWrite, ReadLints, EditNotebook, AskQuestion (answered), AwaitShell and an MCP tool,
our client answering each as the IDE does.
Every upstream request of the conversation must begin with the previous one's messages exactly,
with the same tools and system prompt: a tool family whose result (or card, or stored form)
rewrote earlier history would break the provider's prompt cache for the rest of the
conversation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_file_tools import NOTEBOOK, VISION_MODEL, diagnostics, png
from tests.e2e.test_modes_actions import mcp_tool
from tests.e2e.test_queries import QUESTIONS, respond
from tests.e2e.test_run_h2 import h2_run
from tests.e2e.test_shells import ENDED, TERMINALS, ide_context, read_answer
from tests.e2e.test_shim import (
    Reader,
    ShimRun,
    content_text,
    exec_reply,
    http,
    kind,
    shell_stream,
)
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

Send = Callable[[agent_pb2.AgentClientMessage], Awaitable[None]]

MCP_NAME = "lookup_docs"

NOTEBOOK_EDIT = {
    "target_notebook": "/w/calc.ipynb", "cell_idx": 1, "is_new_cell": False,
    "cell_language": "python", "old_string": "1 + 1", "new_string": "2 + 2",
}  # fmt: skip

# (tool name, its arguments, the card the turn completes with)
TURNS: list[tuple[str, dict[str, Any], str]] = [
    ("Shell", {"command": "echo hi"}, "shell_tool_call"),
    ("Read", {"path": "/w/notes.txt"}, "read_tool_call"),
    ("Read", {"path": "/w/shot.png"}, "read_tool_call"),
    ("Write", {"path": "/w/new.txt", "contents": "fresh\n"}, "edit_tool_call"),
    (
        "StrReplace",
        {"path": "/w/notes.txt", "old_string": "hello", "new_string": "howdy"},
        "edit_tool_call",
    ),
    ("Delete", {"path": "/w/new.txt"}, "delete_tool_call"),
    ("LS", {"path": "/w"}, "ls_tool_call"),
    ("Grep", {"pattern": "hello", "path": "/w"}, "grep_tool_call"),
    ("Glob", {"glob_pattern": "*.txt", "target_directory": "/w"}, "glob_tool_call"),
    (
        "TodoWrite",
        {"merge": False, "todos": [{"id": "a", "content": "tidy up", "status": "pending"}]},
        "update_todos_tool_call",
    ),
    ("ReadLints", {"paths": ["/w/app.py"]}, "read_lints_tool_call"),
    ("EditNotebook", NOTEBOOK_EDIT, "edit_tool_call"),
    ("AskQuestion", QUESTIONS, "ask_question_tool_call"),
    ("AwaitShell", {"shell_id": "3", "block_until_ms": 20000}, "await_tool_call"),
    (MCP_NAME, {"q": "retention policy"}, "mcp_tool_call"),
]

FILES = {"/w/notes.txt": "hello\nworld\n", "/w/calc.ipynb": NOTEBOOK}
IMAGE = png(4, 4)
# The conversation runs on a model that sees images, so the image's user message (after the
# tool message, in the Chat shape) is part of the history that must stay put.
MODEL = "brain-vision"
# The same limits as brain-1, so its request options are those of the other e2e tests.
VISION_LIMITS = "context_window = 128000\nmax_output_tokens = 4096\n"


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("prefix")
    config = brain_config(upstream.base_url, db=work / "byok.db") + VISION_MODEL + VISION_LIMITS
    with server_process(config, work) as srv:
        yield srv


def prompt_for(name: str, args: dict[str, Any], tag: str) -> str:
    # The brain's `[tool Name {json}]` ends at the first "}]": keep nested ones spaced.
    raw = json.dumps(args).replace("}]", "} ]").replace("]}", "] }")
    return f"[tool {name} {raw}] #{tag}"


def turn_request(text: str, conversation_id: str) -> agent_pb2.AgentClientMessage:
    """A user turn as the IDE sends it: the context inline, the MCP tools on every request."""
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = MODEL
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = str(uuid.uuid4())
    uma.request_context.CopyFrom(ide_context())
    req.mcp_tools.mcp_tools.append(mcp_tool(MCP_NAME))
    return agent_pb2.AgentClientMessage(run_request=req)


@contextlib.asynccontextmanager
async def session(server: ServerProcess, transport: str) -> AsyncIterator[tuple[Send, Reader]]:
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


def ide_answers(msg: agent_pb2.AgentServerMessage) -> list[agent_pb2.AgentClientMessage]:
    """What the IDE sends back for one exec or interaction query of the server."""
    if msg.HasField("interaction_query"):
        query = msg.interaction_query
        assert query.WhichOneof("query") == "ask_question_interaction_query", query
        success = agent_pb2.AskQuestionSuccess()
        success.answers.add(question_id="db", selected_option_ids=["sq"])
        success.answers.add(question_id="extras", selected_option_ids=["idx"])
        response = agent_pb2.AskQuestionInteractionResponse(
            result=agent_pb2.AskQuestionResult(success=success)
        )
        return [respond(query.id, ask_question_interaction_response=response)]
    esm = msg.exec_server_message
    which = esm.WhichOneof("message")
    match which:
        case "shell_stream_args":
            command = esm.shell_stream_args.command
            ok = agent_pb2.ShellSuccess(command=command, exit_code=0, stdout="hi\n")
            return [
                shell_stream(esm.id, start=agent_pb2.ShellStreamStart()),
                shell_stream(esm.id, stdout=agent_pb2.ShellStreamStdout(data="hi\n")),
                shell_stream(esm.id, exit=agent_pb2.ShellStreamExit(code=0)),
                exec_reply(esm.id, shell_result=agent_pb2.ShellResult(success=ok)),
            ]
        case "read_args":
            path = esm.read_args.path
            if path == "/w/shot.png":
                image = agent_pb2.ReadSuccess(path=path, data=IMAGE, file_size=len(IMAGE))
                return [exec_reply(esm.id, read_result=agent_pb2.ReadResult(success=image))]
            content = ENDED if path.startswith(TERMINALS) else FILES[path]
            return [read_answer(esm.id, path, content)]
        case "write_args":
            ok_w = agent_pb2.WriteSuccess(path=esm.write_args.path)
            return [exec_reply(esm.id, write_result=agent_pb2.WriteResult(success=ok_w))]
        case "delete_args":
            path = esm.delete_args.path
            ok_d = agent_pb2.DeleteSuccess(path=path, deleted_file=path, prev_content="fresh\n")
            return [exec_reply(esm.id, delete_result=agent_pb2.DeleteResult(success=ok_d))]
        case "ls_args":
            root = agent_pb2.LsDirectoryTreeNode(abs_path=esm.ls_args.path, num_files=2)
            root.children_files.add(name="notes.txt")
            root.children_files.add(name="calc.ipynb")
            root.children_were_processed = True
            ok_l = agent_pb2.LsSuccess(directory_tree_root=root)
            return [exec_reply(esm.id, ls_result=agent_pb2.LsResult(success=ok_l))]
        case "grep_args":
            ga = esm.grep_args
            ok_g = agent_pb2.GrepSuccess(
                pattern=ga.pattern, path=ga.path, output_mode=ga.output_mode
            )
            files = ok_g.workspace_results["/w"].files
            files.files.append("/w/notes.txt")
            files.total_files = 1
            return [exec_reply(esm.id, grep_result=agent_pb2.GrepResult(success=ok_g))]
        case "diagnostics_args":
            found = diagnostics(esm.diagnostics_args.path, (2, 1, "unused import", "ruff"))
            return [exec_reply(esm.id, diagnostics_result=found)]
        case "mcp_args":
            ok_m = agent_pb2.McpSuccess()
            ok_m.content.add().text.text = "Logs are kept for 30 days."
            return [exec_reply(esm.id, mcp_result=agent_pb2.McpResult(success=ok_m))]
        case "request_context_args":
            reply = exec_reply(esm.id)
            reply.exec_client_message.request_context_result.success.request_context.CopyFrom(
                ide_context()
            )
            return [reply]
        case _:
            raise AssertionError(f"the test IDE cannot answer {which}")


def pending(reader: Reader, seen: set[tuple[str, int]]) -> list[agent_pb2.AgentServerMessage]:
    out = []
    for m in reader.messages:
        if m.HasField("exec_server_message"):
            key = ("exec", m.exec_server_message.id)
        elif m.HasField("interaction_query"):
            key = ("query", m.interaction_query.id)
        else:
            continue
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


async def play_turn(server: ServerProcess, transport: str, text: str, cid: str) -> Reader:
    """One user turn, every exec and query answered as the IDE would, until the end-stream."""
    async with session(server, transport) as (send, reader):
        await send(turn_request(text, cid))
        seen: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 30
        while reader.end is None and not reader.closed:
            assert time.monotonic() < deadline, reader.kinds
            for m in pending(reader, seen):
                for reply in ide_answers(m):
                    await send(reply)
            await asyncio.sleep(0.02)
        end = await reader.wait_end()
    assert end == {} and reader.turn_ended, (end, reader.kinds)
    return reader


def completed(reader: Reader) -> list[str]:
    return [
        str(m.interaction_update.tool_call_completed.tool_call.WhichOneof("tool"))
        for m in reader.messages
        if kind(m) == "interaction_update.tool_call_completed"
    ]


def conversation_bodies(upstream: FakeUpstream, tag: str) -> list[dict[str, Any]]:
    """Every upstream request of the conversation, in order: its first user message is ours."""
    out = []
    for r in list(upstream.requests):
        body = json.loads(r.body)
        users = [m for m in body["messages"] if m["role"] == "user"]
        if users and f"#{tag}" in content_text(users[0]["content"]):
            out.append(body)
    return out


@pytest.mark.parametrize("transport", ["h2", "shim"])
async def test_every_tool_family_keeps_the_request_prefix(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    for name, args, card in TURNS:
        reader = await play_turn(server, transport, prompt_for(name, args, tag), cid)
        assert completed(reader) == [card], (name, reader.kinds)
    assert_extends(conversation_bodies(upstream, tag))


# After these turns (the image Read, Delete, ReadLints, AskQuestion) the server restarts.
RESTART_AFTER = frozenset({2, 5, 10, 12})


async def test_the_prefix_holds_when_a_new_process_rebuilds_the_history_from_the_store(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Within one process the conversion of earlier messages is remembered; a new process
    converts the whole history from the store. Both must give the same bytes, or every restart
    of the server would cost a conversation its cache."""
    tag, cid = uuid.uuid4().hex[:8], str(uuid.uuid4())
    config = brain_config(upstream.base_url, db=tmp_path / "byok.db") + VISION_MODEL
    config += VISION_LIMITS
    turn = 0
    while turn < len(TURNS):
        with server_process(config, tmp_path) as srv:
            while turn < len(TURNS):
                name, args, card = TURNS[turn]
                reader = await play_turn(srv, "shim", prompt_for(name, args, tag), cid)
                assert completed(reader) == [card], (name, reader.kinds)
                turn += 1
                if turn - 1 in RESTART_AFTER:
                    break
    assert_extends(conversation_bodies(upstream, tag))


def assert_extends(bodies: list[dict[str, Any]]) -> None:
    # Two model calls per turn: the tool call, then the answer that quotes its result.
    assert len(bodies) == 2 * len(TURNS), len(bodies)
    for i in range(1, len(bodies)):
        before, after = bodies[i - 1], bodies[i]
        label = f"request {i} (turn of {TURNS[i // 2][0]})"
        # Everything but the messages is the same: tools in the same order, model, options.
        rest_before = {k: v for k, v in before.items() if k != "messages"}
        rest_after = {k: v for k, v in after.items() if k != "messages"}
        assert json.dumps(rest_after) == json.dumps(rest_before), label
        prefix = after["messages"][: len(before["messages"])]
        assert json.dumps(prefix) == json.dumps(before["messages"]), label
        assert len(after["messages"]) > len(before["messages"]), label
    # Each family's result reached the model, in the turn that called it.
    last = bodies[-1]["messages"]
    results = [m for m in last if m["role"] == "tool"]
    assert len(results) == len(TURNS)
    assert "hi" in results[0]["content"]
    assert "Logs are kept for 30 days." in results[-1]["content"]
    images = [m for m in last if m["role"] == "user" and isinstance(m["content"], list)]
    (shown,) = images  # the image's own message, still right after the image's tool result
    assert last[last.index(shown) - 1] == results[2]
    assert "the image is attached" in results[2]["content"]
    assert [m["role"] for m in last].count("user") == len(TURNS) + 1
