"""The HTTP/1.1 shim (RunSSE + BidiAppend) against the REAL server process and runner, with the
scripted brain upstream over loopback HTTP, driven by our own Connect client.

Also home of the small run driver the other e2e files share (`Reader`, `ShimRun`, message
builders): it answers the server's KV requests like a client with a blob store and records
every server message with its arrival time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import struct
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol

import httpx
import pytest

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.support import connect_client as cc
from tests.support.brain import answer, is_tool_images, text_reply
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream, Received, Reply

# ---------------------------------------------------------------------------------------------
# Message builders
# ---------------------------------------------------------------------------------------------

WORKSPACE = "/home/tester/project-e2e"
OS_VERSION = "linux 6.1.0-e2e"


def request_context() -> agent_pb2.RequestContext:
    rc = agent_pb2.RequestContext()
    rc.env.os_version = OS_VERSION
    rc.env.workspace_paths.append(WORKSPACE)
    rc.env.shell = "bash"
    return rc


def run_request(
    text: str,
    conversation_id: str | None = None,
    *,
    model: str = "brain-1",
    inline_context: bool = True,
    run_id: str | None = None,
) -> agent_pb2.AgentClientMessage:
    """A first-turn run_request. With `inline_context` the RequestContext rides in
    user_message_action.request_context (no request_context_args round trip)."""
    req = agent_pb2.AgentRunRequest(conversation_id=conversation_id or str(uuid.uuid4()))
    req.requested_model.model_id = model
    if run_id:
        req.run_id = run_id
    uma = req.action.user_message_action
    uma.user_message.text = text
    uma.user_message.message_id = str(uuid.uuid4())
    if inline_context:
        uma.request_context.CopyFrom(request_context())
    return agent_pb2.AgentClientMessage(run_request=req)


def exec_reply(exec_id: int, **oneof: Any) -> agent_pb2.AgentClientMessage:
    msg = agent_pb2.AgentClientMessage()
    msg.exec_client_message.CopyFrom(agent_pb2.ExecClientMessage(id=exec_id, **oneof))
    return msg


def read_ok(exec_id: int, path: str, content: str) -> agent_pb2.AgentClientMessage:
    lines = content.count("\n") + (0 if content.endswith("\n") else 1)
    success = agent_pb2.ReadSuccess(
        path=path, content=content, total_lines=lines, file_size=len(content)
    )
    return exec_reply(exec_id, read_result=agent_pb2.ReadResult(success=success))


def shell_stream(exec_id: int, **event: Any) -> agent_pb2.AgentClientMessage:
    return exec_reply(exec_id, shell_stream=agent_pb2.ShellStream(**event))


def stream_close(exec_id: int) -> agent_pb2.AgentClientMessage:
    msg = agent_pb2.AgentClientMessage()
    msg.exec_client_control_message.stream_close.id = exec_id
    return msg


def context_reply(exec_id: int) -> agent_pb2.AgentClientMessage:
    msg = exec_reply(exec_id)
    msg.exec_client_message.request_context_result.success.request_context.CopyFrom(
        request_context()
    )
    return msg


def cancel(reason: str = "user pressed stop") -> agent_pb2.AgentClientMessage:
    return cc.cancel(reason)


def kind(msg: agent_pb2.AgentServerMessage) -> str:
    """`interaction_update.text_delta`, `exec_server_message.read_args`, ..."""
    top = msg.WhichOneof("message") or "empty"
    inner: Any = getattr(msg, top, None)
    if top == "exec_server_message":
        which = next(
            (f.name for f, _ in inner.ListFields() if f.name not in ("id", "exec_id")), "none"
        )
        return f"{top}.{which}"
    if inner is not None and hasattr(inner, "WhichOneof"):
        for oneof in ("message", "event"):
            with contextlib.suppress(ValueError):
                which = inner.WhichOneof(oneof)
                if which:
                    return f"{top}.{which}"
    return top


def is_kind(name: str) -> Callable[[agent_pb2.AgentServerMessage], bool]:
    return lambda m: kind(m) == name


# ---------------------------------------------------------------------------------------------
# A run driver shared by the shim and HTTP/2 tests
# ---------------------------------------------------------------------------------------------


class FrameSource(Protocol):
    result: cc.StreamResult

    async def next_frame(self, timeout: float = 5.0) -> cc.Frame | None: ...


Sender = Callable[[agent_pb2.AgentClientMessage], Awaitable[None]]
BlobAnswer = Callable[[bytes], bytes | None]


class Reader:
    """Reads one server stream in the background: every message with its arrival time, the
    end-stream JSON, and automatic answers to KV requests (a client blob store: set_blob is
    stored and acknowledged; get_blob is answered from `blobs` or by `get_blob`)."""

    def __init__(
        self,
        source: FrameSource,
        send: Sender,
        *,
        blobs: dict[bytes, bytes] | None = None,
        get_blob: BlobAnswer | None = None,
        answered: set[int] | None = None,
        auto_kv: bool = True,
    ) -> None:
        self.source = source
        self.send = send
        self.blobs = blobs if blobs is not None else {}
        self.get_blob = get_blob
        self.answered = answered if answered is not None else set()
        self.auto_kv = auto_kv
        self.events: list[tuple[float, agent_pb2.AgentServerMessage]] = []
        self.frame_times: list[float] = []
        self.end: dict[str, Any] | None = None
        self.closed = False
        self.get_blob_ids: list[bytes] = []
        self.errors: list[BaseException] = []
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = time.monotonic()
        self.task = asyncio.create_task(self._loop())

    @property
    def messages(self) -> list[agent_pb2.AgentServerMessage]:
        return [m for _, m in self.events]

    @property
    def kinds(self) -> list[str]:
        return [kind(m) for m in self.messages]

    @property
    def texts(self) -> list[str]:
        return [m.interaction_update.text_delta.text for m in self.messages if is_text(m)]

    @property
    def turn_ended(self) -> bool:
        return "interaction_update.turn_ended" in self.kinds

    @property
    def error(self) -> dict[str, Any] | None:
        return None if self.end is None else self.end.get("error")

    async def _loop(self) -> None:
        try:
            while True:
                frame = await self.source.next_frame(300)
                now = time.monotonic()
                if frame is None:
                    break
                self.frame_times.append(now)
                if frame.flags & 0x02:
                    self.end = json.loads(frame.payload or b"{}")
                else:
                    msg = self.source.result.messages[-1]
                    self.events.append((now, msg))
                    if self.auto_kv and msg.HasField("kv_server_message"):
                        self._answer_kv(msg.kv_server_message)
                self._wake()
        except Exception as exc:  # surfaced by wait_end
            self.errors.append(exc)
        finally:
            self.closed = True
            self._wake()

    def _answer_kv(self, kv: agent_pb2.KvServerMessage) -> None:
        if kv.id in self.answered:
            return  # a replayed request we answered on an earlier subscription
        self.answered.add(kv.id)
        reply = agent_pb2.AgentClientMessage()
        reply.kv_client_message.id = kv.id
        if kv.HasField("set_blob_args"):
            self.blobs[bytes(kv.set_blob_args.blob_id)] = bytes(kv.set_blob_args.blob_data)
            reply.kv_client_message.set_blob_result.SetInParent()
        elif kv.HasField("get_blob_args"):
            blob_id = bytes(kv.get_blob_args.blob_id)
            self.get_blob_ids.append(blob_id)
            data = self.blobs.get(blob_id)
            if data is None and self.get_blob is not None:
                data = self.get_blob(blob_id)
            result = reply.kv_client_message.get_blob_result
            result.SetInParent()
            if data is not None:
                result.blob_data = data
        else:
            return
        self.spawn(self.send(reply))

    def spawn(self, coro: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception as exc:
                self.errors.append(exc)

        task = asyncio.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(
        self, pred: Callable[[agent_pb2.AgentServerMessage], bool], timeout: float = 15.0
    ) -> agent_pb2.AgentServerMessage:
        deadline = time.monotonic() + timeout
        while True:
            for m in self.messages:
                if pred(m):
                    return m
            if self.closed or self.end is not None:
                raise AssertionError(f"stream ended first: {self.kinds} end={self.end}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; got {self.kinds}")
            event = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), left)

    async def wait_end(self, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while self.end is None and not self.closed:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no end-stream after {timeout} s; got {self.kinds}")
            event = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), left)
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 5)
        if self.errors:
            raise AssertionError(f"client side failed: {self.errors!r}")
        assert self.end is not None, f"stream closed without end-stream: {self.kinds}"
        return self.end

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task
        for task in list(self._tasks):
            task.cancel()


def is_text(m: agent_pb2.AgentServerMessage) -> bool:
    return bool(m.interaction_update.WhichOneof("message") == "text_delta")


def exec_of(name: str) -> Callable[[agent_pb2.AgentServerMessage], bool]:
    return lambda m: m.exec_server_message.WhichOneof("message") == name


class ShimRun:
    """One run over the shim: appends carry increasing append_seqno values; RunSSE may be
    (re)opened any number of times for the same request_id."""

    def __init__(self, client: httpx.AsyncClient, *, token: str | None = None) -> None:
        self.client = client
        self.request_id = str(uuid.uuid4())
        self.token = token
        self.seq = 0
        self.blobs: dict[bytes, bytes] = {}
        self.answered: set[int] = set()
        self.get_blob: BlobAnswer | None = None

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    async def append(
        self, message: agent_pb2.AgentClientMessage | bytes, seqno: int | None = None, **kw: Any
    ) -> httpx.Response:
        if seqno is None:
            seqno = self.next_seq()
        else:
            self.seq = max(self.seq, seqno + 1)
        r = await cc.append(self.client, self.request_id, seqno, message, token=self.token, **kw)
        assert r.status_code == 200, (r.status_code, r.text)
        return r

    async def send(self, message: agent_pb2.AgentClientMessage) -> None:
        await self.append(message)

    @contextlib.asynccontextmanager
    async def subscribe(self, **kw: Any) -> AsyncIterator[Reader]:
        async with cc.runsse(self.client, self.request_id, token=self.token, **kw) as sse:
            assert sse.response.status_code == 200
            reader = Reader(
                sse, self.send, blobs=self.blobs, get_blob=self.get_blob, answered=self.answered
            )
            try:
                yield reader
            finally:
                await reader.close()


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def chat_requests(upstream: FakeUpstream, marker: str) -> list[dict[str, Any]]:
    """The upstream requests whose last user message (not counting the messages that carry
    tool-result images) contains `marker`."""
    out = []
    for r in list(upstream.requests):
        if not r.path.endswith("/chat/completions"):  # a doctor's ping, a window probe (/props)
            continue
        body = json.loads(r.body)
        users = [m for m in body["messages"] if m["role"] == "user" and not is_tool_images(m)]
        if users and marker in content_text(users[-1]["content"]):
            out.append(body)
    return out


def unique(prompt: str) -> str:
    return f"{prompt} #{uuid.uuid4().hex[:8]}"


async def wait_until(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return cond()


@contextlib.asynccontextmanager
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=20)
    async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
        yield client


async def raw_post_head(server: ServerProcess, path: str, length: int) -> int:
    """POST only the request head of a `length`-byte body; the response status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/proto\r\n"
            f"content-length: {length}\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 5)
        return int(line.split(b" ")[1])
    finally:
        writer.close()


