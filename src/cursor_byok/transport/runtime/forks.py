"""A chat forked from a conversation this server ran: the history the new conversation starts
with, copied from the source's store record (its own log from then on; nothing is shared).

The IDE forks two ways, and both end here for a conversation new to this server:

- a run request with a new conversation id whose checkpoint lists the source's turn blobs: the
  last blob (ours: `checkpoint.turn_blob`, it names its conversation and turn) says where the
  fork starts, and the source's turn mark for that blob gives its active history then (a fork
  from an earlier turn gets that turn's history, a compaction epoch included);
- `AgentService/NotifyConversationClone` (noted in the store, `Store.note_clone`, so any
  process or replica finds it): the source's current active history, when the run request
  names no blob of ours.

The loop opens the fork from the source's committed state (`ForkOf` on the Start,
loop/forks.py): the source's turns up to the fork point become the fork's first turns.

Blobs the request carries in `pre_fetched_blobs` are taken into the server's blob cache first
(each checked against its id), so history that arrives only there is read without asking.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...llm.types import Message
from ...loop import ForkOf
from ...store.api import Store
from ..cursor import RunRequest, history_from_root_prompt_blobs, read_turn_blob
from . import records
from .client_blobs import BlobCache
from .context import fetch_blobs
from .conversation import not_yours
from .requests import ClientRequests

log = logging.getLogger("cursor_byok.runtime")


@dataclass(frozen=True, slots=True)
class NewHistory:
    """What a conversation new to this server opens with: the client's history, or a fork of
    one of ours (then `messages` is empty)."""

    messages: tuple[Message, ...] = ()
    fork: ForkOf | None = None


def take_pre_fetched(request: RunRequest, cache: BlobCache) -> None:
    """Blobs the client sent with the request, into the cache (a blob whose bytes do not hash
    to its id is dropped, logged)."""
    bad = sum(1 for blob_id, data in request.pre_fetched if not cache.put(blob_id, data))
    if bad:
        log.warning(
            "conversation %s: %d pre-fetched blob(s) did not match their id (or were too "
            "large) and were not used",
            request.conversation_id,
            bad,
        )


async def history_of_new(
    request: RunRequest,
    store: Store,
    requests: ClientRequests,
    cache: BlobCache,
    person: str | None = None,
    *,
    clone_source: str | None,
) -> NewHistory:
    """The history a conversation new to this server starts with: its inline history, else a
    fork's (the source's, when the source is ours), else the client's root-prompt blobs. The
    checkpoint's last turn blob and the root-prompt blobs are asked for in one round trip. A
    fork of another person's conversation (`person`: the run's; None: the operator) raises
    NotYours: a token copies only its own person's history. `clone_source`: what the
    conversation's clone note names (Store.first_look read it with the head)."""
    if request.inline_history:
        return NewHistory(request.inline_history)
    turns = request.history.turn_blob_ids
    roots = request.history.root_prompt_blob_ids
    asked = [turns[-1], *roots] if turns else list(roots)
    fetched = await fetch_blobs(asked, requests, cache) if asked else []
    named = None
    if turns:
        last, fetched = fetched[0], fetched[1:]
        named = read_turn_blob(last) if last is not None else None
        if named is not None and named[0] == request.conversation_id:
            named = None
    if named is None:
        named = (clone_source, 0) if clone_source is not None else None
    if named is not None:
        fork = await forked_history(request, store, named, person)
        if fork is not None:
            return NewHistory(fork=fork)
    return NewHistory(history_from_root_prompt_blobs([d for d in fetched if d is not None]))


async def forked_history(
    request: RunRequest, store: Store, source: tuple[str, int], person: str | None = None
) -> ForkOf | None:
    """The fork of the conversation `source` names (at its turn, 0: its latest), when this
    server holds it and it is `person`'s (None: the operator, whose every one is)."""
    source_id, turn = source
    record = await store.load(source_id)
    if record is not None and person is not None and record.owner_id != person:
        raise not_yours(source_id)
    if record is None:
        log.info(
            "conversation %s names %s as its source, which this server does not hold",
            request.conversation_id,
            source_id,
        )
        return None
    state = records.decode_state(record.state, record.messages)
    fork = ForkOf(source=state)
    if turn:
        last = request.history.turn_blob_ids[-1]
        marks = await store.list_turn_marks(source_id)
        mark = next((m for m in marks if m.blob_id == last), None)
        if mark is None:
            log.warning(
                "conversation %s forks %s at turn %d, whose mark it no longer has (rewound "
                "since?); its latest history is used",
                request.conversation_id,
                source_id,
                turn,
            )
            turn = 0
        else:
            view = records.decode_view(mark.view, mark.message_count)
            fork = ForkOf(source=state, turns=mark.turn, view=view)
    log.info(
        "conversation %s is a fork of %s (turn %s)",
        request.conversation_id,
        source_id,
        turn or "latest",
    )
    return fork
