"""A run's context and, for a conversation new to this server, the history its client holds.

Both may live in client blobs. Blobs already fetched by any run come from the server's cache
(client_blobs.py, kept by content hash); the others are asked for all at once, one round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...llm.types import Message
from ...loop import TurnContext
from ..cursor import (
    ContextPart,
    RunRequest,
    decode_request_context_part,
    history_from_root_prompt_blobs,
    merge_context,
)
from .client_blobs import ClientBlobs
from .requests import ClientRequests

log = logging.getLogger("cursor_byok.runtime")


async def fetch_blobs(
    blob_ids: Sequence[bytes], requests: ClientRequests, cache: ClientBlobs
) -> list[bytes | None]:
    """The client's blobs (None: it has no such blob), cached ones without asking."""
    found = [cache.get(blob_id) for blob_id in blob_ids]
    missing = [i for i, data in enumerate(found) if data is None]
    if missing:
        fetched = await requests.blobs([blob_ids[i] for i in missing])
        for i, data in zip(missing, fetched, strict=True):
            found[i] = data
            if data is not None:
                cache.put(blob_ids[i], data)
    return found


async def context_parts(
    request: RunRequest, requests: ClientRequests, cache: ClientBlobs
) -> tuple[ContextPart, ...]:
    refs = request.context_refs
    fetched = await fetch_blobs([ref.blob_id for ref in refs], requests, cache)
    parts: list[ContextPart] = []
    for ref, data in zip(refs, fetched, strict=True):
        if data is None:
            log.warning(
                "conversation %s: the client has no %s blob; going on without it",
                request.conversation_id,
                ref.kind,
            )
            continue
        if ref.byte_length and len(data) != ref.byte_length:
            log.warning(
                "conversation %s: the %s blob has %d bytes, the run request said %d",
                request.conversation_id,
                ref.kind,
                len(data),
                ref.byte_length,
            )
        part = decode_request_context_part(ref.kind, data)
        for warning in part.warnings:
            log.warning("conversation %s: %s", request.conversation_id, warning)
        parts.append(part)
    return tuple(parts)


async def turn_context(
    request: RunRequest,
    parts: Sequence[ContextPart],
    requests: ClientRequests,
    disabled_tools: tuple[str, ...] = (),
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
        image_generation=image_generation,
    )


async def client_history(
    request: RunRequest, requests: ClientRequests, cache: ClientBlobs
) -> tuple[Message, ...]:
    """History the client holds for a conversation this server has never seen."""
    if request.inline_history:
        return request.inline_history
    fetched = await fetch_blobs(request.history.root_prompt_blob_ids, requests, cache)
    return history_from_root_prompt_blobs([data for data in fetched if data is not None])
