"""Issue 24's seams in one session against the real local model: our client over the HTTP/1.1
shim (RunSSE + BidiAppend) -> our server -> a recording relay -> llama-server (8k window,
SmolLM2), with a window small enough that the conversation is compacted after a few turns.

1. Plan mode: the real model calls CreatePlan; the client saves the plan; Build (the IDE's
   execute_plan_action) turns the plan's todos into the todo list.
2. The real model answers one prompt with two Read calls in one response: both execs reach the
   client together, before either answer; the client reads the files for real and answers in
   reverse order; the next request has both results in call order.
3. Padding turns until a compaction (a summary epoch).
4. A rewind to the checkpoint two turns before the compaction (one turn before might itself
   cross the threshold with the new message): that view comes back unsummarized, and the
   request llama-server received extends that epoch's last request byte for byte.
5. A fork of the rewound chat (a new conversation id with its checkpoint, as the IDE forks):
   the forked chat's first request carries every turn of that view.

SmolLM2-135M does not choose tools by itself. What it does do, at temperature 0 with a seed,
is repeat a Hermes `<tool_call>` block it is shown ("Repeat exactly: ..."); llama.cpp's own
tool-call parser (--jinja, the Qwen2.5 template) turns the blocks into structured calls, so
the calls, their arguments and the parallel response are the real model's output, parsed by
the real server. The assertions are on what our server did, not on the model's prose."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_queries import action_request, respond
from tests.e2e.test_shim import OS_VERSION, Reader, ShimRun, http, read_ok, run_request
from tests.realupstream.conftest import LlamaServer
from tests.realupstream.recording_proxy import RecordingProxy, recording_proxy
from tests.support.live import ServerProcess, server_process

# The agent's fixed part is about 4,300 real tokens; the window leaves room for the plan, the
# parallel turn and a few padding turns before the threshold.
WINDOW = 3_600
TURN_TIMEOUT_S = 150
# How long the client waits for the rest of a response's execs before it answers any.
BATCH_WAIT_S = 20.0
PADDING = "the sea is salty and deep, with tides that follow the moon; " * 16
PLAN: dict[str, Any] = {
    "plan": "# Tidy the notes\n\n1. Sort the notes.\n2. Count them.",
    "overview": "Tidy the notes.",
    "name": "Tidy the notes",
    "todos": [{"id": "t1", "content": "Sort the notes"}, {"id": "t2", "content": "Count them"}],
}
UNUSED_TOOLS = [
    "Shell", "Write", "StrReplace", "Delete", "LS", "Grep", "Glob", "AwaitShell", "EditNotebook",
    "ReadLints", "AskQuestion", "Task",
]  # fmt: skip
PLAN_TODOS = [(t["id"], t["content"]) for t in PLAN["todos"]]
PLAN_URI = "file:///home/tester/.cursor/plans/tidy-the-notes.plan.md"


def config(proxy: RecordingProxy, model: str, db: Path) -> str:
    return f"""
[server]
database = "{db}"
# Only the tools this session uses and a few more: the full set is about 4,300 tokens, and
# each mode change makes llama-server read the whole prefix again (~50 s on 2 cores).
disabled_tools = {json.dumps(UNUSED_TOOLS)}

[providers.llama]
api = "openai-chat"
base_url = "http://127.0.0.1:{proxy.port}/v1"

