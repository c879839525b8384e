"""Signing in with a person's token, in the store (both backends): a server secret is made
once, a sign-in is claimed once, and a session token lives only while its person token does."""

from __future__ import annotations

import asyncio

from cursor_byok.store import AnyStore
from cursor_byok.store.api import AccessTokenRecord, SessionTokenRecord, SignInRecord


async def test_the_first_secret_stays(store: AnyStore) -> None:
    first, second = await asyncio.gather(
        store.server_secret("jwt", "one", 10), store.server_secret("jwt", "two", 11)
    )
    assert first == second and first in ("one", "two")
    assert await store.server_secret("jwt", "three", 12) == first
    assert await store.server_secret("path", "p", 12) == "p"


async def test_a_sign_in_is_claimed_once_and_only_while_fresh(store: AnyStore) -> None:
    record = SignInRecord(login_id="u1", challenge="c", token_id="t1", signed_in_at_ms=1000)
    assert (await store.record_sign_in(record)).outcome == "inserted"
    again = await store.record_sign_in(record)
    assert again.outcome == "ignored"
    assert await store.claim_sign_in("u1", "c", 2000, not_before_ms=1001) is None  # too old
    assert await store.claim_sign_in("u1", "other", 2000, not_before_ms=500) is None
    claimed = await store.claim_sign_in("u1", "c", 2000, not_before_ms=500)
    assert claimed is not None and claimed.token_id == "t1" and claimed.claimed_at_ms == 2000
    assert await store.claim_sign_in("u1", "c", 2001, not_before_ms=500) is None  # once
    assert await store.claim_sign_in("nobody", "c", 2001, not_before_ms=0) is None


async def test_session_tokens_die_with_their_person_token(store: AnyStore) -> None:
    person = AccessTokenRecord(token_id="t1", name="ann", secret_hash="h", created_at_ms=1)
    await store.add_access_token(person)
    access = SessionTokenRecord(
        token_hash="a", kind="access", token_id="t1", created_at_ms=1, expires_at_ms=100
    )
    refresh = SessionTokenRecord(token_hash="r", kind="refresh", token_id="t1", created_at_ms=1)
    assert (await store.add_session_token(access)).outcome == "inserted"
    assert (await store.add_session_token(refresh)).outcome == "inserted"
    assert (await store.add_session_token(refresh)).outcome == "ignored"
    assert await store.list_session_tokens(50) == (access,)  # access tokens only
    assert await store.find_session_token("r", 10**12) == refresh  # no expiry
    assert await store.list_session_tokens(100) == ()  # expired
    assert await store.find_session_token("a", 100) is None
    await store.revoke_access_token("ann", 60)
    assert await store.list_session_tokens(50) == ()
    assert await store.find_session_token("r", 50) is None
