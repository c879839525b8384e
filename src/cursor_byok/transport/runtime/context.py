"""A run's context and, for a conversation new to this server, the history its client holds.

Both may live in client blobs. Blobs already fetched by any run come from the server's cache
(client_blobs.py, kept by content hash); the others are asked for all at once, one round trip.
The context blobs a turn read are also kept with the conversation's context (KeptPart, in the
store), for a later turn whose client cannot serve them, also after a restart.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import msgspec

from ...loop import TurnContext
from ...loop.context import KeptPart
from ..cursor import (
    BlobReceived,
    ContextPart,
    ContextRef,
    PartKind,
    RunRequest,
    decode_request_context_part,
    merge_context,
)
from .client_blobs import BlobCache
from .requests import ClientRequests

log = logging.getLogger("cursor_byok.runtime")


async def fetch_blobs(
    blob_ids: Sequence[bytes], requests: ClientRequests, cache: BlobCache
) -> list[bytes | None]:
    """The client's blobs (None: it has no such blob), cached ones without asking."""
    found = [cache.get(blob_id) for blob_id in blob_ids]
    missing = [i for i, data in enumerate(found) if data is None]
    if missing:
        answers = await requests.blobs([blob_ids[i] for i in missing])
        for i, answer in zip(missing, answers, strict=True):
            found[i] = answer.data
            if answer.data is not None:
                cache.put(blob_ids[i], answer.data)
    return found


def _kept_by_id(kept: Sequence[KeptPart], blob_id: bytes) -> bytes | None:
    """A kept copy that is this very blob (its bytes hash to the id)."""
    for copy in kept:
        if copy.blob_id == blob_id and hashlib.sha256(copy.data).digest() == blob_id:
            return copy.data
    return None


def _why(answer: BlobReceived) -> str:
    if answer.error:
        return f"it answered with an error: {answer.error}"
    return "it answered with no data"


async def context_parts(
    request: RunRequest,
    requests: ClientRequests,
    cache: BlobCache,
    kept: Sequence[KeptPart] = (),
) -> tuple[ContextPart, ...]:
    """The run's context parts. A blob comes from the server's cache, else from the copy kept
    with the conversation (`kept`, the last turn's context) when that is the same blob, else
    from the client, all missing ones in one round trip. A blob the client cannot serve (an
    error, no data, or no answer within the context deadline) is read from the last kept copy
    of its kind, else left out; both logged."""
    refs = request.context_refs
    found: list[bytes | None] = []
    for ref in refs:
        data = cache.get(ref.blob_id)
        if data is None:
            data = _kept_by_id(kept, ref.blob_id)
            if data is not None:
                cache.put(ref.blob_id, data)
        found.append(data)
    missing = [i for i, data in enumerate(found) if data is None]
    why: dict[int, str] = {}
    if missing:
        answers = await requests.blobs_within([refs[i].blob_id for i in missing])
        for i, answer in zip(missing, answers, strict=True):
            if answer is None:
                why[i] = f"it did not answer within {requests.timeout_s:g} s"
            elif answer.data:
                found[i] = answer.data
                cache.put(refs[i].blob_id, answer.data)
            else:
                why[i] = _why(answer)
    cid = request.conversation_id
    parts: list[ContextPart] = []
    for i, (ref, data) in enumerate(zip(refs, found, strict=True)):
        if data is None:
            part = _fallback(cid, ref, why.get(i, "it answered with no data"), kept)
            if part is not None:
                parts.append(part)
            continue
        if ref.byte_length and len(data) != ref.byte_length:
            log.warning(
                "conversation %s: the %s blob has %d bytes, the run request said %d",
                cid,
                ref.kind,
                len(data),
                ref.byte_length,
            )
        part = decode_request_context_part(ref.kind, data, ref.blob_id)
        for warning in part.warnings:
            log.warning("conversation %s: %s", cid, warning)
        parts.append(part)
    return tuple(parts)


def _fallback(cid: str, ref: ContextRef, why: str, kept: Sequence[KeptPart]) -> ContextPart | None:
    """The last kept copy of a part the client could not serve, or None (logged either way)."""
    copy = next((k for k in kept if k.kind == ref.kind), None)
    if copy is None:
        log.warning(
            "conversation %s: the client could not serve the %s blob (%s) and no earlier copy "
            "is kept; going on without it",
            cid,
            ref.kind,
            why,
        )
        return None
    log.warning(
        "conversation %s: the client could not serve the %s blob (%s); using the copy kept "
        "from an earlier turn (%d bytes)",
        cid,
        ref.kind,
        why,
        len(copy.data),
    )
    part = decode_request_context_part(ref.kind, copy.data, copy.blob_id)
    for warning in part.warnings:
        log.warning("conversation %s: %s", cid, warning)
    return part


async def turn_context(
    request: RunRequest,
    parts: Sequence[ContextPart],
    requests: ClientRequests,
    disabled_tools: tuple[str, ...] = (),
    enabled_tools: tuple[str, ...] = (),
    web_search_configured: bool = False,
    image_generation: bool = False,
) -> TurnContext:
    """The run's context: the inline one, else (with no parts either) the one the client
    answers `request_context_args` with; merged with the parts and the MCP tools."""
    inline = request.inline_context
    if inline is None and not request.context_refs:
        inline = await requests.context()
    return merge_context(
        inline,
        parts,
        request.mcp_tools,
        mode=request.mode,
        custom_instructions=request.custom_system_prompt,
        suppress_subagent_progress_update_tool=request.suppress_subagent_progress_update_tool,
        disabled_tools=disabled_tools,
        enabled_tools=enabled_tools,
        web_search_configured=web_search_configured,
        image_generation=image_generation,
    )


def with_kept(
    context: TurnContext, parts: Sequence[ContextPart], earlier: Sequence[KeptPart]
) -> TurnContext:
    """`context` keeping the last copy of each kind of context blob for this conversation:
    this run's parts' blobs, and for a kind this run read no blob of, the earlier copy (a run
    that names no parts, a legacy request or a Build with its own context, carries them on).
    A copy is only read when a later run names a blob of its kind that the client cannot
    serve, so an old copy of a kind the client stopped sending is never used."""
    kept: dict[str, KeptPart] = {k.kind: k for k in earlier}
    for part in parts:
        if part.data:
            kept[part.kind] = KeptPart(kind=part.kind, blob_id=part.blob_id, data=part.data)
    ordered = tuple(kept[kind] for kind in PartKind if kind in kept)
    if ordered == context.kept_parts:
        return context
    return msgspec.structs.replace(context, kept_parts=ordered)
