"""Issue 24 §6: a pasted image for a model without vision that has a `vision_model`, end to
end (the real server process, the scripted brain upstream, our client over the HTTP/1.1 shim
and HTTP/2 `Run`). The vision model receives the image; the main model's request holds only
the description, as text; the next turn's request extends the first byte for byte and nothing
is described again; a failed description falls back to the note; the describing call is
recorded, charged to the run's token and refused by its budget like any model call."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cursor_byok.store import open_store
from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from cursor_byok.transport.runtime.reservations import month_window
from tests.e2e.test_compaction import messages_bytes
from tests.e2e.test_modes_actions import TRANSPORTS, last_checkpoint, moded_request, open_run
from tests.e2e.test_shim import ShimRun, exec_of, http, read_ok, unique
from tests.e2e.test_tokens import add_token
from tests.support import connect_client as cc
from tests.support.images import PNG
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream

TEXT_MODEL = "brain-text"
# The vision model has a provider of its own (the same brain, under /eye): a call sent to the
# wrong one shows in its path.
EYE_PATH = "/eye/v1/chat/completions"
MODELS = f"""
[providers.eye]
api = "openai-chat"
base_url = "UPSTREAM/eye/v1"

[models."brain-eye"]
provider = "eye"
model = "brain-eye"
vision = true

[models."{TEXT_MODEL}"]
provider = "brain"
model = "brain-1"
vision_model = "brain-eye"
"""
B64 = base64.b64encode(PNG).decode()


def models(upstream: FakeUpstream) -> str:
    return MODELS.replace("UPSTREAM", upstream.base_url)


SEEN = f"BRAIN VISION saw 1 image(s): image/png ({len(B64)} base64 chars)."


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vision") / "byok.db"


@pytest.fixture(scope="module")
def server(upstream: FakeUpstream, db: Path) -> Iterator[ServerProcess]:
    with server_process(
        brain_config(upstream.base_url, db=db) + models(upstream), db.parent
    ) as srv:
        yield srv


def pasted(text: str, conversation_id: str | None = None, **kw: Any) -> Any:
    message = moded_request(text, "agent", conversation_id, **kw)
    message.run_request.requested_model.model_id = TEXT_MODEL
    um = message.run_request.action.user_message_action.user_message
    um.selected_context.selected_images.add(data=PNG, mime_type="image/png")
    return message


def upstream_bodies(upstream: FakeUpstream, model: str, marker: str) -> list[bytes]:
    """The chat requests to `model` (its upstream name) that hold `marker`, each sent to that
    model's provider."""
    needle = json.dumps(marker)[1:-1].encode()
    out = []
    for r in list(upstream.requests):
        chat = r.path.endswith("/chat/completions") and needle in r.body
        if (
            chat
            and json.loads(r.body)["model"] == model
            and (r.path == EYE_PATH) == (model == "brain-eye")
        ):
            out.append(r.body)
    return out


def notices(reader: Any) -> list[str]:
    return [
        m.interaction_update.text_delta.text
        for m in reader.messages
        if m.interaction_update.text_delta.is_server_notice
    ]


