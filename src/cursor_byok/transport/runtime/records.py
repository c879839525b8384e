"""The bytes the runtime hands the store: a committed state, what an input's commit records, the
record of each model call and client operation, a turn mark's view. The store keeps them as
opaque bytes; this module is the one place that encodes and decodes them."""

from __future__ import annotations

import contextlib
import hashlib
import operator
from collections import OrderedDict
from typing import assert_never

import msgspec

from ...llm import canonical
from ...llm.models import Model, call_cost, encode_prices
from ...llm.stream import PreparedRequest, StreamProgress
from ...llm.types import ToolResultMessage, Usage
from ...loop import (
    CallClient,
    CallClients,
    CallEnd,
    CallLLM,
    CallOutcome,
    Canceled,
    Command,
    ContinueLLM,
    ConversationState,
    Failed,
    Final,
    FindHelper,
    ReadDefinitions,
    ResendLLM,
    Span,
    Summarize,
    TurnStart,
    WaitInput,
    side_effects,
)
from ...loop import view as views
from ...loop.memo import ByIdentity
from ...loop.meter import (
    CHARS_PER_TOKEN,
    Meter,
    PromptChars,
    estimate_tokens,
    measure,
    prompt_tokens,
)
from ...store.api import CallStatus, ClientOperationRecord, LLMCallRecord
from .request_hashes import RequestHashes

_state_encoder = msgspec.json.Encoder(order="deterministic")
_state_decoder = msgspec.json.Decoder(ConversationState)
_tool_call_encoder = msgspec.json.Encoder(order="deterministic")
_view_decoder = msgspec.msgpack.Decoder(tuple[Span, ...])