def silent_then(seconds: float) -> Callable[[Received], Reply]:
    """The brain's answer, but the upstream says nothing for `seconds` first (a slow model:
    headers at once, then a long silence, then everything)."""

    def factory(received: Received) -> Reply:
        reply = answer(received)
        return Reply(
            status=reply.status,
            headers=reply.headers,
            chunks=[b"".join(reply.chunks)],
            delay_s=seconds,
        )

    return factory


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


async def test_text_turn_inline_context(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("hello shim")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end()
    assert end == {}, end
    assert "".join(reader.texts) == f"You said: {prompt}"
    assert reader.turn_ended
    assert reader.kinds[0] == "interaction_update.heartbeat"  # sent at once on RunSSE open
    assert not any(k == "exec_server_message.request_context_args" for k in reader.kinds)
    (body,) = chat_requests(upstream, prompt)
    system = body["messages"][0]
    assert system["role"] == "system"
    assert OS_VERSION in system["content"] and WORKSPACE in system["content"]


async def test_text_turn_answers_request_context_args(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """Without an inline context the server asks with request_context_args; our answer's
    environment reaches the system prompt."""
    prompt = unique("context please")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt, inline_context=False))
            ask = await reader.wait_for(exec_of("request_context_args"))
            assert not chat_requests(upstream, prompt)  # the model waits for the context
            await run.append(context_reply(ask.exec_server_message.id))
            end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    assert "".join(reader.texts) == f"You said: {prompt}"
    (body,) = chat_requests(upstream, prompt)
    assert OS_VERSION in body["messages"][0]["content"]


