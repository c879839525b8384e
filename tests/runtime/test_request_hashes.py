"""request_hashes.py: a request's SHA-256 continued over the bytes it shares with the
conversation's previous request is exactly the SHA-256 of its body, and a growing
conversation hashes only what changed (issue 28)."""

from __future__ import annotations

import hashlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.transport.runtime.request_hashes import STEP, RequestHashes


def test_an_extended_body_hashes_only_its_new_end() -> None:
    hashes = RequestHashes()
    rng = random.Random(7)
    history = b'{"model":"m","messages":['
    tail = b'],"tools":[' + b"t" * 20_000 + b"]}"
    for turn in range(60):
        history += b'{"role":"tool","content":"' + rng.randbytes(1024).hex().encode() + b'"},'
        body = history + tail
        before = hashes.resumed_bytes
        assert hashes.hexdigest(body, "conv") == hashlib.sha256(body).hexdigest()
        if turn:
            # everything up to the last kept state before the end of the shared history
            assert hashes.resumed_bytes - before >= len(history) - 2 * 2048 - STEP
    assert len(body) > 8 * STEP


def test_conversations_do_not_share_and_a_changed_start_hashes_whole() -> None:
    hashes = RequestHashes()
    a = b"a" * (5 * STEP)
    b = b"b" + a[1:]
    assert hashes.hexdigest(a, "one") == hashlib.sha256(a).hexdigest()
    before = hashes.resumed_bytes
    assert hashes.hexdigest(b, "one") == hashlib.sha256(b).hexdigest()
    assert hashes.hexdigest(a, "two") == hashlib.sha256(a).hexdigest()
    assert hashes.resumed_bytes == before


def test_bounded_by_conversations_and_bytes() -> None:
    hashes = RequestHashes(max_conversations=3, max_bytes=10 * STEP)
    for i in range(10):
        hashes.hexdigest(bytes([i]) * (4 * STEP), f"c{i}")
    assert len(hashes._kept) <= 3 and hashes._bytes <= 10 * STEP
    assert hashes._bytes == sum(len(k.body) for k in hashes._kept.values())


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 6 * STEP), st.binary(min_size=0, max_size=3 * STEP)),
        min_size=1,
        max_size=8,
    ),
    seed=st.integers(0, 2**16),
)
def test_every_digest_is_the_bodys_sha256(steps: list[tuple[int, bytes]], seed: int) -> None:
    """Bodies that keep a prefix of the previous one of any length and add any bytes (with a
    random base so that some share whole STEP blocks)."""
    hashes = RequestHashes()
    body = random.Random(seed).randbytes(4 * STEP)
    for keep, added in steps:
        body = body[:keep] + added
        assert hashes.hexdigest(body, "k") == hashlib.sha256(body).hexdigest()
