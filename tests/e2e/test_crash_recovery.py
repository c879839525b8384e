"""Crash recovery, tested by `kill -9` of a real server subprocess (design §4.2, §11, §13, §14).

Each test starts `cursor-byok serve` on a fixed port and a fresh SQLite file, drives a run over
the HTTP/1.1 shim (BidiAppend + RunSSE) with a scripted client, kills the server with SIGKILL at
a chosen point, restarts it on the same port and database, and lets the client come back:

- during an LLM stream: the same call is sent again with byte-identical request bytes (same
  call_id and messages_hash), whether the client re-opens RunSSE with the same request_id
  (without re-sending its appends) or starts a new run with `resume_action`; no half answer is
  ever appended;
- during a tool wait: a side-effecting tool (Shell, Write) that was sent but never answered is
  not executed again (the model gets an "outcome unknown" error result); a read-only tool (Read)
  is sent again and the turn completes;
- after `done`: the committed answer is delivered without calling the model again;
- input dedupe: a replayed run_request append (same request_id, seqno 0) on a restarted server
  returns the recorded result and changes nothing.

In every case the conversation ends with exactly the messages (canonical bytes) it would have
had without the crash: the same script is run on a fresh database (same conversation id) in an
in-process server and the message rows are compared.

The helpers below (`ShimRun`, `ScriptedClient`, the DB readers) are shared with
test_store_failures.py and test_followup_from_store.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.app import App
from cursor_byok.config import parse_config
from cursor_byok.launch import free_port, running_server
from cursor_byok.llm import canonical
from cursor_byok.llm.types import AssistantMessage, ToolResultMessage, UserMessage
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.cursor.proto import aiserver_pb2
from cursor_byok.transport.runtime.checkpoints import BLOB_TIMEOUT_S
from tests.support import postgres
from tests.support.connect_client import (
    RUNSSE,
    StreamResult,
    append,
    envelope,
    heartbeat,
    split_frames,
)
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.upstream import FakeUpstream, Received, Reply

MODEL = "brain-1"
STEP_TIMEOUT = 15.0  # one wait of a test (a turn, a reconnect); the brain answers in < 1 s

# ---------------------------------------------------------------------------------------------
# A scripted Cursor client over the HTTP/1.1 shim
# ---------------------------------------------------------------------------------------------

SIDE_EFFECT_EXECS = ("shell_args", "shell_stream_args", "write_args", "delete_args", "mcp_args")


@dataclass
class ScriptedClient:
    """What the fake client holds and how it answers the server's requests.

    `files` answers read_args; `blobs` answers get_blob_args and keeps set_blob_args; exec kinds
    in `hold` are recorded but never answered (the tool is "running" when the server dies).
    """

    files: dict[str, str] = field(default_factory=dict)
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    hold: frozenset[str] = frozenset()


class ShimRun:
    """One run over the shim: RunSSE reader plus BidiAppend writer, answering as it reads."""

    def __init__(self, http: httpx.AsyncClient, request_id: str, client: ScriptedClient) -> None:
        self.http = http
        self.request_id = request_id
        self.client = client
        self.seqno = 0
        self.result = StreamResult()
        self.kinds: list[str] = []  # one entry per non-heartbeat message, in arrival order
        self.execs: list[a.ExecServerMessage] = []
        self.blob_requests: list[bytes] = []
        self.set_blobs: list[tuple[int, bytes]] = []  # (message index, blob id)
        self.checkpoints: list[tuple[int, a.ConversationStateStructure]] = []
        self.broken: str | None = None  # why the stream ended without an end-stream frame
        self.ended = asyncio.Event()
        self._response: httpx.Response | None = None
        self._task: asyncio.Task[None] | None = None

    # -- driving ----------------------------------------------------------------------------

    async def open(self, first: a.AgentClientMessage | None = None) -> ShimRun:
        """Open RunSSE for the request id, then append `first` (None: re-attach only)."""
        body = envelope(aiserver_pb2.BidiRequestId(request_id=self.request_id).SerializeToString())
        headers = {
            "content-type": "application/connect+proto",
            "connect-protocol-version": "1",
            "x-request-id": self.request_id,
        }
        request = self.http.build_request("POST", RUNSSE, content=body, headers=headers)
        self._response = await self.http.send(request, stream=True)
        self._task = asyncio.create_task(self._read())
        if first is not None:
            await self.send(first)
        return self

    async def send(self, message: a.AgentClientMessage) -> None:
        seqno = self.seqno
        self.seqno += 1
        r = await append(self.http, self.request_id, seqno, message)
        assert r.status_code == 200, r.text

    async def _read(self) -> None:
        assert self._response is not None
        buf = b""
        try:
            async for chunk in self._response.aiter_raw():
                frames, buf = split_frames(buf + chunk)
                for frame in frames:
                    self.result.add(frame)
                    if frame.flags & 0x02:
                        return
                    await self._on(self.result.messages[-1])
            self.broken = "the stream closed without an end-stream frame"
        except (httpx.HTTPError, OSError) as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
        finally:
            self.ended.set()

    async def _on(self, m: a.AgentServerMessage) -> None:
        kind = m.WhichOneof("message")
        if kind == "interaction_update":
            sub = m.interaction_update.WhichOneof("message")
            if sub == "heartbeat":
                return
            kind = f"interaction_update.{sub}"
        index = len(self.kinds)
        if kind == "exec_server_message":
            kind = f"exec.{m.exec_server_message.WhichOneof('message')}"
        elif kind == "kv_server_message":
            kind = f"kv.{m.kv_server_message.WhichOneof('message')}"
        self.kinds.append(kind)
        if kind.startswith("exec."):
            self.execs.append(m.exec_server_message)
            await self._answer_exec(m.exec_server_message)
        elif kind.startswith("kv."):
            await self._answer_kv(index, m.kv_server_message)
        elif kind == "conversation_checkpoint_update":
            self.checkpoints.append((index, m.conversation_checkpoint_update))

    async def _reply(self, message: a.AgentClientMessage) -> None:
        with contextlib.suppress(httpx.HTTPError, OSError, AssertionError):
            await self.send(message)

    async def _answer_exec(self, e: a.ExecServerMessage) -> None:
        which = e.WhichOneof("message")
        if which in self.client.hold:
            return
        reply = a.ExecClientMessage(id=e.id)
        if which == "request_context_args":
            reply.request_context_result.success.request_context.CopyFrom(a.RequestContext())
        elif which == "read_args":
            path = e.read_args.path
            if path in self.client.files:
                content = self.client.files[path]
                reply.read_result.success.path = path
                reply.read_result.success.content = content
                reply.read_result.success.total_lines = content.count("\n") + 1
            else:
                reply.read_result.file_not_found.path = path
        elif which == "write_args":
            reply.write_result.success.path = e.write_args.path
            reply.write_result.success.lines_created = e.write_args.file_text.count("\n") + 1
        elif which in ("shell_stream_args", "shell_args"):
            args = getattr(e, which)
            reply.shell_result.success.command = args.command
            reply.shell_result.success.exit_code = 0
            reply.shell_result.success.stdout = "ran\n"
        else:
            return
        await self._reply(a.AgentClientMessage(exec_client_message=reply))
        if which in ("shell_stream_args", "shell_args"):
            close = a.ExecClientControlMessage(stream_close=a.ExecClientStreamClose(id=e.id))
            await self._reply(a.AgentClientMessage(exec_client_control_message=close))

    async def _answer_kv(self, index: int, kv: a.KvServerMessage) -> None:
        reply = a.KvClientMessage(id=kv.id)
        if kv.WhichOneof("message") == "get_blob_args":
            blob_id = bytes(kv.get_blob_args.blob_id)
            self.blob_requests.append(blob_id)
            data = self.client.blobs.get(blob_id)
            reply.get_blob_result.SetInParent()
            if data is not None:
                reply.get_blob_result.blob_data = data
        else:
            blob_id = bytes(kv.set_blob_args.blob_id)
            self.client.blobs[blob_id] = bytes(kv.set_blob_args.blob_data)
            self.set_blobs.append((index, blob_id))
            reply.set_blob_result.SetInParent()
        await self._reply(a.AgentClientMessage(kv_client_message=reply))

    # -- waiting ----------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(self.result.texts)

    def execs_of(self, *kinds: str) -> list[a.ExecServerMessage]:
        return [e for e in self.execs if e.WhichOneof("message") in kinds]

    def describe(self) -> str:
        end = self.result.end
        return (
            f"run {self.request_id}: messages={self.kinds} end={end} broken={self.broken} "
            f"text={self.text!r}"
        )

    async def wait_for(
        self, predicate: Callable[[], bool], what: str, timeout: float = STEP_TIMEOUT
    ) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.ended.is_set() and not predicate():
                raise AssertionError(f"the stream ended before {what}: {self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout:g} s: {self.describe()}")
            await asyncio.sleep(0.02)

    async def finish(self, timeout: float = STEP_TIMEOUT) -> StreamResult:
        """Wait for the end of the stream (end-stream frame or a broken connection)."""
        try:
            await asyncio.wait_for(self.ended.wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"the run did not end within {timeout:g} s: {self.describe()}"
            ) from None
        return self.result

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._response is not None:
            with contextlib.suppress(Exception):
                await self._response.aclose()


def shim_http(base_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(30.0))


def user_run_request(
    conversation_id: str,
    text: str,
    *,
    state: a.ConversationStateStructure | None = None,
) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = MODEL
    req.action.user_message_action.user_message.text = text
    if state is not None:
        req.conversation_state.CopyFrom(state)
    return a.AgentClientMessage(run_request=req)


def resume_run_request(conversation_id: str) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = MODEL
    req.action.resume_action.SetInParent()
    return a.AgentClientMessage(run_request=req)


async def complete_turn(
    base_url: str,
    request_id: str,
    first: a.AgentClientMessage,
    client: ScriptedClient | None = None,
) -> ShimRun:
    """One whole run; fails unless it ends with turn_ended and no error."""
    async with shim_http(base_url) as http:
        run = ShimRun(http, request_id, client or ScriptedClient())
        try:
            await run.open(first)
            await run.finish()
        finally:
            await run.close()
    assert run.result.turn_ended and run.result.error is None, run.describe()
    return run


# ---------------------------------------------------------------------------------------------
# The database, read from outside (read-only; schema in docs/store.md)
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def db_reader(db: Path | str) -> Iterator[Any]:
    """SQLite read-only, or PostgreSQL (the tests that run on both pass a URL)."""
    with postgres.reader(db) as conn:
        yield conn


def db_messages(db: Path | str, conversation_id: str) -> list[bytes]:
    with db_reader(db) as conn:
        rows = conn.execute(
            "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,)
        ).fetchall()
    return [bytes(r[0]) for r in rows]


def db_state(db: Path | str, conversation_id: str) -> dict[str, Any] | None:
    with db_reader(db) as conn:
        row = conn.execute(
            "SELECT state FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
    return None if row is None else json.loads(row[0])


def db_version(db: Path | str, conversation_id: str) -> int:
    with db_reader(db) as conn:
        row = conn.execute(
            "SELECT version FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
    return 0 if row is None else int(row[0])


def db_calls(db: Path | str, conversation_id: str) -> list[tuple[str, str, str]]:
    """(call_id, messages_hash, status) of the conversation's LLM calls, oldest first."""
    with db_reader(db) as conn:
        rows = conn.execute(
            "SELECT call_id, messages_hash, status FROM llm_calls WHERE conversation_id = ? "
            "ORDER BY created_at_ms, call_id",
            (conversation_id,),
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def db_operations(db: Path | str, conversation_id: str) -> list[tuple[str, str, int]]:
    """(tool_name, status, side_effects) of the conversation's client operations."""
    with db_reader(db) as conn:
        rows = conn.execute(
            "SELECT tool_name, status, side_effects FROM client_operations "
            "WHERE conversation_id = ? ORDER BY created_at_ms, operation_id",
            (conversation_id,),
        ).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def decoded(bodies: list[bytes]) -> list[Any]:
    return [canonical.decode_message(b) for b in bodies]


async def poll(predicate: Callable[[], bool], what: str, timeout: float = STEP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except sqlite3.Error:
            pass  # the file may be between transactions of the server; try again
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        await asyncio.sleep(0.02)


def requests_with(upstream: FakeUpstream, marker: str) -> list[Received]:
    """The upstream requests whose body holds `marker` (as it appears in a JSON string)."""
    needle = json.dumps(marker)[1:-1].encode()
    return [r for r in upstream.requests if needle in r.body]


def chat_messages(request: Received) -> list[dict[str, Any]]:
    body = json.loads(request.body)
    return [m for m in body["messages"] if m["role"] != "system"]


# ---------------------------------------------------------------------------------------------
# A run of the same script without a crash, in process, on a fresh database
# ---------------------------------------------------------------------------------------------


async def baseline_messages(
    upstream: FakeUpstream,
    folder: Path,
    conversation_id: str,
    first: a.AgentClientMessage,
    client: ScriptedClient,
) -> list[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "baseline.db"
    config = parse_config(brain_config(upstream.base_url, db=db))
    app = await App.open(config)
    try:
        async with running_server(config, app.runner.handle) as srv:
            await complete_turn(srv.base_url, "baseline-run", first, client)
    finally:
        await app.close()
    return db_messages(db, conversation_id)


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


@dataclass
class Crashable:
    """A server on a fixed port and database that can be killed and started again."""

    upstream: FakeUpstream
    root: Path
    port: int = field(default_factory=free_port)
    starts: int = 0
    current: ServerProcess | None = None
    logs: list[Path] = field(default_factory=list)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    database: str | None = None  # a postgresql:// URL; None: a SQLite file in `root`
    models: str = ""  # more [models.*] tables for the configuration

    @property
    def db(self) -> Path | str:
        return self.database or self.root / "byok.db"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        self.starts += 1
        work = self.root / f"start-{self.starts}"  # one log file per start
        work.mkdir()
        text = brain_config(self.upstream.base_url, db=self.db) + self.models
        self.current = self._stack.enter_context(server_process(text, work, port=self.port))
        self.logs.append(self.current.log_path)
        return self.current

    def kill9(self) -> None:
        assert self.current is not None
        self.current.kill9()

    def log(self) -> str:
        return "\n".join(
            f"--- server start {i + 1} ---\n{p.read_text(errors='replace')[-4000:]}"
            for i, p in enumerate(self.logs)
        )

    def close(self) -> None:
        self._stack.close()


@pytest.fixture
def crashable(
    upstream: FakeUpstream, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Crashable]:
    """On SQLite; a test parametrized with `crashable=postgresql` (indirect) gets a new
    database on the suite's PostgreSQL cluster instead."""
    database = None
    if getattr(request, "param", "sqlite") == "postgresql":
        cluster: postgres.Cluster = request.getfixturevalue("pg_cluster")
        database = cluster.create_database(f"crash{next(_DATABASES)}")
    # The same test runs on both backends with the same prompts: requests_with() must see
    # this test's requests only.
    upstream.requests.clear()
    server = Crashable(upstream, tmp_path, database=database)
    try:
        yield server
    finally:
        server.close()


def _delta(delta: dict[str, str]) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    return json.dumps(
        {"id": "chatcmpl-half", "object": "chat.completion.chunk", "choices": [choice]}
    )


def partial_then_hang(text: str) -> Reply:
    """A model answer that streams `text` and then stalls forever (no finish, no [DONE])."""
    events = [_delta({"role": "assistant", "content": ""})]
    events += [_delta({"content": text[i : i + 4]}) for i in range(0, len(text), 4)]
    reply = Reply.events(events, delay_s=0.01)
    reply.hang_after = True
    return reply


def assert_one_answer(messages: list[Any], answer: str) -> None:
    assistants = [m for m in messages if isinstance(m, AssistantMessage)]
    assert len(assistants) == 1, messages
    assert assistants[0].text == answer


async def complete_turn_logged(
    crashable: Crashable,
    request_id: str,
    first: a.AgentClientMessage | None,
    *,
    seqno: int = 0,
) -> ShimRun:
    """A whole run against the crashable server; failures carry the server logs. A client
    that reopens a run goes on counting its appends from `seqno`, as a real one does."""
    async with shim_http(crashable.url) as http:
        run = ShimRun(http, request_id, ScriptedClient(files={"/w/notes.txt": NOTES}))
        run.seqno = seqno
        try:
            await run.open(first)
            try:
                await run.finish()
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{crashable.log()}") from None
        finally:
            await run.close()
    assert run.result.turn_ended and run.result.error is None, (
        run.describe() + "\n" + crashable.log()
    )
    return run


_DATABASES = itertools.count(1)
NOTES = "first line of the notes\nsecond line\n"


# ---------------------------------------------------------------------------------------------
# kill -9 during an LLM stream
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("crashable", ["sqlite", "postgresql"], indirect=True)
@pytest.mark.parametrize("comeback", ["reopen_runsse", "resume_action"])
async def test_kill9_during_llm_stream_resends_the_same_request(
    crashable: Crashable, upstream: FakeUpstream, tmp_path: Path, comeback: str
) -> None:
    conversation = f"conv-stream-{comeback}"
    prompt = f"stream-crash {comeback}: tell me something"
    answer = f"You said: {prompt}"
    partial = "HALF-ANSWER-NEVER-COMMITTED " * 3
    upstream.push(partial_then_hang(partial))
    crashable.start()

    async with shim_http(crashable.url) as http:
        run1 = ShimRun(http, f"req-{comeback}-1", ScriptedClient())
        try:
            await run1.open(user_run_request(conversation, prompt))
            await run1.wait_for(lambda: len(run1.result.texts) >= 3, "text deltas")
            state = db_state(crashable.db, conversation)
            assert state is not None and state["status"] == "WaitingLLM", state
            calls_before = db_calls(crashable.db, conversation)
            assert len(calls_before) == 1, calls_before
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()
    assert run1.text.startswith("HALF-ANSWER") and not run1.result.turn_ended
    assert len(requests_with(upstream, prompt)) == 1

    crashable.start()
    if comeback == "reopen_runsse":
        # The same request_id, and the client does NOT re-send its appends: the server must
        # find the run by request_id in its store.
        run2 = await complete_turn_logged(crashable, run1.request_id, None, seqno=run1.seqno)
    else:
        run2 = await complete_turn_logged(
            crashable, f"req-{comeback}-2", resume_run_request(conversation)
        )
    assert run2.text == answer, run2.describe()

    sent = requests_with(upstream, prompt)
    assert len(sent) == 2, f"expected the call once more after the restart, got {len(sent)}"
    assert sent[1].body == sent[0].body, "the retried request is not byte-identical"

    messages = decoded(db_messages(crashable.db, conversation))
    assert_one_answer(messages, answer)
    assert not any("HALF-ANSWER" in getattr(m, "text", "") for m in messages)
    calls_after = db_calls(crashable.db, conversation)
    assert len(calls_after) == 1, calls_after
    assert calls_after[0][:2] == calls_before[0][:2]  # same call_id and messages_hash
    assert calls_after[0][2] == "committed"

    expected = await baseline_messages(
        upstream,
        tmp_path / "baseline",
        conversation,
        user_run_request(conversation, prompt),
        ScriptedClient(),
    )
    assert db_messages(crashable.db, conversation) == expected


async def test_kill9_during_a_later_call_rebuilds_its_stored_delta(
    crashable: Crashable, upstream: FakeUpstream
) -> None:
    """The second call of a conversation is stored as a delta on the first
    (transport/stored_request.py). After kill -9 a new process, which has no base in memory,
    rebuilds it from the database and resends exactly the bytes sent before."""
    conversation = "conv-delta-crash"
    crashable.start()
    first = await complete_turn_logged(
        crashable, "req-delta-1", user_run_request(conversation, "delta crash: turn one")
    )
    assert first.text == "You said: delta crash: turn one"
    prompt = "delta crash: turn two"
    upstream.push(partial_then_hang("HALF " * 5))
    async with shim_http(crashable.url) as http:
        run = ShimRun(http, "req-delta-2", ScriptedClient())
        try:
            await run.open(user_run_request(conversation, prompt))
            await run.wait_for(lambda: len(run.result.texts) >= 2, "text deltas")
            crashable.kill9()
            await run.finish()
        finally:
            await run.close()
    with db_reader(crashable.db) as conn:
        stored = conn.execute(
            "SELECT request FROM llm_calls WHERE conversation_id = ? "
            "ORDER BY created_at_ms, call_id",
            (conversation,),
        ).fetchall()
    assert len(stored) == 2
    assert bytes(stored[0][0])[:1] != b"\x00" and bytes(stored[1][0])[:1] == b"\x00"
    assert len(stored[1][0]) < len(stored[0][0]) // 2  # the delta holds what turn two added

    crashable.start()
    again = await complete_turn_logged(crashable, "req-delta-3", resume_run_request(conversation))
    assert again.text == f"You said: {prompt}", again.describe()
    sent = requests_with(upstream, prompt)
    assert len(sent) == 2 and sent[1].body == sent[0].body, "the resent request differs"
    assert [c[2] for c in db_calls(crashable.db, conversation)] == ["committed", "committed"]


# ---------------------------------------------------------------------------------------------
# kill -9 during a tool wait
# ---------------------------------------------------------------------------------------------

SIDE_EFFECT_TOOLS = {
    "Shell": ('{"command": "touch /w/flag"}', ("shell_stream_args", "shell_args")),
    "Write": ('{"path": "/w/out.txt", "contents": "x"}', ("write_args",)),
}


@pytest.mark.parametrize("tool", sorted(SIDE_EFFECT_TOOLS))
@pytest.mark.parametrize("crashable", ["sqlite", "postgresql"], indirect=True)
async def test_kill9_during_side_effect_tool_is_not_run_again(
    crashable: Crashable, upstream: FakeUpstream, tmp_path: Path, tool: str
) -> None:
    args, exec_kinds = SIDE_EFFECT_TOOLS[tool]
    conversation = f"conv-effect-{tool}"
    prompt = f"effect-crash {tool} [tool {tool} {args}]"
    crashable.start()

    async with shim_http(crashable.url) as http:
        run1 = ShimRun(http, f"req-effect-{tool}-1", ScriptedClient(hold=frozenset(exec_kinds)))
        try:
            await run1.open(user_run_request(conversation, prompt))
            await run1.wait_for(lambda: bool(run1.execs_of(*exec_kinds)), f"a {tool} exec")
            assert db_operations(crashable.db, conversation) == [(tool, "sent", 1)]
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()
    assert len(requests_with(upstream, prompt)) == 1

    crashable.start()
    run2 = await complete_turn_logged(
        crashable, f"req-effect-{tool}-2", resume_run_request(conversation)
    )
    assert run2.execs_of(*SIDE_EFFECT_EXECS) == [], "a side-effecting tool was sent again"

    sent = requests_with(upstream, prompt)
    assert len(sent) == 2, len(sent)
    tool_msgs = [m for m in chat_messages(sent[1]) if m["role"] == "tool"]
    assert len(tool_msgs) == 1, tool_msgs
    content = tool_msgs[0]["content"]
    content = content if isinstance(content, str) else json.dumps(content)
    assert "outcome is unknown" in content.lower(), content

    messages = decoded(db_messages(crashable.db, conversation))
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["UserMessage", "AssistantMessage", "ToolResultMessage", "AssistantMessage"]
    result = messages[2]
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert "outcome is unknown" in result.text.lower()
    assert messages[3].text.startswith("The tool said: ")
    assert [s for _, s, _ in db_operations(crashable.db, conversation)] != ["sent"]

    # Without the crash the same turn has the same user message and tool call; only the tool's
    # result (and so the final answer) differ, since the tool's outcome is unknown here.
    expected = decoded(
        await baseline_messages(
            upstream,
            tmp_path / "baseline",
            conversation,
            user_run_request(conversation, prompt),
            ScriptedClient(),
        )
    )
    assert [type(m).__name__ for m in expected] == kinds
    assert messages[:2] == expected[:2]


async def test_kill9_during_read_only_tool_sends_it_again(
    crashable: Crashable, upstream: FakeUpstream, tmp_path: Path
) -> None:
    conversation = "conv-read"
    prompt = 'read-crash [tool Read {"path": "/w/notes.txt"}]'
    crashable.start()

    async with shim_http(crashable.url) as http:
        client = ScriptedClient(files={"/w/notes.txt": NOTES}, hold=frozenset({"read_args"}))
        run1 = ShimRun(http, "req-read-1", client)
        try:
            await run1.open(user_run_request(conversation, prompt))
            await run1.wait_for(lambda: bool(run1.execs_of("read_args")), "a read_args exec")
            assert db_operations(crashable.db, conversation) == [("Read", "sent", 0)]
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()

    crashable.start()
    run2 = await complete_turn_logged(crashable, "req-read-2", resume_run_request(conversation))
    reads = run2.execs_of("read_args")
    assert [r.read_args.path for r in reads] == ["/w/notes.txt"], run2.describe()
    assert run2.text.startswith("The tool said: ") and "first line of the notes" in run2.text

    messages = decoded(db_messages(crashable.db, conversation))
    assert [type(m).__name__ for m in messages] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert not messages[2].is_error and "first line of the notes" in messages[2].text
    expected = await baseline_messages(
        upstream,
        tmp_path / "baseline",
        conversation,
        user_run_request(conversation, prompt),
        ScriptedClient(files={"/w/notes.txt": NOTES}),
    )
    assert db_messages(crashable.db, conversation) == expected


# ---------------------------------------------------------------------------------------------
# kill -9 after done, before the client saw the end
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("comeback", ["reopen_runsse", "resume_action"])
async def test_kill9_after_done_delivers_the_committed_answer(
    crashable: Crashable, upstream: FakeUpstream, tmp_path: Path, comeback: str
) -> None:
    conversation = f"conv-done-{comeback}"
    prompt = f"done-crash {comeback}: remember this"
    answer = f"You said: {prompt}"
    crashable.start()

    async with shim_http(crashable.url) as http:
        run1 = ShimRun(http, f"req-done-{comeback}-1", ScriptedClient())
        try:
            await run1.open(user_run_request(conversation, prompt))
            await poll(
                lambda: len(db_messages(crashable.db, conversation)) == 2,
                "committed assistant message",
            )
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()
    assert len(requests_with(upstream, prompt)) == 1
    committed = db_messages(crashable.db, conversation)
    version = db_version(crashable.db, conversation)

    crashable.start()
    if comeback == "reopen_runsse":
        run2 = await complete_turn_logged(crashable, run1.request_id, None, seqno=run1.seqno)
    else:
        run2 = await complete_turn_logged(
            crashable, f"req-done-{comeback}-2", resume_run_request(conversation)
        )
    assert run2.text == answer, run2.describe()
    assert len(requests_with(upstream, prompt)) == 1, "the model was called again"
    assert db_messages(crashable.db, conversation) == committed
    assert db_version(crashable.db, conversation) == version
    assert_one_answer(decoded(committed), answer)

    expected = await baseline_messages(
        upstream,
        tmp_path / "baseline",
        conversation,
        user_run_request(conversation, prompt),
        ScriptedClient(),
    )
    assert committed == expected


# ---------------------------------------------------------------------------------------------
# Input dedupe across a restart
# ---------------------------------------------------------------------------------------------


async def test_replayed_run_request_after_restart_changes_nothing(
    crashable: Crashable, upstream: FakeUpstream
) -> None:
    conversation = "conv-dedupe"
    prompt = "dedupe: say it once"
    answer = f"You said: {prompt}"
    crashable.start()
    first = user_run_request(conversation, prompt)
    run1 = await complete_turn_logged(crashable, "req-dedupe-1", first)
    assert run1.text == answer
    committed = db_messages(crashable.db, conversation)
    version = db_version(crashable.db, conversation)
    with db_reader(crashable.db) as conn:
        inputs = conn.execute("SELECT count(*) FROM input_commits").fetchone()[0]

    crashable.kill9()
    crashable.start()
    # The same request id and append_seqno 0 again, exactly as first sent.
    run2 = await complete_turn_logged(crashable, "req-dedupe-1", first)
    assert run2.text == answer, run2.describe()
    assert len(requests_with(upstream, prompt)) == 1, "the replayed input called the model"
    assert db_messages(crashable.db, conversation) == committed
    assert db_version(crashable.db, conversation) == version
    with db_reader(crashable.db) as conn:
        assert conn.execute("SELECT count(*) FROM input_commits").fetchone()[0] == inputs
    assert [type(m) for m in decoded(committed)] == [UserMessage, AssistantMessage]


# ---------------------------------------------------------------------------------------------
# A reopened run whose client goes on counting its appends
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("killed_in", ["llm_stream", "read_tool"])
async def test_reopened_run_takes_the_clients_next_append(
    crashable: Crashable, upstream: FakeUpstream, killed_in: str
) -> None:
    """A real shim client that reopens RunSSE after a restart keeps its append_seqno count.
    The new process takes its next append as the next input: the Read is answered, the
    checkpoint blob is acknowledged and published, and the turn takes no longer than a normal
    one. (Before, those answers were held forever behind appends only the dead process saw:
    the Read hung, and the turn waited out the checkpoint's 5 s blob timeout.)"""
    conversation = f"conv-count-{killed_in}"
    crashable.start()
    if killed_in == "llm_stream":
        prompt = "count-crash: tell me something"
        upstream.push(partial_then_hang("HALF " * 5))
        hold: frozenset[str] = frozenset()
    else:
        prompt = 'count-crash [tool Read {"path": "/w/notes.txt"}]'
        hold = frozenset({"read_args"})
    async with shim_http(crashable.url) as http:
        run1 = ShimRun(http, f"req-count-{killed_in}", ScriptedClient(hold=hold))
        try:
            await run1.open(user_run_request(conversation, prompt))
            if killed_in == "llm_stream":
                await run1.wait_for(lambda: len(run1.result.texts) >= 3, "text deltas")
            else:
                await run1.wait_for(lambda: bool(run1.execs_of("read_args")), "a read exec")
                await run1.send(heartbeat())  # the client's count runs ahead of the inputs
            crashable.kill9()
            await run1.finish()
        finally:
            await run1.close()
    assert run1.seqno >= 1

    crashable.start()
    started = time.monotonic()
    run2 = await complete_turn_logged(crashable, run1.request_id, None, seqno=run1.seqno)
    took = time.monotonic() - started
    assert run2.checkpoints, f"no checkpoint published: {run2.describe()}"
    assert run2.set_blobs, run2.describe()
    if killed_in == "read_tool":
        assert [r.read_args.path for r in run2.execs_of("read_args")] == ["/w/notes.txt"]
        assert "first line of the notes" in run2.text
    assert took < BLOB_TIMEOUT_S * 0.8, f"the reopened turn took {took:.2f} s"
