"""Stored requests: whole or as a delta on the conversation's previous call; rebuilt exactly."""

from __future__ import annotations

import asyncio
import hashlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cursor_byok.llm.stream import PreparedRequest
from cursor_byok.transport.runtime.request_bases import RequestBases
from cursor_byok.transport.runtime.stored_request import (
    COMPRESS_FROM,
    MAX_CHAIN,
    RequestBase,
    StoredRequestError,
    common_prefix,
    common_suffix,
    encode_request,
    encode_whole,
    is_delta,
    load_request,
)


def prepared(messages: list[str], tools: str = "[]") -> PreparedRequest:
    body = msgspec.json.encode({"model": "m", "messages": messages, "tools": tools})
    return PreparedRequest(
        url="https://example.invalid/v1/chat/completions",
        body=body,
        model="m",
        headers=(("content-type", "application/json"),),
    )


def sha(request: PreparedRequest) -> str:
    return hashlib.sha256(request.body).hexdigest()


class Rows:
    """Stored forms by call id, as the store holds them."""

    def __init__(self) -> None:
        self.rows: dict[str, bytes] = {}
        self.fetched: list[str] = []

    async def fetch(self, call_id: str) -> bytes | None:
        self.fetched.append(call_id)
        return self.rows.get(call_id)

    def load(self, data: bytes, request: PreparedRequest) -> PreparedRequest:
        return asyncio.run(load_request(data, sha(request), self.fetch))


def test_a_growing_conversation_stores_what_each_call_adds() -> None:
    rows = Rows()
    history = ["system rules " * 200]
    base: RequestBase | None = None
    requests, sizes = [], []
    calls = MAX_CHAIN + 8
    for i in range(calls):
        history.append(f"user {i}: " + "a question about the code " * 20)
        history.append(f"assistant {i}: " + "an answer with a tool call " * 30)
        request = prepared(history, tools="Shell Read Write " * 50)
        stored, base = encode_request(request, base, f"call-{i}")
        rows.rows[f"call-{i}"] = stored
        requests.append(request)
        sizes.append(len(stored))
    body = len(requests[-1].body)
    assert body > 80_000
    assert not is_delta(rows.rows["call-0"])
    assert all(is_delta(rows.rows[f"call-{i}"]) for i in range(1, MAX_CHAIN + 1))
    assert not is_delta(rows.rows[f"call-{MAX_CHAIN + 1}"])  # the chain is bounded
    # A delta costs about the bytes the call added (~1.4 KB here), not the whole prompt.
    assert max(sizes[i] for i in range(1, calls) if i % (MAX_CHAIN + 1)) < 2_000
    for i, request in enumerate(requests):
        rows.fetched.clear()
        assert rows.load(rows.rows[f"call-{i}"], request) == request
        assert len(rows.fetched) == i % (MAX_CHAIN + 1)  # one read per delta of the chain


def test_changes_in_the_middle_and_shorter_bodies_round_trip() -> None:
    rows = Rows()
    first = prepared(["one " * 500, "two " * 500, "three " * 500])
    stored0, base = encode_request(first, None, "a")
    rows.rows["a"] = stored0
    # a rewind: the next body is shorter than its base, and differs in the middle
    second = prepared(["one " * 500, "TWO " * 3, "three " * 500])
    stored1, base = encode_request(second, base, "b")
    assert is_delta(stored1)
    rows.rows["b"] = stored1
    assert rows.load(stored1, second) == second
    # the same body again: an empty middle
    stored2, _ = encode_request(second, base, "c")
    assert is_delta(stored2) and rows.load(stored2, second) == second


def test_an_unrelated_body_is_stored_whole() -> None:
    _, base = encode_request(prepared(["x" * 2000]), None, "a")
    stored, next_base = encode_request(prepared(["y" * 2000]), base, "b")
    assert not is_delta(stored) and next_base.depth == 0


