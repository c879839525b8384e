"""A follow-up turn of a conversation the server already has is answered from its own store,
without fetching history blobs from the client; when the client's checkpoint is behind ours (the
user rewound), the client wins (docs/store.md "Rewind").

Checkpoints: at the end of each turn the server stores one blob per completed turn on the client
(kv set_blob_args, answered with an empty SetBlobResult) and then publishes a
`conversation_checkpoint_update` whose `turns` lists them. A run_request whose
conversation_state.turns is a strict prefix of the latest checkpoint's turns was rewound to the
last of those turns: the server truncates its history to the end of that turn and answers from
there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cursor_byok.llm.types import AssistantMessage, UserMessage
from cursor_byok.loop import ConversationState, Span
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.transport.runtime import records
from tests.e2e.test_crash_recovery import (
    ScriptedClient,
    ShimRun,
    chat_messages,
    complete_turn,
    db_messages,
    db_reader,
    decoded,
    requests_with,
)
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with ThreadedUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("followup")
    with server_process(brain_config(upstream.base_url, db=work / "byok.db"), work) as srv:
        yield srv


def db_path(server: ServerProcess) -> Path:
    return server.log_path.parent / "byok.db"


def run_request(
    conversation_id: str, text: str, state: a.ConversationStateStructure | None = None
) -> a.AgentClientMessage:
    req = a.AgentRunRequest(conversation_id=conversation_id)
    req.requested_model.model_id = "brain-1"
    req.action.user_message_action.user_message.text = text
    if state is not None:
        req.conversation_state.CopyFrom(state)
    return a.AgentClientMessage(run_request=req)


def root_prompt_blob(message: dict[str, str]) -> tuple[bytes, bytes]:
    data = json.dumps(message).encode()
    return hashlib.sha256(data).digest(), data


def latest_checkpoint(run: ShimRun) -> a.ConversationStateStructure:
    """The run's last checkpoint; every turn blob it lists is held by the client, and the blob
    of the turn just completed was set during this run, before the checkpoint."""
    assert run.checkpoints, "no conversation_checkpoint_update at the end of the turn: " + (
        run.describe()
    )
    index, checkpoint = run.checkpoints[-1]
    for blob_id in checkpoint.turns:
        assert bytes(blob_id) in run.client.blobs, "a checkpoint lists a blob the client lacks"
    set_here = {blob_id: i for i, blob_id in run.set_blobs}
    newest = bytes(checkpoint.turns[-1])
    assert newest in set_here and set_here[newest] < index, run.describe()
    return checkpoint


def conversation(messages: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(m["role"], m.get("content")) for m in messages]


async def test_followup_turn_is_answered_from_the_store(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    conv = "conv-followup"
    client = ScriptedClient()
    run1 = await complete_turn(server.url, "fu-1", run_request(conv, "first question"), client)
    assert run1.text == "You said: first question"

    # What a real client sends with turn 2: its checkpoint, including the root prompt messages
    # as blob ids. It has the blobs, but the server must not need them.
    user_id, user_blob = root_prompt_blob({"role": "user", "content": "first question"})
    asst_id, asst_blob = root_prompt_blob(
        {"role": "assistant", "content": "You said: first question"}
    )
    client.blobs.update({user_id: user_blob, asst_id: asst_blob})
    state = a.ConversationStateStructure()
    if run1.checkpoints:
        state.CopyFrom(run1.checkpoints[-1][1])
    state.root_prompt_messages_json.extend([user_id, asst_id])
    run2 = await complete_turn(
        server.url, "fu-2", run_request(conv, "second question", state), client
    )
    assert run2.text == "You said: second question"
    assert run2.blob_requests == [], "the server fetched history blobs it already has"
    assert not [k for k in run2.kinds if k == "kv.get_blob_args"], run2.describe()

    sent = requests_with(upstream, "second question")
    assert len(sent) == 1
    assert conversation(chat_messages(sent[0])) == [
        ("user", "first question"),
        ("assistant", "You said: first question"),
        ("user", "second question"),
    ]
    assert len(db_messages(db_path(server), conv)) == 4


async def test_client_checkpoint_behind_ours_means_rewind_and_the_client_wins(
    server: ServerProcess, upstream: FakeUpstream
) -> None:
    conv = "conv-rewind"
    client = ScriptedClient()
    checkpoints: list[a.ConversationStateStructure] = []
    state: a.ConversationStateStructure | None = None
    for n, text in enumerate(["turn one", "turn two", "turn three"], start=1):
        run = await complete_turn(server.url, f"rw-{n}", run_request(conv, text, state), client)
        assert run.text == f"You said: {text}"
        state = latest_checkpoint(run)
        assert len(state.turns) == n, list(state.turns)
        if checkpoints:
            # turns already published keep their blob id: an earlier checkpoint is a prefix
            assert list(state.turns[: n - 1]) == list(checkpoints[-1].turns)
        checkpoints.append(state)
    assert len(db_messages(db_path(server), conv)) == 6

    # The user rewinds to the end of turn one and types a new message there.
    run4 = await complete_turn(
        server.url, "rw-4", run_request(conv, "turn four", checkpoints[0]), client
    )
    assert run4.text == "You said: turn four"
    sent = requests_with(upstream, "turn four")
    assert len(sent) == 1
    assert conversation(chat_messages(sent[0])) == [
        ("user", "turn one"),
        ("assistant", "You said: turn one"),
        ("user", "turn four"),
    ]

    # Nothing is deleted: the log keeps the abandoned turns, and the conversation's active
    # history is the view the rewind made: turn one, then what came after the rewind.
    messages = decoded(db_messages(db_path(server), conv))
    assert [m.text for m in messages] == [
        "turn one",
        "You said: turn one",
        "turn two",
        "You said: turn two",
        "turn three",
        "You said: turn three",
        "turn four",
        "You said: turn four",
    ]
    state = stored_state(db_path(server), conv)
    assert state.view == (Span(0, 2), Span(6))
    assert [type(m) for m in state.messages] == [UserMessage, AssistantMessage] * 2
    assert [m.text for m in state.messages] == [
        "turn one",
        "You said: turn one",
        "turn four",
        "You said: turn four",
    ]
    with db_reader(db_path(server)) as conn:
        rewinds = conn.execute(
            "SELECT keep, previous_count FROM message_rewinds WHERE conversation_id = ?", (conv,)
        ).fetchall()
    assert rewinds == []  # rewinds no longer delete rows, so none is recorded as one

    # The checkpoint after the rewound turn continues from turn one.
    after = latest_checkpoint(run4)
    assert len(after.turns) == 2 and list(after.turns[:1]) == list(checkpoints[0].turns)

    # A client that is not behind (its latest checkpoint) continues normally: no rewind.
    run5 = await complete_turn(server.url, "rw-5", run_request(conv, "turn five", after), client)
    assert run5.text == "You said: turn five"
    assert conversation(chat_messages(requests_with(upstream, "turn five")[0]))[:4] == [
        ("user", "turn one"),
        ("assistant", "You said: turn one"),
        ("user", "turn four"),
        ("assistant", "You said: turn four"),
    ]
    assert len(db_messages(db_path(server), conv)) == 10
    assert [m.text for m in stored_state(db_path(server), conv).messages][4:] == [
        "turn five",
        "You said: turn five",
    ]


def stored_state(db: Path, conversation_id: str) -> ConversationState:
    """The conversation's committed state as the server stored it, history included."""
    with db_reader(db) as conn:
        (state,) = conn.execute(
            "SELECT state FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
    return records.decode_state(state, tuple(db_messages(db, conversation_id)))
