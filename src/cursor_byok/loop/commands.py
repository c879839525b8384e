"""What the runtime must do next. Plain data: no closures, connections or callables.

Every way a run ends is a command (`Final`, `Failed`, `Canceled`): the runtime executes it and
never looks at the conversation's status to decide how to end.
"""

from __future__ import annotations

import enum
from typing import TypeAlias

import msgspec

from cursor_byok.llm.types import AssistantMessage, RequestMessages, ToolCall

from .categories import PromptChars
from .inputs import ToolOperation
from .limits import Limit


class _Command(msgspec.Struct, frozen=True, tag_field="command", omit_defaults=True):
    pass


class ContinueLLM(_Command, frozen=True, tag="continue_llm"):
    """Keep reading the current LLM stream."""


class CallLLM(_Command, frozen=True, tag="call_llm"):
    """Open a stream for `request`. A retry reuses the same call_id and exact request.

    `model`: the model to send it to, "" for the run's own; a fallback names another model and
    `fallback_of` the call that failed before its output (a new call: its own id, request
    bytes and record)."""

    call_id: str
    request: RequestMessages
    messages_hash: str
    catalogue_version: int = 0  # the tool catalogue the request's tools come from
    # The request's characters per context-meter category (meter.py), recorded with the call.
    prompt: PromptChars = PromptChars()
    model: str = ""
    fallback_of: str = ""
    # The reasoning effort the IDE's picker chose for this call ("": the model's own setting);
    # only for the run's own model (loop/effort.py).
    effort: str = ""
    # The window the call's meter shows (window.shown: the one the loop decided by); 0: the
    # model's configured one (a fallback model's call).
    window: int = 0
    # A bound on the answer below the model's own (0: the model's): an image's description.
    max_output_tokens: int = 0


class ResendLLM(_Command, frozen=True, tag="resend_llm"):
    """Stream call `call_id` again from the exact request stored for it (a turn resumed while
    that call was in flight). Nothing is rebuilt: the same bytes go out."""

    call_id: str
    messages_hash: str
    model: str = ""  # as in the CallLLM that made the call: "" for the run's own model


class Summarize(_Command, frozen=True, tag="summarize"):
    """Make a compaction's summary call `call_id` with `request` (our prompt and the transcript
    to summarize), on the user's model or its configured compaction_model, then feed back one
    SummaryDone or SummaryFailed for it. Its record goes in the same commit as this command; a
    resumed run gets the same command again (the request is the same, the call is sent again
    from its stored bytes). `max_output_tokens`: the summary's answer bound, so that it fits
    the main model's window (0: the summarizing model's own bound)."""

    call_id: str
    request: RequestMessages
    messages_hash: str
    max_output_tokens: int = 0


class CallClient(_Command, frozen=True, tag="call_client"):
    """Run `tool_call` on the client, then feed back one ToolResult for its id.

    `llm_call_id` and `content_index` locate the call in the assistant message that made it
    (the client's tool card is keyed by them)."""

    operation_id: str
    tool_call: ToolCall
    llm_call_id: str = ""
    content_index: int = 0
    # What the runtime does around the call (loop/subagents.py decides): `spawns`, a child run
    # is expected for it (Task); `to_parent`, its card is shown in the parent's Task card too.
    spawns: bool = False
    to_parent: bool = False


class FindHelper(_Command, frozen=True, tag="find_helper"):
    """A Task call sent before a restart waits on its answer, which was lost with the stream:
    look for the end of the helper it started, in what the store holds, and answer with one
    HelperFound (its report, or none by the deadline). The turn waits meanwhile.
    `operations`: the store's records of the turn's operations, which HelperFound carries back
    (the turn's other calls are resumed by them then)."""

    operation_id: str
    tool_call: ToolCall
    operations: tuple[ToolOperation, ...] = ()


class CallClients(_Command, frozen=True, tag="call_clients"):
    """Run every one of `calls` on the client at once (the tool calls of one response, as
    Cursor sends them): each answers with its own ToolResult, in any order."""

    calls: tuple[CallClient, ...]


class ReadDefinitions(_Command, frozen=True, tag="read_definitions"):
    """Read each of `paths` (MCP tool definition files, loop/definitions.py) through the client
    at once, before the turn's first model call, and feed back one DefinitionsRead with what
    each read gave (a file not answered within the client's deadline is a failed read)."""

    paths: tuple[str, ...]


class WaitInput(_Command, frozen=True, tag="wait_input"):
    """Nothing to do until the next external input."""


class Final(_Command, frozen=True, tag="final"):
    """The turn ended with the model's answer. `replay`: it had ended before (a resumed run
    that finds it done); deliver the answer again without calling the model."""

    message: AssistantMessage
    replay: bool = False


class FailureKind(enum.StrEnum):
    """Why a turn failed, which decides how the client is told."""

    PROVIDER = "provider"  # the model call failed or gave an unusable answer; retryable
    BAD_REQUEST = "bad_request"  # the request cannot be served as sent
    INTERNAL = "internal"  # this server's own failure
    REFUSED = "refused"  # a person token's limit refused a model call (`Failed.limit`)


class Failed(_Command, frozen=True, tag="failed"):
    """The turn failed. `message` describes the failure; it is not part of the history.
    `limit`: for `REFUSED`, the token's limit that refused the call."""

    message: AssistantMessage
    kind: FailureKind = FailureKind.PROVIDER
    limit: Limit | None = None


class Canceled(_Command, frozen=True, tag="canceled"):
    reason: str


Command: TypeAlias = (
    ContinueLLM
    | CallClients
    | CallLLM
    | ResendLLM
    | Summarize
    | CallClient
    | FindHelper
    | ReadDefinitions
    | WaitInput
    | Final
    | Failed
    | Canceled
)

CONTINUE_LLM = ContinueLLM()
WAIT_INPUT = WaitInput()
