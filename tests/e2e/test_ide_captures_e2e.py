"""Real Cursor IDE run_request captures (tests/fixtures/cursor/*.jsonl), replayed byte for
byte as BidiAppend #0 over the shim against the REAL server process and runner.

(a) With the default brain config (grok-4.6 is not configured): the run ends with an error
    naming the configured models.
(b) With a "grok-4.6" model on the brain provider: the server fetches the client's history
    (root_prompt_messages_json) and the request_context_parts blobs with get_blob_args, our
    client answers each one, and the turn completes with the brain's text and turn_ended.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.e2e.test_shim import ShimRun, content_text, http
from tests.paths import CURSOR_FIXTURES
from tests.support import connect_client as cc
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

FIXTURES = CURSOR_FIXTURES
CAPTURES = sorted(p.stem.removeprefix("ide-run-request-") for p in FIXTURES.glob("*.jsonl"))
CAPTURE_WORKSPACE = "/Users/leokun/Documents/cursor-byok"
RULE_MARKER = "RULE-E2E-MARKER: answer in plain words"


@dataclass(frozen=True)
class Capture:
    name: str
    hex_data: str
    request_id: str
    message: agent_pb2.AgentClientMessage

    @property
    def request(self) -> agent_pb2.AgentRunRequest:
        return self.message.run_request

    @property
    def text(self) -> str:
        return self.request.action.user_message_action.user_message.text

    def part_ids(self) -> dict[str, bytes]:
        parts = self.request.action.request_context_parts
        return {
            "rules": bytes(parts.rules_blob_id),
            "skills": bytes(parts.skills_blob_id),
            "subagents": bytes(parts.subagents_blob_id),
            "mcps": bytes(parts.mcps_blob_id),
        }

    def root_ids(self) -> list[bytes]:
        return [bytes(b) for b in self.request.conversation_state.root_prompt_messages_json]

    def last_turn_id(self) -> bytes:
        return bytes(self.request.conversation_state.turns[-1])


def load(name: str) -> Capture:
    line = (FIXTURES / f"ide-run-request-{name}.jsonl").read_text().strip()
    obj = json.loads(line)
    bidi = obj["bidi_append_request"]
    message = agent_pb2.AgentClientMessage.FromString(bytes.fromhex(bidi["data"]))
    return Capture(name, bidi["data"], bidi["request_id"]["request_id"], message)


def test_captures_present() -> None:
    assert CAPTURES == ["agent", "ask", "debug", "multitask", "plan"]


async def replay(run: ShimRun, capture: Capture) -> httpx.Response:
    """Append #0 carrying the capture's exact hex."""
    return await run.append(b"", seqno=0, hex_data=capture.hex_data)


# -- (a) the model is not configured --------------------------------------------------------


@pytest.mark.parametrize("name", CAPTURES)
async def test_unconfigured_model_names_the_offered_ones(
    name: str, server: ServerProcess, upstream: FakeUpstream
) -> None:
    capture = load(name)
    before = len(upstream.requests)
    async with http(server) as client:
        run = ShimRun(client)
        run.request_id = capture.request_id
        async with run.subscribe() as reader:
            await replay(run, capture)
            end = await reader.wait_end()
    error = end["error"]
    assert error["code"] == "invalid_argument", end
    assert "grok-4.6" in error["message"]
    assert "brain-1" in error["message"] and "composer-test" in error["message"]
    details = cc.decode_error_details(error)
    assert details.error == aiserver_pb2.ErrorDetails.ERROR_BAD_MODEL_NAME
    assert not reader.turn_ended and not reader.texts
    assert len(upstream.requests) == before  # the model was never called


# -- (b) grok-4.6 is served by the brain ---------------------------------------------------


def history_blobs(ids: list[bytes]) -> dict[bytes, bytes]:
    """Plausible client blobs for the first root-prompt ids (AI-SDK JSON messages); the rest
    stay unknown to our client (answered with an empty GetBlobResult, "not found")."""
    messages = [
        {"role": "system", "content": "You are a coding agent (client prompt, ignored)."},
        {"role": "user", "content": [{"type": "text", "text": "earlier question E2E-1"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "earlier answer E2E-1"}]},
        {"role": "user", "content": "earlier question E2E-2"},
        {"role": "assistant", "content": "earlier answer E2E-2"},
    ]
    return {bid: json.dumps(m).encode() for bid, m in zip(ids, messages, strict=False)}


def rules_blob() -> bytes:
    part = agent_pb2.RequestContextRulesPart()
    part.rules.add(full_path=f"{CAPTURE_WORKSPACE}/.cursor/rules/e2e.mdc", content=RULE_MARKER)
    return part.SerializeToString()


def mcps_blob() -> bytes:
    """An mcps part for the capture's mcps id (the captures hold no blob bytes)."""
    part = agent_pb2.RequestContextMcpsPart()
    tool = part.tools.add(
        name="capture_lookup", tool_name="capture_lookup", provider_identifier="kb"
    )
    tool.description = "Looks something up"
    tool.input_schema_json = '{"type": "object", "properties": {"q": {"type": "string"}}}'
    return part.SerializeToString()


