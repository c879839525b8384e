"""The IDE's context blobs (`request_context_parts`: rules, skills, MCP servers) are asked for
all at once, and a blob whose bytes hash to its id is asked for once per server, not once per
turn (transport/client_blobs.py)."""

from __future__ import annotations

import hashlib
import json
import uuid

from prometheus_client.parser import text_string_to_metric_families

from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_shim import ShimRun, content_text, http
from tests.support.live import ServerProcess
from tests.support.upstream import FakeUpstream


def rules(marker: str) -> bytes:
    part = a.RequestContextRulesPart()
    part.rules.add(full_path="/w/.cursor/rules/blobs.mdc", content=f"Always mention {marker}.")
    return part.SerializeToString()


def skills(marker: str) -> bytes:
    part = a.RequestContextSkillsPart()
    part.agent_skills.add(full_path="/w/.cursor/skills/s.md", description=f"skill {marker}")
    return part.SerializeToString()


def run_request(conversation_id: str, text: str, parts: dict[str, bytes]) -> a.AgentClientMessage:
    """A user message whose context comes as blob ids only, as the current IDE sends it."""
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = "brain-1"
    req.action.user_message_action.user_message.text = text
    p = req.action.request_context_parts
    for kind, blob_id in parts.items():
        setattr(p, f"{kind}_blob_id", blob_id)
    p.dynamic_context.env.os_version = "linux test"
    p.dynamic_context.env.workspace_paths.append("/w")
    return a.AgentClientMessage(run_request=req)


def asked(messages: list[a.AgentServerMessage]) -> list[bytes]:
    return [
        bytes(m.kv_server_message.get_blob_args.blob_id)
        for m in messages
        if m.kv_server_message.HasField("get_blob_args")
    ]


async def test_context_blobs_are_fetched_at_once_then_kept(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    marker = uuid.uuid4().hex[:8]
    rules_data, skills_data = rules(marker), skills(marker)
    unverifiable = b"\x0a\x00"  # bytes a client keeps under an id that is not their hash
    blobs = {
        hashlib.sha256(rules_data).digest(): rules_data,
        hashlib.sha256(skills_data).digest(): skills_data,
        b"\x07" * 32: unverifiable,
    }
    parts = dict(zip(("rules", "skills", "mcps"), blobs, strict=True))
    conversation = str(uuid.uuid4())
    async with http(server) as client:
        # turn 1: hold every blob request until all three arrived: asked one after the other,
        # the second would never come (wait_for times out)
        run = ShimRun(client)
        run.blobs.update(blobs)
        async with run.subscribe() as reader:
            reader.auto_kv = False
            await run.append(run_request(conversation, f"first {marker}", parts))
            await reader.wait_for(lambda _: len(asked(reader.messages)) >= 3, timeout=10)
            for m in reader.messages:
                if m.HasField("kv_server_message"):
                    reader._answer_kv(m.kv_server_message)
            reader.auto_kv = True
            checkpoint_blob = await reader.wait_for(
                lambda m: m.kv_server_message.HasField("set_blob_args"), timeout=10
            )
            reader._answer_kv(checkpoint_blob.kv_server_message)
            end = await reader.wait_end(20)
        assert end == {} and reader.turn_ended, end
        assert sorted(asked(reader.messages)) == sorted(blobs)

        # turn 2, same ids: only the blob that cannot be checked against its id is asked again
        run = ShimRun(client)
        run.blobs.update(blobs)
        async with run.subscribe() as reader:
            await run.append(run_request(conversation, f"second {marker}", parts))
            end = await reader.wait_end(20)
        assert end == {} and reader.turn_ended, end
        assert asked(reader.messages) == [b"\x07" * 32]

        # /metrics shows the caches at work: turn 2 took the kept state and both blobs
        text = (await client.get("/metrics")).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

        def lookups(cache: str, result: str) -> float:
            key = ("cursor_byok_server_cache_lookups_total", (("cache", cache), ("result", result)))
            return samples.get(key, 0.0)

        assert lookups("client_blobs", "hit") >= 2
        assert lookups("committed_states", "hit") >= 1

    # both turns' model calls carried the rules from the blob
    bodies = [json.loads(r.body) for r in list(upstream.requests)]
    mine = [b for b in bodies if marker in content_text(b["messages"][-1]["content"])]
    assert len(mine) == 2
    for body in mine:
        assert f"Always mention {marker}." in body["messages"][0]["content"]
