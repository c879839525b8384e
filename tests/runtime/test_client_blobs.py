"""Client blobs are kept only when their bytes are the blob their id names; bounded in bytes."""

from __future__ import annotations

import hashlib

from cursor_byok.transport.runtime.client_blobs import ClientBlobs


def blob(text: str) -> tuple[bytes, bytes]:
    data = text.encode()
    return hashlib.sha256(data).digest(), data


def test_only_bytes_that_hash_to_their_id_are_kept() -> None:
    blobs = ClientBlobs()
    blob_id, data = blob("rules")
    assert blobs.put(blob_id, data) and blobs.get(blob_id) == data
    other_id, _ = blob("something else")
    assert not blobs.put(other_id, data)  # not what that id names
    assert blobs.get(other_id) is None and len(blobs) == 1
    assert blobs.put(blob_id, data) and len(blobs) == 1  # once


def test_bounded_in_bytes_least_recently_used_first() -> None:
    blobs = ClientBlobs(max_bytes=25)
    ids = []
    for text in ("aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"):
        blob_id, data = blob(text)
        ids.append(blob_id)
        if text == "cccccccccc":
            assert blobs.get(ids[0]) is not None  # "a" is now the most recent
        blobs.put(blob_id, data)
    assert blobs.get(ids[1]) is None  # "b" went first
    assert blobs.get(ids[0]) is not None and blobs.get(ids[2]) is not None
    big_id, big = blob("x" * 26)
    assert not blobs.put(big_id, big)  # larger than the whole budget: never kept
    assert len(blobs) == 2


def test_each_person_finds_only_the_blobs_their_runs_fetched() -> None:
    """A person's run never reads another person's rules from the cache, even by their id."""
    blobs = ClientBlobs()
    blob_id, data = blob("alice's rules")
    alice, bob, operator = blobs.scoped("tok_alice"), blobs.scoped("tok_bob"), blobs.scoped(None)
    assert alice.put(blob_id, data) and alice.get(blob_id) == data
    assert bob.get(blob_id) is None and operator.get(blob_id) is None
    assert bob.put(blob_id, data) and bob.get(blob_id) == data  # fetched from bob's client
    assert len(blobs) == 2
