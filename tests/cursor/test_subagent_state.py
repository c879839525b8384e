"""`children.subagent_state`: the client's helper fields, carried back as sent; nothing built
for a run without helpers (issue 28: it built and serialized a message for every run)."""

from __future__ import annotations

from unittest import mock

from cursor_byok.transport.cursor import children
from cursor_byok.transport.cursor.proto import agent_pb2 as a


def test_a_state_without_helper_fields_gives_empty_bytes_and_builds_nothing() -> None:
    state = a.ConversationStateStructure()
    state.root_prompt_messages_json.append(b"x")  # other fields do not count
    with mock.patch.object(children.agent_pb2, "ConversationStateStructure") as built:
        assert children.subagent_state(state) == b""
    built.assert_not_called()


def test_each_helper_field_alone_is_carried() -> None:
    with_map = a.ConversationStateStructure()
    with_map.subagent_states["agent-1"].subagent_type.explore.SetInParent()
    with_scalar = a.ConversationStateStructure(communicate_update_final_summary="done")
    for state in (with_map, with_scalar):
        carried = a.ConversationStateStructure.FromString(children.subagent_state(state))
        assert carried == state