async def test_appends_before_runsse_binary_and_gzip(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """Append #0 may arrive before RunSSE; data_binary, a gzip body and a gzip-compressed
    envelope are all accepted; RunSSE's own body may be a compressed envelope."""
    variants: list[dict[str, Any]] = [
        {"binary": True},
        {"gzip_body": True},
        {"binary": True, "gzip_body": True, "enveloped": True},
    ]
    async with http(server) as client:
        for kw in variants:
            prompt = unique(f"variant {sorted(kw)}")
            run = ShimRun(client)
            await run.append(run_request(prompt), **kw)  # before RunSSE exists
            async with run.subscribe() as reader:
                end = await reader.wait_end()
            assert end == {} and "".join(reader.texts) == f"You said: {prompt}", kw
        # a compressed frame (flag 0x01) on BidiAppend (connect+proto) and on RunSSE
        prompt = unique("compressed frames")
        run = ShimRun(client)
        req = aiserver_pb2.BidiAppendRequest(
            append_seqno=0, data=run_request(prompt).SerializeToString().hex()
        )
        req.request_id.request_id = run.request_id
        r = await client.post(
            cc.APPEND,
            content=cc.envelope(req.SerializeToString(), compress=True),
            headers={
                "content-type": "application/connect+proto",
                "connect-content-encoding": "gzip",
            },
        )
        assert r.status_code == 200, r.text
        frames, rest = cc.split_frames(r.content)
        assert not rest and frames[-1].flags & 0x02 and json.loads(frames[-1].payload) == {}
        body = cc.envelope(
            aiserver_pb2.BidiRequestId(request_id=run.request_id).SerializeToString(),
            compress=True,
        )
        headers = {
            "content-type": "application/connect+proto",
            "connect-content-encoding": "gzip",
        }
        async with client.stream("POST", cc.RUNSSE, content=body, headers=headers) as resp:
            raw = b"".join([c async for c in resp.aiter_raw()])
        result = cc.StreamResult()
        frames, rest = cc.split_frames(raw)
        for f in frames:
            result.add(f)
        assert not rest and result.end == {} and "".join(result.texts) == f"You said: {prompt}"


async def test_out_of_order_and_duplicate_appends(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """A Shell tool answered with six appends sent in reverse order, one of them twice: the
    server delivers them in append_seqno order, so the output keeps its order and the stream
    is closed only after the exit."""
    prompt = unique('[tool Shell {"command": "printf alpha; printf beta"}]')
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            # seqno 1 (a client heartbeat) before seqno 0 (the run_request), and #0 twice
            await run.append(cc.heartbeat(), seqno=1)
            await asyncio.sleep(0.2)
            assert not chat_requests(upstream, prompt)  # held until #0 arrives
            await run.append(run_request(prompt), seqno=0)
            await run.append(run_request(prompt), seqno=0)  # a retried append: dropped
            run.seq = 2
            ask = await reader.wait_for(exec_of("shell_stream_args"))
            eid = ask.exec_server_message.id
            assert ask.exec_server_message.shell_stream_args.command.startswith("printf alpha")
            replies = [
                shell_stream(eid, start=agent_pb2.ShellStreamStart()),
                shell_stream(eid, stdout=agent_pb2.ShellStreamStdout(data="alpha\n")),
                shell_stream(eid, stdout=agent_pb2.ShellStreamStdout(data="beta\n")),
                shell_stream(eid, stderr=agent_pb2.ShellStreamStderr(data="warn\n")),
                shell_stream(eid, exit=agent_pb2.ShellStreamExit(code=0)),
                stream_close(eid),
            ]
            base = run.seq
            run.seq += len(replies)
            for i in reversed(range(len(replies))):  # last first
                await run.append(replies[i], seqno=base + i)
                if i == 2:
                    await run.append(replies[i], seqno=base + i)  # duplicate
            end = await reader.wait_end()
    assert end == {} and reader.turn_ended, (end, reader.kinds)
    deltas = [
        m.interaction_update.tool_call_delta.tool_call_delta.shell_tool_call_delta
        for m in reader.messages
        if kind(m) == "interaction_update.tool_call_delta"
    ]
    assert [d.stdout.content or d.stderr.content for d in deltas] == ["alpha\n", "beta\n", "warn\n"]
    bodies = chat_requests(upstream, prompt)
    assert len(bodies) == 2, "the duplicated run_request must start one turn only"
    tool = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "alpha\nbeta\n" in tool[0]["content"]
    assert "Exit code: 0" in tool[0]["content"]
    assert "The tool said: Exit code: 0\nstdout:\nalpha\nbeta\n" in "".join(reader.texts)


async def test_tool_turn_read_answered(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique('[tool Read {"path": "/home/tester/project-e2e/notes.md"}]')
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            ask = await reader.wait_for(exec_of("read_args"))
            esm = ask.exec_server_message
            assert esm.read_args.path == "/home/tester/project-e2e/notes.md"
            started = [k for k in reader.kinds if k == "interaction_update.tool_call_started"]
            assert len(started) == 1  # the card is started before the exec goes out
            await run.append(read_ok(esm.id, esm.read_args.path, "line one\nline two\n"))
            end = await reader.wait_end()
    assert end == {} and reader.turn_ended
    done = [m for m in reader.messages if kind(m) == "interaction_update.tool_call_completed"]
    assert len(done) == 1
    tc = done[0].interaction_update.tool_call_completed.tool_call
    assert tc.read_tool_call.result.success.content == "line one\nline two\n"
    assert tc.completed_at_ms >= tc.started_at_ms > 0
    assert "line one" in "".join(reader.texts)
    _first, second = chat_requests(upstream, prompt)
    tool = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool[0]["tool_call_id"] == "call_t1" and "line two" in tool[0]["content"]
    kinds = reader.kinds
    assert kinds.index("interaction_update.tool_call_completed") < kinds.index(
        "interaction_update.turn_ended"
    )


def replayable(reader: Reader) -> list[bytes]:
    """The messages of a subscription without heartbeats (those are written per subscriber)."""
    return [
        m.SerializeToString()
        for m in reader.messages
        if not is_kind("interaction_update.heartbeat")(m)
    ]


async def test_runsse_reconnect_replays_from_the_start(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = unique("[slow 2] replay me")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as first:
            await run.append(run_request(prompt))
            await first.wait_for(is_text)
            seen = replayable(first)
        # the first subscription is gone mid-answer; a second one replays, then follows live
        async with run.subscribe() as second:
            end = await second.wait_end()
            full = replayable(second)
        # and after the end, a third replays everything again, end-stream included
        async with run.subscribe() as third:
            end3 = await third.wait_end(5)
            again = replayable(third)
    assert end == {} and end3 == {}
    assert full[: len(seen)] == seen
    assert len(full) > len(seen)
    assert "".join(second.texts) == f"You said: {prompt}"
    assert again == full
    assert len(chat_requests(upstream, prompt)) == 1  # one model call for all three


async def test_heartbeats_while_the_upstream_is_silent(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """The model says nothing for 6.5 s: the server's heartbeats keep the stream alive (one
    after at most 5 s of output silence), then the answer arrives."""
    prompt = unique("quiet model")
    upstream.push(silent_then(6.5))
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end(20)
    assert end == {} and "".join(reader.texts) == f"You said: {prompt}"
    times = [reader.started, *reader.frame_times]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 5.0 + 1.0, gaps
    first_text = next(t for t, m in reader.events if is_text(m))
    beats = [t for t, m in reader.events if kind(m) == "interaction_update.heartbeat"]
    mid = [t for t in beats if reader.started + 1.0 < t < first_text]
    assert len(mid) >= 1, (beats, first_text - reader.started)


async def test_heartbeat_gaps_with_slow_marker(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """`[slow 6]`: the brain spreads six seconds over its chunks; no gap on the client ever
    exceeds the 5 s heartbeat interval (+ margin)."""
    prompt = unique("[slow 6] trickle")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end(20)
    assert end == {} and "".join(reader.texts) == f"You said: {prompt}"
    times = [reader.started, *reader.frame_times]
    assert times[-1] - times[0] >= 5.0  # it really was slow
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) <= 5.0 + 1.0, gaps


async def test_cancel_mid_stream(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("[slow 6] cancel me")
    abandoned = sum(upstream.closed_early)
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            await reader.wait_for(is_text)
            t0 = time.monotonic()
            await run.append(cancel())
            end = await reader.wait_end(5)
            took = time.monotonic() - t0
    assert end["error"]["code"] == "canceled", end
    assert not reader.turn_ended
    assert took < 2.0, took
    assert "".join(reader.texts) != f"You said: {prompt}"  # it stopped mid-answer
    details = cc.decode_error_details(end["error"])
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_USER_ABORTED_REQUEST
    # the upstream stream was abandoned (the server hung up on the model)
    assert await wait_until(lambda: sum(upstream.closed_early) > abandoned, 8)


async def test_cancel_mid_tool(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique('[tool Shell {"command": "sleep 30"}]')
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            ask = await reader.wait_for(exec_of("shell_stream_args"))
            eid = ask.exec_server_message.id
            await run.append(shell_stream(eid, start=agent_pb2.ShellStreamStart()))
            await run.append(cancel())
            abort = await reader.wait_for(is_kind("exec_server_control_message.abort"), 5)
            end = await reader.wait_end(5)
    assert abort.exec_server_control_message.abort.id == eid
    assert end["error"]["code"] == "canceled", end
    assert not reader.turn_ended
    assert len(chat_requests(upstream, prompt)) == 1  # no model call after the cancel
    abort_at = reader.kinds.index("exec_server_control_message.abort")
    assert all(not k.startswith("exec_server_message") for k in reader.kinds[abort_at:])


async def test_provider_error(server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("[fail] please")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            end = await reader.wait_end(60)
    error = end["error"]
    assert error["code"] == "unavailable", end
    assert not reader.turn_ended
    details = cc.decode_error_details(error)
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_PROVIDER_ERROR
    assert "brain: scripted failure" in details.details.detail
    assert "brain: scripted failure" in error["message"]
    assert not any("scripted failure" in t or "error" in t.lower() for t in reader.texts)


async def test_malformed_appends_are_rejected_and_the_run_goes_on(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    prompt = unique("[slow 1.5] still serving")
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))

            async def bad(
                message: agent_pb2.AgentClientMessage | bytes, **kw: Any
            ) -> httpx.Response:
                return await cc.append(client, run.request_id, 1, message, **kw)

            r = await bad(cc.heartbeat(), hex_data="zz-not-hex")
            assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
            assert "hex" in r.json()["message"]
            r = await bad(b"\x0a\xff\xff\xff\x0f")  # a truncated length-delimited field
            assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
            r = await bad(cc.heartbeat(), content_type="text/plain")
            assert r.status_code == 415 and r.json()["code"] == "unimplemented", r.text
            # a BidiAppendRequest that is not protobuf at all
            r = await client.post(
                cc.APPEND, content=b"\xff\xff\xff", headers={"content-type": "application/proto"}
            )
            assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
            # a truncated envelope (connect+proto declares 100 bytes, sends 10)
            r = await client.post(
                cc.APPEND,
                content=struct.pack(">BI", 0, 100) + b"\x08" * 10,
                headers={"content-type": "application/connect+proto"},
            )
            frames, _ = cc.split_frames(r.content)
            assert frames and frames[-1].flags & 0x02, r.content
            assert json.loads(frames[-1].payload)["error"]["code"] == "invalid_argument"
            # an oversized frame (declares 2 GiB)
            r = await client.post(
                cc.APPEND,
                content=struct.pack(">BI", 0, 0x7FFFFFFF) + b"\x00" * 16,
                headers={"content-type": "application/connect+proto"},
            )
            frames, _ = cc.split_frames(r.content)
            assert json.loads(frames[-1].payload)["error"]["code"] == "resource_exhausted"
            # an oversized body by content-length: refused before any of it is read
            status = await raw_post_head(server, cc.APPEND, 33 * 1024 * 1024)
            assert status == 429, status
            end = await reader.wait_end(15)
    assert end == {} and reader.turn_ended, end
    assert "".join(reader.texts) == f"You said: {prompt}"


async def test_malformed_runsse_requests(server: ServerProcess, upstream: FakeUpstream) -> None:
    async with http(server) as client:
        headers = {"content-type": "application/connect+proto"}
        cases = [
            (struct.pack(">BI", 0, 50) + b"\x0a\x03abc", "invalid_argument"),  # truncated
            (cc.envelope(b"\x0a\xff\xff"), "invalid_argument"),  # not a BidiRequestId
            # a header declaring 10 MiB with nothing after it: not an envelope of this body,
            # so (leniently) taken as a raw message, which it is not
            (struct.pack(">BI", 0, 10 * 1024 * 1024), "invalid_argument"),
            (cc.envelope(b"x" * (70 * 1024)), "resource_exhausted"),  # > 64 KiB body
        ]
        for body, code in cases:
            r = await client.post(cc.RUNSSE, content=body, headers=headers)
            assert r.status_code == 200, r.text  # streams fail in the end-stream frame
            frames, rest = cc.split_frames(r.content)
            assert not rest and len(frames) == 1 and frames[0].flags & 0x02
            assert json.loads(frames[0].payload)["error"]["code"] == code, (code, r.content)
        r = await client.post(
            cc.RUNSSE, content=cc.envelope(b""), headers={"content-type": "text/plain"}
        )
        assert r.status_code == 415 and r.json()["code"] == "unimplemented"
        # still serving
        prompt = unique("after the garbage")
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            assert await reader.wait_end() == {}
        assert "".join(reader.texts) == f"You said: {prompt}"


async def test_unknown_model_and_bad_first_message(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    async with http(server) as client:
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(run_request("hi", model="no-such-model"))
            end = await reader.wait_end()
        assert end["error"]["code"] == "invalid_argument"
        assert "brain-1" in end["error"]["message"] and "no-such-model" in end["error"]["message"]
        details = cc.decode_error_details(end["error"])
        assert details.error == aiserver_pb2.ErrorDetails.ERROR_BAD_MODEL_NAME
        run = ShimRun(client)
        async with run.subscribe() as reader:
            await run.append(cc.heartbeat())  # not a run_request
            end = await reader.wait_end()
        assert end["error"]["code"] == "invalid_argument" and not reader.turn_ended


# -- authentication: a second server with a token ------------------------------------------

TOKEN = "e2e-secret-token"


@pytest.fixture(scope="module")
def auth_server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("auth")
    config = brain_config(upstream.base_url, db=work / "byok.db", extra=f'auth_token = "{TOKEN}"')
    with server_process(config, work) as srv:
        yield srv


async def test_auth_rejected(auth_server: ServerProcess, upstream: FakeUpstream) -> None:
    prompt = unique("authorized only")
    async with http(auth_server) as client:
        for token in (None, "wrong-token"):
            run = ShimRun(client, token=token)
            r = await cc.append(client, run.request_id, 0, run_request(prompt), token=token)
            assert r.status_code == 401 and r.json()["code"] == "unauthenticated", r.text
            async with cc.runsse(client, run.request_id, token=token) as sse:
                result = await sse.read_all()
            assert result.status == 200 and result.error is not None
            assert result.error["code"] == "unauthenticated" and not result.messages
        assert not chat_requests(upstream, prompt)
        run = ShimRun(client, token=TOKEN)
        async with run.subscribe() as reader:
            await run.append(run_request(prompt))
            assert await reader.wait_end() == {}
        assert "".join(reader.texts) == f"You said: {prompt}"


def test_brain_text_reply_is_chunked() -> None:
    """Guard for the ordering tests: the brain splits its text in several deltas."""
    assert len(text_reply("You said: something long enough").chunks) > 6