class CallMeter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A model call's context meter as its record keeps it (`prompt_breakdown`): the request's
    characters per category, and the meter (estimated, then scaled to the provider's usage)."""

    chars: PromptChars
    meter: Meter


_call_meter_decoder = msgspec.json.Decoder(CallMeter)


def encode_call_meter(chars: PromptChars, meter: Meter) -> bytes:
    return msgspec.json.encode(CallMeter(chars=chars, meter=meter))


def decode_call_meter(data: bytes) -> CallMeter:
    return _call_meter_decoder.decode(data)


# The planned record's meter, by the identity of its bytes: its call's end scales it to the
# provider's usage without decoding what was just encoded (issue 28).
_planned_meters: ByIdentity[bytes, CallMeter] = ByIdentity(decode_call_meter, max_entries=4096)


# The JSON of each conversation's last encoded turn marks (issue 28): a turn commits its state
# several times with the same marks, and a new turn appends one mark, so the marks are encoded
# once per turn (the new mark alone) and spliced into the state's JSON as they are. Kept per
# conversation, least recently used first; the marks held, so their ids stay theirs.
MARKS_MEMO_MAX = 256
_encoded_marks: OrderedDict[str, tuple[tuple[TurnStart, ...], bytes]] = OrderedDict()


def _encode_marks(marks: tuple[TurnStart, ...]) -> bytes:
    return _state_encoder.encode(marks)


def _marks_json(conversation_id: str, marks: tuple[TurnStart, ...]) -> bytes:
    """`marks` as the state's encoder writes them: the kept JSON when they are the very marks
    it was made from, extended by the new marks alone when they start with those very marks
    (an identity scan, in C), else encoded whole."""
    kept = _encoded_marks.get(conversation_id)
    if kept is not None and kept[0] is marks:
        data = kept[1]
    elif (
        kept is not None
        and 0 < len(kept[0]) < len(marks)
        and all(map(operator.is_, kept[0], marks))
    ):
        # "[a,b]" and "[c]" make "[a,b,c]": the encoding of a tuple is its items' joined
        data = b"%s,%s" % (kept[1][:-1], _encode_marks(marks[len(kept[0]) :])[1:])
    else:
        data = _encode_marks(marks)
    _encoded_marks[conversation_id] = (marks, data)
    with contextlib.suppress(KeyError):  # dropped meanwhile by another thread
        _encoded_marks.move_to_end(conversation_id)
    while len(_encoded_marks) > MARKS_MEMO_MAX:
        try:
            _encoded_marks.popitem(last=False)
        except KeyError:  # emptied meanwhile by another thread
            break
    return data


def encode_state(state: ConversationState) -> bytes:
    """The committed state without its messages (each is stored as a row of the log). Its
    turn marks are spliced in as the JSON kept for them (`_marks_json`): the same bytes."""
    marks = state.turn_starts
    if not marks:  # omitted, as the default
        return _state_encoder.encode(msgspec.structs.replace(state, messages=(), log=()))
    raw = msgspec.Raw(_marks_json(state.conversation_id, marks))
    return _state_encoder.encode(
        msgspec.structs.replace(state, messages=(), log=(), turn_starts=raw)
    )


def decode_state(state: bytes, rows: tuple[bytes, ...]) -> ConversationState:
    """The state `encode_state` stored, with its log rebuilt from the message rows and the
    active history from its view."""
    base = _state_decoder.decode(state)
    log = tuple(canonical.decode_message(m) for m in rows)
    return msgspec.structs.replace(base, log=log, messages=views.materialize(base.view, log))


def encode_view(view: tuple[Span, ...]) -> bytes:
    """A turn mark's view (closed spans), as the store keeps it."""
    return msgspec.msgpack.encode(view)


def decode_view(data: bytes, message_count: int) -> tuple[Span, ...]:
    """A turn mark's view; marks written before views existed have none: their turn ended with
    the first `message_count` messages of the log (rewinds used to delete rows)."""
    if not data:
        return (Span(0, message_count),)
    return _view_decoder.decode(data)


def command_record(command: Command) -> bytes:
    """What an input commit records as its result: the command, except that a model call is
    named by its call id and messages hash (its request is in its own call record already;
    repeating it in every input would be most of the bytes written before the call)."""
    match command:
        case ContinueLLM():
            return b""
        case CallLLM(call_id=call_id, messages_hash=messages_hash):
            return msgspec.json.encode(
                {"command": "call_llm", "call_id": call_id, "messages_hash": messages_hash}
            )
        case Summarize(call_id=call_id, messages_hash=messages_hash):
            return msgspec.json.encode(
                {"command": "summarize", "call_id": call_id, "messages_hash": messages_hash}
            )
        case (
            ResendLLM()
            | CallClient()
            | FindHelper()
            | ReadDefinitions()
            | CallClients()
            | WaitInput()
            | Final()
            | Failed()
            | Canceled()
        ):
            return msgspec.json.encode(command)
        case _:
            assert_never(command)


_request_hashes = RequestHashes()


def request_hash(prepared: PreparedRequest, conversation_id: str | None = None) -> str:
    """SHA-256 of the body; with `conversation_id`, continued over what the body shares with
    that conversation's previous request (request_hashes.py)."""
    if conversation_id is None:
        return hashlib.sha256(prepared.body).hexdigest()
    return _request_hashes.hexdigest(prepared.body, conversation_id)


def planned_call(
    command: CallLLM,
    *,
    conversation_id: str,
    turn_id: str,
    stored: bytes,
    prepared: PreparedRequest,
    model: Model,
    now_ms: int,
    process_id: str | None = None,
) -> LLMCallRecord:
    """The record of a model call, written in the commit that decides it, before it is sent;
    `process_id`: the process that sends it (its lease, transport/runtime/leases.py)."""
    return LLMCallRecord(
        call_id=command.call_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        request=stored,
        request_hash=request_hash(prepared, conversation_id),
        messages_hash=command.messages_hash,
        status="planned",
        created_at_ms=now_ms,
        provider=model.provider.name,
        model=prepared.model,
        api=model.provider.api,
        catalogue_version=command.catalogue_version or None,
        prompt_breakdown=_planned_breakdown(command.prompt, command.window or model.context_window),
        process_id=process_id,
        prices=encode_prices(model.prices),
    )


def _planned_breakdown(chars: PromptChars, window: int) -> bytes:
    meter = CallMeter(chars=chars, meter=measure(chars, used=0, window=window))
    encoded = msgspec.json.encode(meter)
    _planned_meters.keep(encoded, meter)
    return encoded


def finished_call(
    record: LLMCallRecord,
    end: CallEnd,
    *,
    usage: Usage,
    answer_bytes: bytes | None,
    ttft_ms: int | None,
    duration_ms: int | None,
    now_ms: int,
    estimated: str | None = None,
    prior: Prior | None = None,
) -> LLMCallRecord:
    """The record once the loop said how the call ended (`end`); its meter scaled to the
    provider's usage (kept as estimated when the provider measured nothing), its cost priced
    at the prices stored with it when it was planned (`call_cost`). `estimated`: which of
    `usage`'s counts are ours (`usage_so_far`); `prior`: earlier attempts of the call
    (`prior_usage`), whose usage and cost the record adds to this one's."""
    cost_usd = call_cost(record.prices, usage)
    status: CallStatus = end.outcome.value  # the outcome's values are the store's statuses
    breakdown = record.prompt_breakdown
    measured_input = estimated is None or "input" not in estimated
    if breakdown is not None and prompt_tokens(usage) > 0 and measured_input:
        planned = _planned_meters(breakdown)
        measured = measure(
            planned.chars, used=prompt_tokens(usage), window=planned.meter.max_tokens
        )
        breakdown = encode_call_meter(planned.chars, measured)
    if prior is not None and prior.usage != Usage():
        usage = usage + prior.usage
        if cost_usd is not None:
            cost_usd += prior.cost_usd
        estimated = merge_estimated(estimated, prior.estimated)
    return msgspec.structs.replace(
        record,
        status=status,
        prompt_breakdown=breakdown,
        assistant_hash=(
            hashlib.sha256(answer_bytes).hexdigest() if answer_bytes is not None else None
        ),
        input_tokens=usage.input,
        output_tokens=usage.output,
        cache_read_tokens=usage.cache_read,
        cache_write_tokens=usage.cache_write,
        reasoning_tokens=usage.reasoning,
        ttft_ms=ttft_ms,
        duration_ms=duration_ms,
        cost_usd=cost_usd,
        error=end.error,
        finished_at_ms=now_ms,
        estimated_tokens=estimated,
    )


def estimated_input(record: LLMCallRecord) -> int:
    """The request's tokens by our estimate (its characters, recorded with the planned call);
    0 for a record without them (made before 0006)."""
    if record.prompt_breakdown is None:
        return 0
    return estimate_tokens(decode_call_meter(record.prompt_breakdown).chars)


def usage_so_far(progress: StreamProgress, record: LLMCallRecord) -> tuple[Usage, str | None]:
    """The usage of a call that ended before its terminal event, and which counts are ours.

    Input: the provider's where it reported one before the end (Anthropic's message_start,
    Gemini's usageMetadata, a final usage chunk), else the request's estimate. Output: the
    provider's count, unless what streamed counts for more (most providers report it only at
    the end; Anthropic's message_start says 1): one token per delta event, or one per
    CHARS_PER_TOKEN characters when deltas carry several (Anthropic, Gemini), the larger."""
    usage = progress.usage
    estimated: list[str] = []
    if prompt_tokens(usage) == 0:
        usage = msgspec.structs.replace(usage, input=estimated_input(record))
        estimated.append("input")
    counted = max(progress.deltas, -(-progress.chars // CHARS_PER_TOKEN))
    if counted > usage.output:
        usage = msgspec.structs.replace(usage, output=counted)
        estimated.append("output")
    return usage, ",".join(estimated) or None


class Prior(msgspec.Struct, frozen=True):
    """What earlier attempts of a call sent again under the same id cost."""

    usage: Usage = Usage()
    cost_usd: float = 0.0
    estimated: str | None = None


def prior_usage(record: LLMCallRecord) -> Prior:
    """The earlier attempts of a call about to be sent again (its record ended before its
    answer: canceled at a shutdown, or found planned after its process died): the usage,
    cost and estimated counts its next end adds its own to. Zero for a call never ended."""
    return Prior(record_usage(record), record.cost_usd or 0.0, record.estimated_tokens)


def record_usage(record: LLMCallRecord) -> Usage:
    """The token counts a call's record holds (zeros for counts it has none of)."""
    return Usage(
        input=record.input_tokens or 0,
        output=record.output_tokens or 0,
        cache_read=record.cache_read_tokens or 0,
        cache_write=record.cache_write_tokens or 0,
        reasoning=record.reasoning_tokens or 0,
    )


def abandoned_call(record: LLMCallRecord, reason: str, *, now_ms: int) -> LLMCallRecord:
    """A call found "planned" after the process that made it stopped (it died, or stopped
    without finishing it): canceled with `reason`. Nothing is known of what it streamed: its
    input is the request's estimate and its output unknown (0), both flagged as estimated."""
    usage, _ = usage_so_far(StreamProgress(), record)
    end = CallEnd(record.call_id, CallOutcome.CANCELED, reason)
    return finished_call(
        record,
        end,
        usage=usage,
        answer_bytes=None,
        ttft_ms=None,
        duration_ms=None,
        now_ms=now_ms,
        estimated="input,output",
        prior=prior_usage(record),
    )


def merge_estimated(*flags: str | None) -> str | None:
    """`estimated_tokens` of usage summed from parts with these flags."""
    kinds = {k for f in flags if f for k in f.split(",")}
    return ",".join(k for k in ("input", "output") if k in kinds) or None


def sent_operation(
    command: CallClient, *, conversation_id: str, turn_id: str, index: int, now_ms: int
) -> ClientOperationRecord:
    """The record of a tool call, written in the commit that decides it, before it is sent."""
    call = command.tool_call
    return ClientOperationRecord(
        operation_id=command.operation_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        tool_call_id=call.id,
        tool_index=index,
        tool_name=call.name,
        side_effects=side_effects(call.name),
        request=_tool_call_encoder.encode(call),
        status="sent",
        updated_at_ms=now_ms,
    )


def completed_operation(
    record: ClientOperationRecord, result: ToolResultMessage, now_ms: int
) -> ClientOperationRecord:
    return msgspec.structs.replace(
        record,
        status="completed",
        result=canonical.encode_message(result),
        updated_at_ms=now_ms,
    )


def decode_result(data: bytes) -> ToolResultMessage | None:
    message = canonical.decode_message(data)
    return message if isinstance(message, ToolResultMessage) else None
