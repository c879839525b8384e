"""The Cursor dialect: `agent.v1` / `aiserver.v1` protobuf ↔ native values.

The only package that imports protobuf (an import contract checks it). It decodes client
messages into native values and encodes native values into serialized server messages; it holds
the client-request correlation of a run (`ClientLink`: exec, KV and interaction ids, the tool
machines), context and history decoding, checkpoints, the unary RPCs and the Connect service
description. It decides nothing: docs/dialect.md has the tables.

What the runtime uses:

    values     RunRequest, RunAction, ContextRef, HistoryRefs and the `Inbound` union a client
               message becomes (RunRequested, CancelRequested, FollowUp, ...)
    link       ClientLink (receive, get_blob, set_blob, request_context, start_tool, ...)
    encode     StreamEncoder, turn_ended, text_delta, checkpoint
    ends       Ending and the four ways a run ends badly
    context    ClientContext, ContextPart, merge_context; context_parts: decode_request_context_part
    history    history_from_root_prompt_blobs, DialectError
    checkpoint turn_blob, rewound_to
    service    CursorService (for the Connect app); rpc: RpcSettings, agent_title
    children   ChildRun, recognise_child (a subagent's run and its parent's ids)
    tools      ToolStarted, sanitize_tool_call_id, task_progress_frame, report_text

The runtime imports only this face, never `tools.*` (an import contract checks it).
"""

from .checkpoint import read_turn_blob, rewound_to, turn_blob
from .children import ChildRun, recognise_child
from .context import ClientContext, ContextPart, PartKind, merge_context
from .context_parts import decode_request_context_part
from .encode import (
    HEARTBEAT,
    StreamEncoder,
    SummaryRecord,
    call_id_for,
    checkpoint,
    summary_completed,
    summary_started,
    summary_text,
    text_delta,
    turn_ended,
)
from .ends import (
    Ending,
    bad_request_end,
    canceled_end,
    internal_end,
    model_not_allowed_end,
    not_yours_end,
    over_budget_end,
    provider_error_end,
    rate_limited_end,
    token_revoked_end,
    unavailable_end,
    unimplemented_end,
)
from .history import DialectError, history_from_root_prompt_blobs
from .link import ClientLink
from .mcp import McpDefinition, McpDirectory
from .mcp_files import definition_file
from .rpc import RpcSettings, agent_title
from .service import CursorService
from .tools import Started as ToolStarted
from .tools import sanitize_tool_call_id
from .tools.cards import task_progress_frame
from .tools.subagents import report_text
from .values import (
    BackgroundCompletions,
    BackgroundTaskKind,
    BlobReceived,
    BlobStored,
    CancelRequested,
    CancelSubagent,
    ClientHeartbeat,
    ContextReceived,
    ContextRef,
    DefinitionRead,
    FollowUp,
    HistoryRefs,
    Inbound,
    InteractionAnswered,
    Malformed,
    ResumeRequested,
    RunAction,
    RunRequest,
    RunRequested,
    ShellCommandRun,
    Stray,
    ToolFinished,
    ToolProgress,
    UnknownAction,
    UnknownEvent,
)

__all__ = [
    "HEARTBEAT",
    "BackgroundCompletions",
    "BackgroundTaskKind",
    "BlobReceived",
    "BlobStored",
    "CancelRequested",
    "CancelSubagent",
    "ChildRun",
    "ClientContext",
    "ClientHeartbeat",
    "ClientLink",
    "ContextPart",
    "ContextReceived",
    "ContextRef",
    "CursorService",
    "DefinitionRead",
    "DialectError",
    "Ending",
    "FollowUp",
    "HistoryRefs",
    "Inbound",
    "InteractionAnswered",
    "Malformed",
    "McpDefinition",
    "McpDirectory",
    "PartKind",
    "ResumeRequested",
    "RpcSettings",
    "RunAction",
    "RunRequest",
    "RunRequested",
    "ShellCommandRun",
    "Stray",
    "StreamEncoder",
    "SummaryRecord",
    "ToolFinished",
    "ToolProgress",
    "ToolStarted",
    "UnknownAction",
    "UnknownEvent",
    "agent_title",
    "bad_request_end",
    "call_id_for",
    "canceled_end",
    "checkpoint",
    "decode_request_context_part",
    "definition_file",
    "history_from_root_prompt_blobs",
    "internal_end",
    "merge_context",
    "model_not_allowed_end",
    "not_yours_end",
    "over_budget_end",
    "provider_error_end",
    "rate_limited_end",
    "read_turn_blob",
    "recognise_child",
    "report_text",
    "rewound_to",
    "sanitize_tool_call_id",
    "summary_completed",
    "summary_started",
    "summary_text",
    "task_progress_frame",
    "text_delta",
    "token_revoked_end",
    "turn_blob",
    "turn_ended",
    "unavailable_end",
    "unimplemented_end",
]
