"""Issue 24 §6: what the model reads of the actions that are not typed messages, end to end
(the real server process, the scripted brain upstream, our client over the HTTP/1.1 shim and
HTTP/2 `Run`): notifications and injected context reach the model, as a run's opening action
and on a run already going; an action newer than our schema is an empty turn, logged once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok.transport.cursor.proto import agent_pb2
from tests.e2e.test_modes_actions import (
    TRANSPORTS,
    _action_request,
    execs,
    last_checkpoint,
    moded_request,
    open_run,
)
from tests.e2e.test_shim import chat_requests, exec_of, read_ok, request_context, unique
from tests.support.live import ServerProcess, brain_config, server_process
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work: Path = tmp_path_factory.mktemp("payloads")
    text = brain_config(upstream.base_url, db=work / "byok.db")
    text += '\n[models."brain-vision"]\nprovider = "brain"\nmodel = "brain-1"\nvision = true\n'
    with server_process(text, work) as srv:
        yield srv


def _last_user(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    users = [m for m in messages if m["role"] == "user"]
    return json.dumps(users[-1]["content"])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_subscription_notification_is_a_turn_the_model_reads(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    note = unique("CI on main failed")

    def fill(a: agent_pb2.ConversationAction) -> None:
        a.subscription_notification_action.notifications.add().text = note
        a.subscription_notification_action.request_context.CopyFrom(request_context())

    async with open_run(server, transport) as (send, reader):
        await send(_action_request(fill, str(uuid.uuid4())))
        assert await reader.wait_end() == {}
    (body,) = chat_requests(upstream, note)
    assert "subscriptions sent 1 notification" in _last_user(body)
    assert any(note in t for t in reader.texts) or "".join(reader.texts)


@pytest.mark.parametrize("payload", ["user", "system"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_injection_as_a_runs_action_reaches_the_model(
    server: ServerProcess, upstream: FakeUpstream, transport: str, payload: str
) -> None:
    text = unique("also check the README")

    def fill(a: agent_pb2.ConversationAction) -> None:
        ica = a.inject_context_action
        ica.injection_id = "inj-1"
        if payload == "user":
            ica.user_context.user_message.text = text
            ica.user_context.request_context.CopyFrom(request_context())
        else:
            a.request_context_parts.dynamic_context.CopyFrom(request_context())
            ica.system_context.producer = "ci-bot"
            ica.system_context.content = text

    async with open_run(server, transport) as (send, reader):
        await send(_action_request(fill, str(uuid.uuid4())))
        assert await reader.wait_end() == {}
    (body,) = chat_requests(upstream, text)
    if payload == "system":
        assert "Context injected by ci-bot" in _last_user(body)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_injection_on_a_running_stream_joins_the_turn_and_is_answered(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """Sent while a Read waits for the client: the server answers `delivered` for that
    injection id, and the model call after the Read's result holds the injected text."""
    path = f"/ws/{uuid.uuid4().hex[:6]}.txt"
    prompt = unique(f'[tool Read {{"path": "{path}"}}]')
    steer = unique("use British spelling")
    async with open_run(server, transport) as (send, reader):
        await send(moded_request(prompt, "agent"))
        read = await reader.wait_for(exec_of("read_args"))
        inject = agent_pb2.AgentClientMessage()
        ica = inject.conversation_action.inject_context_action
        ica.injection_id = "inj-live"
        ica.expected_run_id = "whatever"
        ica.user_context.user_message.text = steer
        await send(inject)
        ack = await reader.wait_for(
            lambda m: m.interaction_update.WhichOneof("message") == "context_injection_state"
        )
        await send(read_ok(read.exec_server_message.id, path, "hello\n"))
        assert await reader.wait_end() == {}
    state = ack.interaction_update.context_injection_state
    assert state.injection_id == "inj-live" and state.state.WhichOneof("state") == "delivered"
    after = [json.loads(r.body) for r in upstream.requests if steer in r.body.decode()]
    assert after, "no model call carried the injected text"
    messages = after[0]["messages"]
    tool_at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    steer_at = next(i for i, m in enumerate(messages) if steer in json.dumps(m))
    assert steer_at > tool_at  # after the Read's result, before the model's next answer
    assert execs(reader) == ["exec_server_message.read_args"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_unknown_action_is_logged_once(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    def future(a: agent_pb2.ConversationAction) -> None:
        a.MergeFromString(bytes([0xBA, 0x01, 0x00]))  # field 23, empty

    before = len(upstream.requests)
    for _ in range(2):
        async with open_run(server, transport) as (send, reader):
            await send(_action_request(future, str(uuid.uuid4())))
            assert await reader.wait_end() == {} and reader.turn_ended
        assert reader.texts == []
    assert len(upstream.requests) == before
    lines = [line for line in server.log().splitlines() if "does not know (field 23" in line]
    assert len(lines) == 1, lines


async def test_a_notification_recorded_turn_is_in_the_next_request(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    """The notification's turn is history: the next message's model call still holds it."""
    cid = str(uuid.uuid4())
    note = unique("deploy finished")

    def fill(a: agent_pb2.ConversationAction) -> None:
        a.subscription_notification_action.notifications.add().text = note
        a.subscription_notification_action.request_context.CopyFrom(request_context())

    async with open_run(server, "h2") as (send, reader):
        await send(_action_request(fill, cid))
        assert await reader.wait_end() == {}
    state = last_checkpoint(reader)
    later = unique("and now?")
    async with open_run(server, "h2") as (send, reader):
        await send(moded_request(later, "agent", cid, state=state))
        assert await reader.wait_end() == {}
    (body,) = chat_requests(upstream, later)
    assert note in json.dumps(body["messages"])


PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_pasted_image_never_reaches_a_text_only_model_silently(
    server: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    """brain-1 has no `vision`: the model reads a note instead of an image_url, and the user
    gets a server notice; brain-vision gets the image itself."""
    for model, sees in (("brain-1", False), ("brain-vision", True)):
        text = unique(f"what is in this picture ({model})?")
        message = moded_request(text, "agent")
        message.run_request.requested_model.model_id = model
        um = message.run_request.action.user_message_action.user_message
        um.selected_context.selected_images.add(data=PNG, mime_type="image/png")
        async with open_run(server, transport) as (send, reader):
            await send(message)
            assert await reader.wait_end() == {}
        (body,) = chat_requests(upstream, text)
        sent = json.dumps(body["messages"])
        notices = [
            m.interaction_update.text_delta.text
            for m in reader.messages
            if m.interaction_update.text_delta.is_server_notice
        ]
        if sees:
            assert "image_url" in sent and notices == []
        else:
            assert "image_url" not in sent and "You cannot see images" in sent
            assert len(notices) == 1 and "reads text only" in notices[0]