[models.local]
provider = "llama"
model = "{model}"
context_window = {WINDOW}
max_output_tokens = 120
temperature = 0
extra_body = {{ seed = 1, parallel_tool_calls = true }}
"""


def repeat(*calls: dict[str, Any]) -> str:
    """A prompt the real model answers with exactly these tool calls, in one response."""
    blocks = "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)
    return f"Repeat exactly:\n{blocks}"


def context(workspace: Path) -> a.RequestContext:
    rc = a.RequestContext()
    rc.env.os_version = OS_VERSION
    rc.env.workspace_paths.append(str(workspace))
    rc.env.shell = "bash"
    return rc


class Client:
    """The IDE's part: one shim run per turn, the blob store kept across runs (as the IDE
    keeps it), Read execs answered from real files in the workspace, a plan query answered
    with the saved plan. Read answers are held until `hold` execs are out (0: answer each at
    once), then sent in reverse order."""

    def __init__(self, server: ServerProcess, workspace: Path) -> None:
        self.server = server
        self.workspace = workspace
        self.blobs: dict[bytes, bytes] = {}

    async def turn(self, message: a.AgentClientMessage, hold: int = 0) -> Reader:
        async with http(self.server) as client:
            run = ShimRun(client)
            run.blobs = self.blobs
            async with run.subscribe() as reader:
                await run.send(message)
                await self._serve(run, reader, hold)
                end = await reader.wait_end(10)
        assert end == {} and reader.turn_ended, (end, reader.kinds, self.server.log()[-2000:])
        return reader

    async def _serve(self, run: ShimRun, reader: Reader, hold: int) -> None:
        answered: set[int] = set()
        held: list[a.ExecServerMessage] = []
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while reader.end is None and not reader.closed:
            assert time.monotonic() < deadline, f"turn timed out: {reader.kinds}"
            for m in reader.messages:
                if m.HasField("interaction_query") and m.interaction_query.id not in answered:
                    answered.add(m.interaction_query.id)
                    await run.send(self._answer_query(m.interaction_query))
                e = m.exec_server_message
                if is_read_exec(m) and e.id not in answered:
                    answered.add(e.id)
                    held.append(e)
            if held and len(held) < hold:
                first = next(
                    t
                    for t, m in reader.events
                    if is_read_exec(m) and m.exec_server_message.id == held[0].id
                )
                assert time.monotonic() - first < BATCH_WAIT_S, (
                    f"{len(held)} of {hold} execs sent before any answer: {reader.kinds}"
                )
            if held and len(held) >= hold:
                for e in reversed(held):
                    await run.send(self._read(e))
                held.clear()
                hold = 0
            await asyncio.sleep(0.02)

    def _read(self, e: a.ExecServerMessage) -> a.AgentClientMessage:
        path = Path(e.read_args.path)
        real = path if path.is_absolute() else self.workspace / path
        return read_ok(e.id, e.read_args.path, real.read_text())

    def _answer_query(self, query: a.InteractionQuery) -> a.AgentClientMessage:
        assert query.WhichOneof("query") == "create_plan_request_query", query
        result = a.CreatePlanResult(success=a.CreatePlanSuccess(), plan_uri=PLAN_URI)
        response = a.CreatePlanRequestResponse(result=result)
        return respond(query.id, create_plan_request_response=response)


def user_turn(
    text: str,
    conversation: str,
    workspace: Path,
    state: a.ConversationStateStructure | None,
    mode: int = a.AGENT_MODE_AGENT,
) -> a.AgentClientMessage:
    message = run_request(text, conversation, model="local", inline_context=False)
    action = message.run_request.action.user_message_action
    action.request_context.CopyFrom(context(workspace))
    action.user_message.mode = mode
    if state is not None:
        message.run_request.conversation_state.CopyFrom(state)
    return message


def build_turn(
    conversation: str, workspace: Path, state: a.ConversationStateStructure
) -> a.AgentClientMessage:
    build = a.ConversationAction(execute_plan_action=a.ExecutePlanAction(plan_file_uri=PLAN_URI))
    build.execute_plan_action.request_context.CopyFrom(context(workspace))
    message = action_request(conversation, build)
    message.run_request.requested_model.model_id = "local"
    message.run_request.conversation_state.CopyFrom(state)
    return message


def checkpoint_of(reader: Reader) -> a.ConversationStateStructure:
    states = [
        m.conversation_checkpoint_update
        for m in reader.messages
        if m.HasField("conversation_checkpoint_update")
    ]
    assert states, reader.kinds
    return states[-1]


def at(reader: Reader, pred: Callable[[a.AgentServerMessage], bool]) -> list[tuple[int, float]]:
    """(position, arrival time) of each message of the stream that `pred` picks."""
    return [(i, t) for i, (t, m) in enumerate(reader.events) if pred(m)]


def messages_bytes(body: bytes) -> bytes:
    text = body.decode()
    start = text.index('"messages":') + len('"messages":')
    _, end = json.JSONDecoder().raw_decode(text, start)
    return text[start:end].encode()


def messages(body: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(body)["messages"]
    return out


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content)
    return str(content or "")


def user_texts(body: bytes) -> list[str]:
    return [text_of(m) for m in messages(body) if m["role"] == "user"]


def is_read_exec(m: a.AgentServerMessage) -> bool:
    return bool(m.HasField("exec_server_message") and m.exec_server_message.HasField("read_args"))


def is_completed(m: a.AgentServerMessage) -> bool:
    return m.interaction_update.WhichOneof("message") == "tool_call_completed"


async def test_one_real_session_strings_plan_build_parallel_compaction_rewind_and_fork(
    llama_server_8k: LlamaServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha notes\n")
    (workspace / "b.txt").write_text("beta notes\n")
    source = str(uuid.uuid4())
    began = time.monotonic()
    with (
        recording_proxy(llama_server_8k.port) as proxy,
        server_process(config(proxy, llama_server_8k.model, tmp_path / "db"), tmp_path) as srv,
    ):
        ide = Client(srv, workspace)
        checkpoints: list[a.ConversationStateStructure] = []
        sent_after: list[int] = []  # chat requests llama-server had received after each turn

        async def turn(message: a.AgentClientMessage, hold: int = 0) -> Reader:
            reader = await ide.turn(message, hold)
            checkpoints.append(checkpoint_of(reader))
            sent_after.append(len(proxy.chat_bodies()))
            return reader

        def pad(n: int) -> a.AgentClientMessage:
            prompt = f"Note {n}: {PADDING} Answer in one short sentence."
            return user_turn(prompt, source, workspace, checkpoints[-1])

        # 1. Plan mode: the model's CreatePlan, then Build.
        plan_call = repeat({"name": "CreatePlan", "arguments": PLAN})
        planned = await turn(user_turn(plan_call, source, workspace, None, a.AGENT_MODE_PLAN))
        (query,) = [
            m.interaction_query.create_plan_request_query
            for m in planned.messages
            if m.HasField("interaction_query")
        ]
        assert [(t.id, t.content) for t in query.args.todos] == PLAN_TODOS
        assert not checkpoints[-1].todos  # a plan is not yet the list
        await turn(build_turn(source, workspace, checkpoints[-1]))
        assert user_texts(proxy.chat_bodies()[-1])[-1].startswith("The user pressed Build")
        todos = [a.TodoItem.FromString(t) for t in checkpoints[-1].todos]
        assert [(t.id, t.content) for t in todos] == PLAN_TODOS

        # 2. Two reads in one response, right after Build (a plain turn between makes SmolLM2
        # answer the repeat request in prose: measured).
        reads = repeat(
            {"name": "Read", "arguments": {"path": "a.txt"}},
            {"name": "Read", "arguments": {"path": "b.txt"}},
        )
        parallel_at = len(checkpoints)
        parallel = await turn(user_turn(reads, source, workspace, checkpoints[-1]), hold=2)
        execs = at(parallel, is_read_exec)
        completed = at(parallel, is_completed)
        assert len(execs) == 2, parallel.kinds
        # Both went out before either answer came back, within one batch.
        assert max(i for i, _ in execs) < min(i for i, _ in completed), parallel.kinds
        assert execs[1][1] - execs[0][1] < 1.0
        call_ids = [
            parallel.messages[i].exec_server_message.read_args.tool_call_id for i, _ in execs
        ]
        after_tools = proxy.chat_bodies()[sent_after[parallel_at - 1] + 1]
        tools = [m for m in messages(after_tools) if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in tools][-2:] == call_ids  # in call order
        assert "alpha notes" in text_of(tools[-2]) and "beta notes" in text_of(tools[-1])

        # 3. Padding until a compaction.
        compacted_at: int | None = None
        for n in range(1, 9):
            reader = await turn(pad(n))
            if "interaction_update.summary_started" in reader.kinds:
                compacted_at = len(checkpoints) - 1
                break
        assert compacted_at is not None and compacted_at >= parallel_at + 2, srv.log()
        assert checkpoints[compacted_at].self_summary_count == 1
        assert [len(c.turns) for c in checkpoints] == list(range(1, compacted_at + 2))

        # 4. Back to the end of the turn before the compaction.
        target = compacted_at - 2
        epoch_last = proxy.chat_bodies()[sent_after[target] - 1]
        again = "Note 1, again: what is the sea like? Answer in one short sentence."
        back = await turn(user_turn(again, source, workspace, checkpoints[target]))
        assert "interaction_update.summary_started" not in back.kinds
        rewound = proxy.chat_bodies()[-1]
        assert user_texts(rewound)[-1] == again
        assert messages_bytes(rewound).startswith(messages_bytes(epoch_last)[:-1])
        state = checkpoints[-1]
        assert list(state.turns[: target + 1]) == list(checkpoints[target].turns)
        assert len(state.turns) == target + 2 and state.self_summary_count == 0

        # 5. A fork of the rewound chat.
        fork = str(uuid.uuid4())
        before_fork = len(proxy.chat_bodies())
        forked = await turn(user_turn("Say goodbye.", fork, workspace, state))
        first = proxy.chat_bodies()[before_fork]
        log = srv.log()
    took = time.monotonic() - began
    # The fork's first request is the rewound view (every turn, the summarized-away ones
    # included) and the fork's own message.
    said = user_texts(first)
    assert said[:-1] == user_texts(rewound) and said[-1] == "Say goodbye.", said
    assert [m["role"] for m in messages(first)][: len(messages(rewound))] == [
        m["role"] for m in messages(rewound)
    ]
    assert any("alpha notes" in text_of(m) for m in messages(first) if m["role"] == "tool")
    assert forked.turn_ended
    assert took < 360, (took, log[-2000:])
