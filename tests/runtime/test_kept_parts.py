"""The context blobs a conversation read are kept with its committed context (TurnContext
.kept_parts), also through a run that names no parts and takes a follow-up with a context of
its own: the next turn whose client cannot serve a blob still finds the copy."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import msgspec

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.loop.context import KeptPart, TurnContext
from cursor_byok.transport.cursor.context import ContextPart, PartKind
from cursor_byok.transport.cursor.context_parts import decode_request_context_part
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.runtime import records
from cursor_byok.transport.runtime.context import with_kept
from tests.runtime.harness import Client, follow_up, open_server, read_ok, run_request

READ = FauxResponse.tool_calls([("Read", {"path": "a.py"})])


def rules_blob() -> bytes:
    part = a.RequestContextRulesPart()
    part.rules.add(full_path="/w/r.mdc", content="Kept rule.")
    return part.SerializeToString()


def with_parts(cid: str, blob: bytes) -> a.AgentClientMessage:
    msg = run_request(cid, "first")
    action = msg.run_request.action
    action.user_message_action.ClearField("request_context")
    parts = action.request_context_parts
    parts.rules_blob_id = hashlib.sha256(blob).digest()
    parts.dynamic_context.env.os_version = "linux test"
    return msg


async def test_a_follow_up_context_keeps_the_conversations_blobs(tmp_path: Path) -> None:
    blob = rules_blob()
    blob_id = hashlib.sha256(blob).digest()
    server = await open_server(tmp_path / "db", ["one", READ, "two"], chunk_size=50)
    first = Client("r0")
    first.blobs[blob_id] = blob
    first.say(with_parts("c1", blob))
    server.start(first)
    assert await first.ended() is None
    assert server.llm.calls[0].request.system_prompt.count("Kept rule.") == 1

    # a run with its context inline only, and a follow-up bringing a context of its own
    second = Client("r1", answers=[read_ok("x")])
    second.hold_execs = True
    second.say(run_request("c1", "look"))
    server.start(second)
    await second.until(lambda: bool(second.held), "the exec")
    steer = follow_up("and then this")
    steer.conversation_action.user_message_action.request_context.env.os_version = "linux 2"
    second.say(steer)
    await asyncio.sleep(0.05)
    second.answer(second.held.pop())
    assert await second.ended() is None
    assert "linux 2" in server.llm.calls[-1].request.system_prompt  # the follow-up's context

    record = await server.store.load("c1")
    assert record is not None
    context = records.decode_state(record.state, record.messages).context
    assert context is not None
    assert [(k.kind, k.blob_id, k.data) for k in context.kept_parts] == [("rules", blob_id, blob)]
    await server.store.close()


def test_with_kept_keeps_the_last_copy_of_each_kind() -> None:
    blob = rules_blob()
    rules = decode_request_context_part(PartKind.RULES, blob, b"r" * 32)
    mcps = a.RequestContextMcpsPart()
    mcps.tools.add(name="t", tool_name="t", provider_identifier="s")
    mcps_data = mcps.SerializeToString()
    mcp = decode_request_context_part(PartKind.MCPS, mcps_data, b"m" * 32)
    ctx = with_kept(TurnContext(), [mcp, rules], ())
    assert ctx.kept_parts == (
        KeptPart(kind="rules", blob_id=b"r" * 32, data=blob),
        KeptPart(kind="mcps", blob_id=b"m" * 32, data=mcps_data),
    )
    # a run without parts carries them on; a new copy of one kind replaces only that kind
    assert with_kept(TurnContext(), [], ctx.kept_parts).kept_parts == ctx.kept_parts
    newer = decode_request_context_part(PartKind.RULES, blob, b"n" * 32)
    after = with_kept(TurnContext(), [newer], ctx.kept_parts).kept_parts
    assert [(k.kind, k.blob_id) for k in after] == [("rules", b"n" * 32), ("mcps", b"m" * 32)]
    # a part not to keep (unreadable, too big) leaves the earlier copy
    unreadable = ContextPart(kind=PartKind.MCPS)
    assert with_kept(TurnContext(), [unreadable], ctx.kept_parts).kept_parts == ctx.kept_parts
    # the kept copies survive the store's encoding
    assert msgspec.json.decode(msgspec.json.encode(ctx), type=TurnContext) == ctx


def mcps_blob(description: str) -> bytes:
    part = a.RequestContextMcpsPart()
    part.tools.add(
        name="kb_lookup", tool_name="kb_lookup", provider_identifier="kb", description=description
    )
    return part.SerializeToString()


async def test_a_blob_the_client_never_answers_falls_back_within_the_deadline(
    tmp_path: Path,
) -> None:
    """A client that does not answer a context blob at all: after the context deadline the
    turn goes on with the kept copy (it used to end the run with an error)."""
    server = await open_server(tmp_path / "db", ["one", "two"], chunk_size=50)
    server.runner.services.context_timeout_s = 0.3
    first_blob, second_blob = mcps_blob("first"), mcps_blob("second")
    first = Client("r0")
    first.blobs[hashlib.sha256(first_blob).digest()] = first_blob
    msg = with_parts("c1", first_blob)
    parts = msg.run_request.action.request_context_parts
    parts.ClearField("rules_blob_id")
    parts.mcps_blob_id = hashlib.sha256(first_blob).digest()
    first.say(msg)
    server.start(first)
    assert await first.ended() is None

    second = Client("r1")
    second.silent_blobs.add(hashlib.sha256(second_blob).digest())
    msg = with_parts("c1", second_blob)
    parts = msg.run_request.action.request_context_parts
    parts.ClearField("rules_blob_id")
    parts.mcps_blob_id = hashlib.sha256(second_blob).digest()
    msg.run_request.action.user_message_action.user_message.text = "second"
    started = asyncio.get_running_loop().time()
    second.say(msg)
    server.start(second)
    assert await second.ended() is None
    assert asyncio.get_running_loop().time() - started < 4.0  # the 0.3 s deadline, not 30 s
    tools = server.llm.calls[-1].request.tools
    (kb,) = [t for t in tools if t.name == "kb_lookup"]
    assert kb.description == "first"  # the kept copy
    await server.store.close()