def calls_of(db: Path, conversation_id: str) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT call_id, model, status FROM llm_calls WHERE conversation_id = ? "
            "ORDER BY created_at_ms, call_id",
            (conversation_id,),
        ).fetchall()
    return [tuple(r) for r in rows]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_vision_model_describes_the_image_and_the_model_reads_only_text(
    server: ServerProcess, upstream: FakeUpstream, db: Path, transport: str
) -> None:
    cid = str(uuid.uuid4())
    text = unique("what does this screenshot show?")
    async with open_run(server, transport) as (send, reader):
        await send(pasted(text, cid))
        assert await reader.wait_end() == {}
    # The vision model got the image itself, with the user's text as context.
    (seen,) = upstream_bodies(upstream, "brain-eye", text)
    content = json.loads(seen)["messages"][-1]["content"]
    assert [p["image_url"]["url"] for p in content if p["type"] == "image_url"] == [
        f"data:image/png;base64,{B64}"
    ]
    # The main model's request holds the description as text, and no image at all.
    (first,) = upstream_bodies(upstream, "brain-1", text)
    assert b"image_url" not in first and B64.encode() not in first
    users = [m for m in json.loads(first)["messages"] if m["role"] == "user"]
    said = json.dumps(users[-1]["content"])
    assert SEEN in said and "described it for you" in said and text in said
    assert notices(reader) == [
        "This model reads text only, so brain-eye described the image you attached and the "
        "model read that description."
    ]
    assert "You said:" in "".join(reader.texts)
    state = last_checkpoint(reader)

    # The next turn extends the first request byte for byte; nothing is described again.
    later = unique("and the second line?")
    async with open_run(server, transport) as (send, reader):
        follow = moded_request(later, "agent", cid, state=state)
        follow.run_request.requested_model.model_id = TEXT_MODEL
        await send(follow)
        assert await reader.wait_end() == {}
    (second,) = upstream_bodies(upstream, "brain-1", later)
    assert messages_bytes(second).startswith(messages_bytes(first)[:-1])
    assert len(upstream_bodies(upstream, "brain-eye", text)) == 1
    calls = calls_of(db, cid)
    assert calls == [
        (f"{cid}:1:vision1", "brain-eye", "committed"),
        (f"{cid}:1:llm2", "brain-1", "committed"),  # the upstream names
        (f"{cid}:2:llm1", "brain-1", "committed"),
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_failed_description_falls_back_to_the_note(
    server: ServerProcess, upstream: FakeUpstream, db: Path, transport: str
) -> None:
    cid = str(uuid.uuid4())
    text = unique("[vision-fail] what is this?")
    async with open_run(server, transport) as (send, reader):
        await send(pasted(text, cid))
        assert await reader.wait_end() == {}
    assert len(upstream_bodies(upstream, "brain-eye", text)) == 1  # tried once (a 400)
    (sent,) = upstream_bodies(upstream, "brain-1", text)
    assert b"image_url" not in sent and B64.encode() not in sent
    assert "You cannot see images, so it was not sent to you" in sent.decode()
    assert "BRAIN VISION" not in sent.decode()
    (notice,) = notices(reader)
    assert notice.startswith("This model reads text only, and brain-eye could not describe")
    assert "brain: this image cannot be read" in notice
    assert [c[2] for c in calls_of(db, cid)] == ["failed", "committed"]


async def test_available_models_says_a_model_with_a_vision_model_takes_images(
    server: ServerProcess,
) -> None:
    """Without supports_images the IDE drops a pasted image before it reaches us."""
    async with http(server) as client:
        available = await cc.unary(
            client,
            "/aiserver.v1.AiService/AvailableModels",
            aiserver_pb2.AvailableModelsRequest(),
            aiserver_pb2.AvailableModelsResponse,
        )
    images = {m.name: m.supports_images for m in available.models}
    assert images[TEXT_MODEL] is True and images["brain-eye"] is True
    assert images["brain-1"] is False


OPERATOR = "PLANTED-operator-token-vision"
# The describing call's bound: its own 2,048 output tokens at $500 a million, $1.02 (the
# vision model's whole window, 128,000 tokens, would be $64: more than either budget).
PRICED = """
[models."brain-eye".prices]
output = 500.0
"""


def priced_config(upstream: FakeUpstream, db: Path) -> str:
    text = brain_config(upstream.base_url, db=db, extra=f'auth_token = "{OPERATOR}"')
    return text + models(upstream) + PRICED


async def shim_turn(server: ServerProcess, token: str, message: Any) -> dict[str, Any]:
    async with http(server) as client:
        run = ShimRun(client, token=token)
        async with run.subscribe() as reader:
            await run.append(message)
            return await reader.wait_end(30)


async def test_the_describing_call_is_charged_to_the_token_and_its_budget_refuses_it(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    db = tmp_path / "byok.db"
    text = priced_config(upstream, db)
    config = tmp_path / "cursor-byok.toml"
    config.write_text(text)
    rich = await asyncio.to_thread(add_token, config, "ola", "--budget-usd", "5")
    poor = await asyncio.to_thread(add_token, config, "pia", "--budget-usd", "0.2")
    (tmp_path / "run").mkdir()
    with server_process(text, tmp_path / "run") as server:
        paid = unique("describe this for ola")
        assert await shim_turn(server, rich, pasted(paid)) == {}
        assert len(upstream_bodies(upstream, "brain-eye", paid)) == 1
        refused = unique("describe this for pia")
        end = await shim_turn(server, poor, pasted(refused))
        assert end["error"]["code"] == "resource_exhausted", end
        assert "monthly budget" in end["error"]["message"], end
        # Refused before anything went out: no describing call, no main call.
        assert upstream_bodies(upstream, "brain-eye", refused) == []
        assert upstream_bodies(upstream, "brain-1", refused) == []
        # The same token's text-only turn goes (the main model is free here).
        plain = unique("no picture")
        message = moded_request(plain, "agent")
        message.run_request.requested_model.model_id = TEXT_MODEL
        assert await shim_turn(server, poor, message) == {}
    store = await open_store(str(db))
    try:
        usage = await store.token_usage(*month_window(int(time.time() * 1000))[:2])
    finally:
        await store.close()
    spent = {u.llm_calls: u.cost_usd for u in usage}
    # ola: the describing call (priced) and the turn's call; pia: the text-only turn's call.
    completion = max(1, len(SEEN) // 4)
    assert spent == {2: pytest.approx(completion * 500.0 / 1_000_000), 1: 0.0}, usage


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_image_pasted_for_a_vision_model_is_a_note_for_a_later_text_only_one(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """The history keeps the image; switching the chat to a model without vision sends that
    message with a note in place of the image, never an image_url."""
    cid = str(uuid.uuid4())
    text = unique("look at this")
    first = pasted(text, cid)
    first.run_request.requested_model.model_id = "brain-eye"
    async with open_run(server, transport) as (send, reader):
        await send(first)
        assert await reader.wait_end() == {}
    (seen,) = upstream_bodies(upstream, "brain-eye", text)
    assert B64.encode() in seen  # the vision model read the image itself
    state = last_checkpoint(reader)
    later = unique("now without eyes")
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(later, "agent", cid, state=state))
        assert await reader.wait_end() == {}
    (blind,) = upstream_bodies(upstream, "brain-1", later)
    assert b"image_url" not in blind and B64.encode() not in blind
    assert "You cannot see images, so it was not sent to you" in blind.decode()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_image_sent_while_a_tool_runs_is_described_before_the_next_call(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """Steering: a follow-up with an image on the running stream waits for the Read's result,
    has its own describing call, then joins before the model's next call, as text."""
    path = f"/ws/{uuid.uuid4().hex[:6]}.txt"
    prompt = unique(f'[tool Read {{"path": "{path}"}}]')
    steer = unique("and here is the screen")
    first = moded_request(prompt, "agent")
    first.run_request.requested_model.model_id = TEXT_MODEL
    async with open_run(server, transport) as (send, reader):
        await send(first)
        read = await reader.wait_for(exec_of("read_args"))
        follow = agent_pb2.AgentClientMessage()
        um = follow.conversation_action.user_message_action.user_message
        um.text = steer
        um.selected_context.selected_images.add(data=PNG, mime_type="image/png")
        await send(follow)
        await asyncio.sleep(0.3)  # the follow-up is queued before the result arrives
        await send(read_ok(read.exec_server_message.id, path, "hello\n"))
        assert await reader.wait_end() == {}
    (seen,) = upstream_bodies(upstream, "brain-eye", steer)
    assert B64.encode() in seen
    (after,) = upstream_bodies(upstream, "brain-1", steer)
    assert b"image_url" not in after and B64.encode() not in after
    messages = json.loads(after)["messages"]
    tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    steer_at = next(i for i, m in enumerate(messages) if steer in json.dumps(m))
    assert steer_at > tool_at and SEEN in json.dumps(messages[steer_at])
