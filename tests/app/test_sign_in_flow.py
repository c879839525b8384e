"""The sign-in flow's rules without a server: an access token expires, a wrong verifier claims
nothing, the poll works over GET too, the refresh route takes a form body, logout is 204."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cursor_byok.access_tokens import TokenDirectory, new_secret, new_token_id, secret_hash
from cursor_byok.sign_in import Credentials, SessionDirectory, SignInFlow, pkce_challenge
from cursor_byok.sign_in_page import SignInRoutes
from cursor_byok.store.api import AccessTokenRecord
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.connect.app import PlainRequest


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = await SQLiteStore.open(tmp_path / "byok.db")
    try:
        yield s
    finally:
        await s.close()


def request(
    method: str, path: str, *, query: str = "", body: bytes = b"", **headers: str
) -> PlainRequest:
    return PlainRequest(method, path, query, headers, body, "127.0.0.1")


async def setup(store: SQLiteStore, clock: Clock) -> tuple[str, str, SignInFlow, Credentials]:
    secret, token_id = new_secret(), new_token_id()
    await store.add_access_token(
        AccessTokenRecord(
            token_id=token_id, name="dana", secret_hash=secret_hash(secret), created_at_ms=1
        )
    )
    tokens = TokenDirectory(store)
    await tokens.load()
    sessions = SessionDirectory(store, ttl_s=600, clock=clock)
    await sessions.load()
    return secret, token_id, SignInFlow(store, tokens, sessions), Credentials(tokens, sessions)


async def test_an_access_token_stops_at_its_expiry(store: SQLiteStore) -> None:
    clock = Clock()
    secret, token_id, flow, credentials = await setup(store, clock)
    pair = await flow.exchange(secret)
    assert pair is not None and credentials.principal(pair.access_token) == token_id
    assert credentials.principal(secret) == token_id  # the person token itself, as before
    clock.now += 599
    assert credentials.principal(pair.access_token) == token_id
    clock.now += 2
    assert credentials.principal(pair.access_token) is None
    # Another process (or a restart) loads the same live tokens from the store.
    again = SessionDirectory(store, ttl_s=600, clock=clock)
    await again.load()
    assert again.principal(pair.access_token) is None
    clock.now -= 2
    await again.load()
    assert again.principal(pair.access_token) == token_id


async def test_a_wrong_verifier_claims_nothing_and_get_polls_work(store: SQLiteStore) -> None:
    clock = Clock()
    _, token_id, flow, _ = await setup(store, clock)
    routes = SignInRoutes(flow)
    verifier = "v" * 43
    assert await flow.complete("login-0001", pkce_challenge(verifier), token_id)
    wrong = await routes.handle(
        request(
            "POST",
            "/auth/poll",
            body=json.dumps({"uuid": "login-0001", "verifier": "w" * 43}).encode(),
        )
    )
    assert wrong.status == 404 and wrong.body == b"Not found"
    right = await routes.handle(
        request("GET", "/auth/poll", query=f"uuid=login-0001&verifier={verifier}")
    )
    assert right.status == 200
    body = json.loads(right.body)
    assert set(body) == {"accessToken", "refreshToken", "authId"}
    form = await routes.handle(
        request(
            "POST",
            "/oauth/token",
            body=f"grant_type=refresh_token&refresh_token={body['refreshToken']}".encode(),
        )
    )
    assert form.status == 200 and json.loads(form.body)["shouldLogout"] is False
    assert (await routes.handle(request("POST", "/auth/logout"))).status == 204
    late = await routes.handle(
        request("GET", "/auth/poll", query=f"uuid=login-0001&verifier={verifier}")
    )
    assert late.status == 404  # claimed once


async def test_a_sign_in_left_unclaimed_expires(store: SQLiteStore) -> None:
    clock = Clock()
    _, token_id, flow, _ = await setup(store, clock)
    verifier = "x" * 43
    assert await flow.complete("login-0002", pkce_challenge(verifier), token_id)
    clock.now += 11 * 60
    assert await flow.poll("login-0002", verifier) is None
