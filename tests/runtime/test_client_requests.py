"""Waiting for the client's answers: one already in when the wait begins (the turn's checkpoint
blob, acknowledged while the turn's last commit was written) is taken without arming a timer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cursor_byok.transport.cursor import BlobStored
from cursor_byok.transport.runtime import requests as requests_module
from cursor_byok.transport.runtime.requests import ClientRequests


class Link:
    def __init__(self) -> None:
        self.next = 0

    def set_blob(self, data: bytes) -> tuple[int, bytes]:
        self.next += 1
        return self.next, b"set_blob " + data


class Channel:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)


def client_requests() -> ClientRequests:
    return ClientRequests(Channel(), Link(), 30.0)  # type: ignore[arg-type]


async def test_an_answer_already_in_is_taken_without_a_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests = client_requests()
    stored = requests.store_blob(b"a")
    refused = requests.store_blob(b"b")
    assert requests.resolve(BlobStored(kv_id=stored[0], ok=True))
    assert requests.resolve(BlobStored(kv_id=refused[0], ok=False))

    def no_timer(*_: Any) -> Any:
        raise AssertionError("a timer armed for an answer already in")

    monkeypatch.setattr(requests_module.asyncio, "timeout", no_timer)
    assert await requests.stored(*stored, 5.0) is True
    assert await requests.stored(*refused, 5.0) is False
    dropped = requests.store_blob(b"c")
    requests.forget(*dropped)  # a wait given up: as awaiting it would, it raises
    with pytest.raises(asyncio.CancelledError):
        await requests.stored(*dropped, 5.0)
    assert not requests._kv  # nothing left waiting


async def test_an_answer_still_to_come_is_waited_for_within_its_bound() -> None:
    requests = client_requests()
    kv_id, reply = requests.store_blob(b"a")
    asyncio.get_running_loop().call_later(0.01, requests.resolve, BlobStored(kv_id=kv_id, ok=True))
    assert await requests.stored(kv_id, reply, 5.0) is True
    late = requests.store_blob(b"b")
    assert await requests.stored(*late, 0.01) is False  # timed out
    assert not requests._kv
