"""Whether a run is a helper's (a Task child), in one place (reference §3.5 item 2, §7 q. 5).

The child-run shape is partly [U]: on the HTTP/1.1 shim the child's requests carry
`x-parent-request-id` + `x-parent-agent-tool-call-id` (both or neither) and, for nested
children, `x-root-parent-request-id` [S]; on either transport the run request carries
`subagent_type_name` (11) [S]. `recognise_child` reads both and logs, once per child run, every
other field the request set that we do not use, so that one capture from a live IDE settles the
shape (docs/subagents.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from .proto import agent_pb2

__all__ = ["ChildRun", "ChildSignals", "child_signals", "recognise_child", "subagent_state"]

# ConversationStateStructure fields of the IDE's helpers (reference §3.5 item 8) that the
# server does not write: the checkpoints it publishes carry them back as the client sent them.
_CARRIED_MAPS = ("subagent_states", "subagent_threads", "subagent_runs_by_parent_tool_call_id")
_CARRIED_SCALARS = ("communicate_update_final_summary", "communicate_update_completed_subtitle")


def subagent_state(state: agent_pb2.ConversationStateStructure) -> bytes:
    """The client's helper fields of its checkpoint, serialized (b"" when it has none). Runs
    without helpers (nearly all) build nothing: a length test per field, no message."""
    if not any(len(getattr(state, name)) for name in _CARRIED_MAPS) and not any(
        state.HasField(name) for name in _CARRIED_SCALARS
    ):
        return b""
    out = agent_pb2.ConversationStateStructure()
    for name in _CARRIED_MAPS:
        getattr(out, name).MergeFrom(getattr(state, name))
    for name in _CARRIED_SCALARS:
        if state.HasField(name):
            setattr(out, name, getattr(state, name))
    return bytes(out.SerializeToString(deterministic=True))


log = logging.getLogger("cursor_byok.dialect")

# Run-request fields that may describe a child run and that we read nowhere ([U] or unused).
_UNUSED_SCALARS = (
    "exclude_workspace_context",
    "harness",
    "conversation_group_id",
    "dev_raw_model_slug",
    "agent_session_id",
    "can_create_cloud_subagents",
)
_UNUSED_LISTS = ("selected_subagent_model_details", "pre_fetched_blobs")
PARENT_HEADER = "x-parent-request-id"
PARENT_TOOL_CALL_HEADER = "x-parent-agent-tool-call-id"
ROOT_HEADER = "x-root-parent-request-id"


@dataclass(frozen=True, slots=True)
class ChildSignals:
    """What a run request's body says that may mark a child run."""

    subagent_type_name: str = ""
    unused: tuple[str, ...] = ()  # the names of the fields above that the request set


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A helper's run: its type and, when the client said, its parent's request and call."""

    subagent_type: str
    parent_request_id: str = ""
    parent_tool_call_id: str = ""
    root_parent_request_id: str = ""


def child_signals(req: agent_pb2.AgentRunRequest) -> ChildSignals:
    name = req.subagent_type_name if req.HasField("subagent_type_name") else ""
    unused = [f for f in _UNUSED_SCALARS if req.HasField(f)]
    unused.extend(f for f in _UNUSED_LISTS if len(getattr(req, f)))
    return ChildSignals(subagent_type_name=name, unused=tuple(unused))


def recognise_child(
    signals: ChildSignals, headers: Mapping[str, str], request_id: str = ""
) -> ChildRun | None:
    """The child run this is, or None. Either sign is enough: a `subagent_type_name`, or the
    parent headers (both of them; one alone is logged and ignored)."""
    parent = headers.get(PARENT_HEADER, "")
    call = headers.get(PARENT_TOOL_CALL_HEADER, "")
    root = headers.get(ROOT_HEADER, "")
    if bool(parent) != bool(call):
        log.warning(
            "run %s: only one of %s and %s came; not read as a child run's parent",
            request_id,
            PARENT_HEADER,
            PARENT_TOOL_CALL_HEADER,
        )
        parent = call = ""
    if not signals.subagent_type_name and not parent:
        return None
    log.info(
        "run %s is a child run: subagent_type_name=%r parent request=%r tool call=%r root=%r; "
        "set but not used: %s",
        request_id,
        signals.subagent_type_name,
        parent,
        call,
        root,
        ", ".join(signals.unused) or "nothing",
    )
    return ChildRun(
        subagent_type=signals.subagent_type_name,
        parent_request_id=parent,
        parent_tool_call_id=call,
        root_parent_request_id=root,
    )
