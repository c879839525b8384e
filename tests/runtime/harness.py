"""The production runtime, driven in-process: a fake channel in place of the HTTP transport, a
scripted LLM (FauxLLM) and a real SQLite store in a temporary folder.

`Client` plays the Cursor client on one run: it sends messages the way the transport delivers
them (bytes and the parsed message, in order, with their input ids), answers what the server
asks as a test says (blobs, context, exec requests), and keeps every server message it got, so
a test can assert the exact outgoing sequence with `kinds()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cursor_byok.llm.faux import FauxLLM, FauxResponse
from cursor_byok.llm.models import Model
from cursor_byok.llm.settings import ModelSettings, ProviderSettings
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.connect.channel import EndError, Incoming, StreamGone
from cursor_byok.transport.connect.sessions import RunStartInfo
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.runtime import Runner, RunnerServices, RunSummary, new_runner

MODEL = Model(
    id="faux",
    display_name="Faux",
    provider=ProviderSettings(name="faux", api="faux", base_url="http://faux.invalid"),
    settings=ModelSettings(model="faux-model"),
    context_window=100_000,
    prices=None,
)
STEP_TIMEOUT = 5.0

Answer = Callable[[a.ExecServerMessage], a.ExecClientMessage | None]


def run_request(
    conversation_id: str,
    text: str = "hello",
    *,
    turns: list[bytes] | None = None,
    resume: bool = False,
    mode: int = 0,
) -> a.AgentClientMessage:
    """A run request with an inline context (so the server asks for none)."""
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = MODEL.id
    if resume:
        req.action.resume_action.request_context.env.os_version = "linux test"
    else:
        uma = req.action.user_message_action
        uma.user_message.text = text
        if mode:
            uma.user_message.mode = mode  # type: ignore[assignment]
        uma.request_context.env.os_version = "linux test"
        uma.request_context.env.workspace_paths.append("/work")
    if turns:
        req.conversation_state.turns.extend(turns)
    return a.AgentClientMessage(run_request=req)


def cancel(reason: str = "stop") -> a.AgentClientMessage:
    msg = a.AgentClientMessage()
    msg.conversation_action.cancel_action.reason = reason
    return msg


def follow_up(text: str, *, mode: int = 0) -> a.AgentClientMessage:
    msg = a.AgentClientMessage()
    um = msg.conversation_action.user_message_action.user_message
    um.text = text
    if mode:
        um.mode = mode  # type: ignore[assignment]
    return msg


def read_ok(content: str) -> Answer:
    """Answer a read_args exec with `content`."""

    def answer(request: a.ExecServerMessage) -> a.ExecClientMessage | None:
        if request.WhichOneof("message") != "read_args":
            return None
        reply = a.ExecClientMessage(id=request.id, exec_id=request.exec_id)
        reply.read_result.success.content = content
        reply.read_result.success.path = request.read_args.path
        return reply

    return answer


def shell_ok(stdout: str) -> Answer:
    def answer(request: a.ExecServerMessage) -> a.ExecClientMessage | None:
        if request.WhichOneof("message") != "shell_stream_args":
            return None
        reply = a.ExecClientMessage(id=request.id, exec_id=request.exec_id)
        reply.shell_result.success.exit_code = 0
        reply.shell_result.success.stdout = stdout
        return reply

    return answer


def describe(message: a.AgentServerMessage) -> str:
    """A server message as a short, comparable line."""
    kind = message.WhichOneof("message")
    if kind == "interaction_update":
        iu = message.interaction_update
        which = iu.WhichOneof("message")
        if which == "text_delta":
            return f"text {iu.text_delta.text!r}"
        if which in ("tool_call_started", "tool_call_completed"):
            update = getattr(iu, which)
            tool = update.tool_call.WhichOneof("tool")
            result = ""
            if which == "tool_call_completed":
                inner = getattr(update.tool_call, tool or "")
                result = f" {inner.result.WhichOneof('result')}" if inner.HasField("result") else ""
            return f"{which} {tool}{result}"
        if which == "partial_tool_call":
            return "partial_tool_call"
        return str(which)
    if kind == "exec_server_message":
        return f"exec {message.exec_server_message.WhichOneof('message')}"
    if kind == "exec_server_control_message":
        return "exec abort"
    if kind == "kv_server_message":
        return f"kv {message.kv_server_message.WhichOneof('message')}"
    if kind == "conversation_checkpoint_update":
        return f"checkpoint {len(message.conversation_checkpoint_update.turns)}"
    return str(kind)


class Client:
    """The client side of one run (implements the transport's `RunChannel`)."""

    def __init__(self, request_id: str, *, answers: list[Answer] | None = None) -> None:
        self._request_id = request_id
        self.answers = list(answers or [])
        self.hold_execs = False  # keep exec requests unanswered (the test answers or cancels)
        self.blobs: dict[bytes, bytes] = {}  # what the client stores (set_blob) and serves
        self.silent_blobs: set[bytes] = set()  # get_blob requests it never answers
        self.sent: list[a.AgentServerMessage] = []
        self.held: list[a.ExecServerMessage] = []
        self.ending: EndError | None = None
        self._finished = False
        self.done = asyncio.Event()
        self._inbox: asyncio.Queue[Incoming | None] = asyncio.Queue()
        self._router: Callable[[Incoming], None] | None = None
        self._next = 0
        self.numbering_continued = False
        self._changed = asyncio.Event()
        self.gone_watch: Callable[[StreamGone], None] | None = None
        self.gone: StreamGone | None = None

    # -- RunChannel ---------------------------------------------------------------------------

    @property
    def request_id(self) -> str:
        return self._request_id

    async def receive(self) -> Incoming | None:
        item = await self._inbox.get()
        if item is None:
            self._inbox.put_nowait(None)
        return item

    def route(self, handler: Callable[[Incoming], None] | None) -> None:
        self._router = handler
        while handler is not None and not self._inbox.empty():
            item = self._inbox.get_nowait()
            if item is None:
                self._inbox.put_nowait(None)
                return
            handler(item)

    def continue_client_numbering(self) -> None:
        self.numbering_continued = True

    def watch_gone(self, handler: Callable[[StreamGone], None] | None) -> None:
        self.gone_watch = handler
        if handler is not None and self.gone is not None:
            handler(self.gone)

    def lose(self, gone: StreamGone) -> None:
        """The test says the client's stream is gone for good, as the transport would."""
        self.gone = gone
        if self.gone_watch is not None:
            self.gone_watch(gone)

    def send(self, frame: bytes) -> None:
        if self._finished:
            return
        message = a.AgentServerMessage.FromString(frame)
        self.sent.append(message)
        self._changed.set()
        asyncio.get_running_loop().call_soon(self._react, message)

    def finish(self, error: EndError | None = None) -> None:
        if self._finished:
            return
        self._finished = True
        self.ending = error
        self.done.set()
        self._changed.set()

    @property
    def finished(self) -> bool:
        return self._finished

    # -- the client ------------------------------------------------------------------------

    def say(self, message: a.AgentClientMessage) -> None:
        """Send one client message, in order, the way the transport delivers it."""
        payload = message.SerializeToString()
        incoming = Incoming(f"{self._request_id}:{self._next}", payload, message)
        self._next += 1
        if self._router is not None:
            self._router(incoming)
        else:
            self._inbox.put_nowait(incoming)

    def _react(self, message: a.AgentServerMessage) -> None:
        try:
            self._answer_request(message)
        finally:
            self._changed.set()

    def _answer_request(self, message: a.AgentServerMessage) -> None:
        kind = message.WhichOneof("message")
        if kind == "kv_server_message":
            kv = message.kv_server_message
            reply = a.KvClientMessage(id=kv.id)
            if kv.WhichOneof("message") == "set_blob_args":
                self.blobs[kv.set_blob_args.blob_id] = kv.set_blob_args.blob_data
                reply.set_blob_result.SetInParent()
            else:
                if kv.get_blob_args.blob_id in self.silent_blobs:
                    return
                data = self.blobs.get(kv.get_blob_args.blob_id)
                if data is None:
                    reply.get_blob_result.SetInParent()
                else:
                    reply.get_blob_result.blob_data = data
            self.say(a.AgentClientMessage(kv_client_message=reply))
        elif kind == "exec_server_message":
            request = message.exec_server_message
            if request.WhichOneof("message") == "request_context_args":
                reply = a.ExecClientMessage(id=request.id)
                reply.request_context_result.success.request_context.env.os_version = "linux"
                self.say(a.AgentClientMessage(exec_client_message=reply))
                return
            if self.hold_execs:
                self.held.append(request)
                return
            self.answer(request)

    def answer(self, request: a.ExecServerMessage) -> None:
        for answer in self.answers:
            reply = answer(request)
            if reply is not None:
                self.say(a.AgentClientMessage(exec_client_message=reply))
                return
        raise AssertionError(f"the test has no answer for {describe_exec(request)}")

    def kinds(self) -> list[str]:
        return [describe(m) for m in self.sent]

    def text(self) -> str:
        return "".join(
            m.interaction_update.text_delta.text
            for m in self.sent
            if m.WhichOneof("message") == "interaction_update"
            and m.interaction_update.WhichOneof("message") == "text_delta"
        )

    async def until(self, what: Callable[[], bool], label: str) -> None:
        async with asyncio.timeout(STEP_TIMEOUT):
            while not what():
                self._changed.clear()
                await self._changed.wait()

    async def ended(self) -> EndError | None:
        try:
            async with asyncio.timeout(STEP_TIMEOUT):
                await self.done.wait()
        except TimeoutError:
            raise AssertionError(f"the run did not end: {self.kinds()}") from None
        await asyncio.sleep(0)  # what the run does right after its end (its summary) runs too
        return self.ending


def describe_exec(request: a.ExecServerMessage) -> str:
    return f"exec {request.WhichOneof('message')}"


@dataclass
class Server:
    """One "process": a runner over a store, with a scripted model."""

    store: SQLiteStore
    llm: FauxLLM
    runner: Runner
    summaries: list[RunSummary] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, client: Client, *, transport: str = "run") -> asyncio.Task[None]:
        info = RunStartInfo(request_id=client.request_id, transport=transport)  # type: ignore[arg-type]
        task = asyncio.create_task(self.runner.handle(client, info))
        self.tasks.append(task)
        return task

    async def crash(self) -> None:
        """Stop every run the way a killed process does: nothing more reaches the store."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


async def open_server(
    db: Path,
    script: list[Any],
    *,
    delay: float = 0.0,
    chunk_size: int = 3,
    tool_timeout_s: float = 600.0,
    now_ms: Callable[[], int] | None = None,
) -> Server:
    store = await SQLiteStore.open(db)
    responses = [FauxResponse.text(r) if isinstance(r, str) else r for r in script]
    llm = FauxLLM(responses, chunk_size=chunk_size, delay=delay)
    server = Server(store=store, llm=llm, runner=None)  # type: ignore[arg-type]
    services = RunnerServices(
        models={MODEL.id: MODEL},
        store=store,
        llm_for=lambda _model: llm,
        tool_timeout_s=tool_timeout_s,
        on_run_end=server.summaries.append,
        on_unknown_event=server.unknown.append,
    )
    if now_ms is not None:
        services.now_ms = now_ms
    server.runner = new_runner(services)
    return server