@dataclass
class Outcome:
    end: dict[str, Any]
    kinds: list[str]
    texts: list[str]
    turn_ended: bool
    asked: list[bytes]
    bodies: list[dict[str, Any]]


async def grok_turn(server: ServerProcess, upstream: FakeUpstream, capture: Capture) -> Outcome:
    known = history_blobs(capture.root_ids())
    known[capture.part_ids()["rules"]] = rules_blob()
    known[capture.part_ids()["mcps"]] = mcps_blob()
    async with http(server) as client:
        run = ShimRun(client)
        run.request_id = capture.request_id
        run.get_blob = known.get  # None → an empty GetBlobResult ("not found")
        async with run.subscribe() as reader:
            await replay(run, capture)
            end = await reader.wait_end(30)
    bodies = [json.loads(r.body) for r in list(upstream.requests)]
    mine = [b for b in bodies if content_text(b["messages"][-1]["content"]).endswith(capture.text)]
    return Outcome(end, reader.kinds, reader.texts, reader.turn_ended, reader.get_blob_ids, mine)


@pytest.fixture(scope="module")
def grok_outcome(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Outcome]:
    """One run per capture on a fresh server whose config adds "grok-4.6" on the brain (an
    empty database: the captured conversation is unknown to it); shared by the tests below."""
    cache: dict[str, Outcome] = {}

    def get(name: str) -> Outcome:
        if name not in cache:
            work = tmp_path_factory.mktemp(f"grok-{name}")
            config = brain_config(upstream.base_url, db=work / "byok.db")
            config += '\n[models."grok-4.6"]\nprovider = "brain"\nmodel = "brain-1"\n'
            with server_process(config, work) as srv:
                cache[name] = asyncio.run(grok_turn(srv, upstream, load(name)))
        return cache[name]

    return get


@pytest.mark.parametrize("name", CAPTURES)
def test_configured_model_fetches_the_client_blobs(
    name: str, grok_outcome: Callable[[str], Outcome]
) -> None:
    capture = load(name)
    roots = capture.root_ids()
    parts = capture.part_ids()
    asked = grok_outcome(name).asked
    # the history blobs first (the conversation is new to this server), each once, in order,
    # in one round trip with the checkpoint's last turn blob (is it a fork of one of ours?
    # issue 24 §3: Cursor's own turn blobs are not, so the root prompt is the history)
    assert asked[: 1 + len(roots)] == [capture.last_turn_id(), *roots]
    # then the request_context_parts blobs, each once: exactly the capture's ids
    assert sorted(asked[1 + len(roots) :]) == sorted(parts.values())
    assert len(set(asked)) == len(asked)


@pytest.mark.parametrize("name", CAPTURES)
def test_configured_model_completes_the_turn(
    name: str, grok_outcome: Callable[[str], Outcome]
) -> None:
    capture = load(name)
    out = grok_outcome(name)
    assert out.end == {}, (out.end, out.kinds[-5:])
    assert out.turn_ended
    text = "".join(out.texts)
    assert text.startswith("You said: ") and text.endswith(capture.text), text[-200:]
    # what the model received
    assert out.bodies, "the model was never called"
    body = out.bodies[-1]
    assert body["model"] == "brain-1"
    messages = body["messages"]
    system = messages[0]
    assert system["role"] == "system"
    assert "darwin 25.5.0" in system["content"]
    assert CAPTURE_WORKSPACE in system["content"]
    assert RULE_MARKER in system["content"]
    # the mcps blob's tool is offered to the model (ref_only: in no other place)
    assert "capture_lookup" in [t["function"]["name"] for t in body["tools"]]
    assert "client prompt, ignored" not in json.dumps(messages)
    history = [(m["role"], content_text(m["content"])) for m in messages[1:-1]]
    assert history == [
        ("user", "earlier question E2E-1"),
        ("assistant", "earlier answer E2E-1"),
        ("user", "earlier question E2E-2"),
        ("assistant", "earlier answer E2E-2"),
    ]
    assert messages[-1]["role"] == "user" and capture.text in content_text(messages[-1]["content"])
    # Issue 24 §5: debug mode's session (RequestContext.debug_mode_config, only in the debug
    # capture) reaches the model: where its instrumentation sends events and reads them back.
    debug = (
        "/Users/leokun/Documents/cursor-byok/.cursor/debug-7d3028.log",
        "http://127.0.0.1:7578/ingest/cfb18c16-5f53-419c-8f4f-eeba675c8f89",
        "Debug session 7d3028",
    )
    for value in debug:
        assert (value in system["content"]) is (name == "debug"), (name, value)
    assert ("This conversation is in debug mode" in system["content"]) is (name == "debug")


def test_fixture_dir_is_in_the_repository() -> None:
    assert Path(FIXTURES).is_dir()