def test_a_large_new_middle_is_compressed() -> None:
    rows = Rows()
    first = prepared(["start " * 20_000])
    stored0, base = encode_request(first, None, "a")
    rows.rows["a"] = stored0
    tool_output = "".join(f"line {i}: some build output\n" for i in range(3_000))
    second = prepared(["start " * 20_000, tool_output])
    assert len(tool_output) > COMPRESS_FROM
    stored1, _ = encode_request(second, base, "b")
    assert is_delta(stored1) and len(stored1) < len(tool_output) // 4
    assert rows.load(stored1, second) == second


def test_a_missing_base_or_changed_bytes_are_clear_errors() -> None:
    rows = Rows()
    first = prepared(["hello " * 300])
    stored0, base = encode_request(first, None, "a")
    second = prepared(["hello " * 300, "more"])
    stored1, _ = encode_request(second, base, "b")
    with pytest.raises(StoredRequestError, match="base request of call 'a' is missing"):
        rows.load(stored1, second)
    rows.rows["a"] = encode_whole(prepared(["hello " * 299 + "HELLO "]))  # not the base sent
    with pytest.raises(StoredRequestError, match="differs from the bytes that were sent"):
        rows.load(stored1, second)
    rows.rows["a"] = stored0
    assert rows.load(stored1, second) == second
    with pytest.raises(StoredRequestError, match="unreadable"):
        rows.load(b"\x00\xff\xfe", second)


def test_a_call_is_never_stored_as_a_delta_on_itself() -> None:
    first = prepared(["x " * 300])
    _, base = encode_request(first, None, "a")
    stored, _ = encode_request(prepared(["x " * 300, "y"]), base, "a")
    assert not is_delta(stored)


def test_a_cycle_of_deltas_is_refused() -> None:
    rows = Rows()
    first = prepared(["x " * 300])
    _, base = encode_request(first, None, "a")
    delta_on_a, _ = encode_request(prepared(["x " * 300, "y"]), base, "b")
    rows.rows["a"] = delta_on_a  # a corrupted row: call "a" stored as a delta on "a"
    with pytest.raises(StoredRequestError, match="too long"):
        rows.load(delta_on_a, first)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.binary(max_size=300), st.binary(max_size=300))
def test_prefix_and_suffix_are_the_longest(a_mid: bytes, b_mid: bytes, common: bytes) -> None:
    a = common + a_mid + common
    b = common + b_mid + common
    head = common_prefix(a, b)
    tail = common_suffix(a, b, min(len(a), len(b)) - head)
    assert a[:head] == b[:head]
    assert head == min(len(a), len(b)) or a[head] != b[head]
    assert head + tail <= min(len(a), len(b))
    assert a[len(a) - tail :] == b[len(b) - tail :]
    assert tail == min(len(a), len(b)) - head or a[len(a) - tail - 1] != b[len(b) - tail - 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=400), min_size=1, max_size=12))
def test_any_sequence_of_bodies_round_trips(bodies: list[bytes]) -> None:
    rows = Rows()
    base: RequestBase | None = None
    for i, body in enumerate(bodies):
        request = PreparedRequest(url="u", body=body, model="m")
        stored, base = encode_request(request, base, f"c{i}")
        rows.rows[f"c{i}"] = stored
        assert rows.load(stored, request) == request


def test_the_request_bases_stay_within_their_memory_budget() -> None:
    keeper = RequestBases(max_bytes=250)
    for name in ("a", "b", "c"):
        keeper.remember(name, RequestBase(f"{name}-1", b"x" * 100, 0))
    assert keeper.get("a") is None  # the least recently used went first
    assert keeper.get("b") is not None  # ... and "b" is now the most recent
    keeper.remember("d", RequestBase("d-1", b"x" * 100, 0))
    assert keeper.get("c") is None and keeper.get("b") is not None
    keeper.remember("b", RequestBase("b-2", b"y" * 100, 1))  # replaced, not added
    assert keeper.get("b") == RequestBase("b-2", b"y" * 100, 1)
    assert keeper.get("d") is not None
    # one base larger than the budget is still kept: the conversation in use needs it
    keeper.remember("e", RequestBase("e-1", b"z" * 1000, 0))
    assert keeper.get("e") is not None and keeper.get("d") is None
    assert (len(keeper), keeper.size) == (1, 1000)
    assert keeper.hits > 0 and keeper.misses > 0
