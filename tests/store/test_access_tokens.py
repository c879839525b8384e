"""Tokens per person in the store: one active token per name, revoked rows kept, and the
usage of each token summed over its calls in a time window (the runtime's monthly budget)."""

from __future__ import annotations

from cursor_byok.store import SQLiteStore
from cursor_byok.store.api import AccessTokenRecord

from .conftest import call_record, commit


def token(name: str, token_id: str, **kw: object) -> AccessTokenRecord:
    values: dict[str, object] = {
        "token_id": token_id,
        "name": name,
        "secret_hash": "h-" + token_id,
        "created_at_ms": 1000,
    }
    values.update(kw)
    return AccessTokenRecord(**values)  # type: ignore[arg-type]


async def test_one_active_token_per_name_and_revoked_rows_stay(store: SQLiteStore) -> None:
    alice = token("alice", "t1", models=("brain-1", "fast"), budget_usd=2.5, rpm=10)
    assert (await store.add_access_token(alice)).outcome == "inserted"
    again = await store.add_access_token(token("alice", "t2"))
    assert again.outcome == "ignored" and "alice" in again.reason
    assert await store.find_access_token("h-t1") == alice
    assert await store.get_access_token("t1") == alice
    revoked = await store.revoke_access_token("alice", 5000)
    assert revoked is not None and revoked.revoked_at_ms == 5000
    assert await store.revoke_access_token("alice", 6000) is None  # none active any more
    second = token("alice", "t2", created_at_ms=2000)
    assert (await store.add_access_token(second)).outcome == "inserted"
    assert [t.token_id for t in await store.list_access_tokens()] == ["t2"]
    everything = await store.list_access_tokens(include_revoked=True)
    assert [(t.token_id, t.revoked_at_ms) for t in everything] == [("t2", None), ("t1", 5000)]
    found = await store.find_access_token("h-t1")
    assert found is not None and found.revoked_at_ms == 5000  # found, revoked: callers decide


async def test_usage_sums_the_calls_of_each_token_in_the_window(store: SQLiteStore) -> None:
    calls = (
        call_record(
            "a1",
            token_id="t1",
            created_at_ms=100,
            status="committed",
            cost_usd=1.0,
            input_tokens=10,
            output_tokens=5,
        ),
        call_record(
            "a2",
            token_id="t1",
            created_at_ms=200,
            status="committed",
            cost_usd=0.5,
            input_tokens=1,
            output_tokens=1,
        ),
        call_record("a3", token_id="t1", created_at_ms=300, status="failed"),  # unpriced
        call_record("a4", token_id="t1", created_at_ms=50, status="committed", cost_usd=9.0),
        call_record("b1", token_id="t2", created_at_ms=150, status="planned"),
        call_record("n1", created_at_ms=150, status="committed", cost_usd=7.0),  # no token
    )
    await commit(store, "c1", "i0", 0, (b"m0",), llm_calls=calls)
    (t1, t2) = await store.token_usage(100, 1000)
    assert (t1.token_id, t1.llm_calls, t1.cost_usd, t1.unpriced_calls) == ("t1", 3, 1.5, 1)
    assert (t1.input_tokens, t1.output_tokens) == (11, 6)
    assert (t2.token_id, t2.llm_calls, t2.cost_usd, t2.unpriced_calls) == ("t2", 1, 0.0, 0)
    (only,) = await store.token_usage(0, 100, token_id="t1")
    assert (only.llm_calls, only.cost_usd) == (1, 9.0)  # [since, until): 100 is not in it
    assert await store.token_usage(0, 1000, token_id="nobody") == ()
    assert await store.token_spend("t1", 100, 1000) == 1.5
    assert await store.token_spend("t1", 0, 1000) == 10.5
    assert await store.token_spend("nobody", 0, 1000) == 0.0
    stored = await store.get_llm_call("a1")
    assert stored is not None and stored.token_id == "t1"


async def test_rotation_keeps_the_person_its_limits_and_its_spend(store: SQLiteStore) -> None:
    """`token rotate`: the old token revoked and its successor added in one transaction; the
    month's spend and usage of the person sum both tokens' calls."""
    alice = token("alice", "t1", models=("brain-1",), budget_usd=0.02, rpm=7)
    await store.add_access_token(alice)
    await store.add_access_token(token("bob", "t9"))
    calls = (
        call_record("a1", token_id="t1", created_at_ms=100, status="committed", cost_usd=0.01),
        call_record("b1", token_id="t9", created_at_ms=100, status="committed", cost_usd=5.0),
    )
    await commit(store, "c1", "i0", 0, (b"m0",), llm_calls=calls)
    new = await store.rotate_access_token("alice", "t2", "h-t2", 3000)
    assert new is not None
    assert (new.token_id, new.name, new.secret_hash, new.person) == ("t2", "alice", "h-t2", "t1")
    assert (new.models, new.budget_usd, new.rpm, new.revoked_at_ms) == (("brain-1",), 0.02, 7, None)
    assert await store.get_access_token("t2") == new
    old = await store.find_access_token("h-t1")
    assert old is not None and old.revoked_at_ms == 3000 and old.person == "t1"
    assert [t.token_id for t in await store.list_access_tokens()] == ["t2", "t9"]
    assert await store.rotate_access_token("nobody", "t3", "h-t3", 3000) is None
    later = (
        call_record("a2", token_id="t2", created_at_ms=200, status="committed", cost_usd=0.000123),
    )
    await commit(store, "c2", "i0", 0, (b"m0",), llm_calls=later)
    assert await store.token_spend("t2", 0, 1000) == 0.010123  # both of alice's tokens
    assert await store.token_spend("t1", 0, 1000) == 0.010123
    assert await store.token_spend("t9", 0, 1000) == 5.0  # bob is not in it
    usage = {u.token_id: u for u in await store.token_usage(0, 1000)}
    assert set(usage) == {"t1", "t9"}  # one row per person, keyed by its first token
    assert (usage["t1"].llm_calls, usage["t1"].cost_usd) == (2, 0.010123)
    (only,) = await store.token_usage(0, 1000, token_id="t2")
    assert (only.token_id, only.llm_calls) == ("t1", 2)
    # Rotated again: still alice, still her spend.
    third = await store.rotate_access_token("alice", "t3", "h-t3", 4000)
    assert third is not None and third.person == "t1"
    assert await store.token_spend("t3", 0, 1000) == 0.010123
    # A token added under the name after a revocation is another person.
    await store.revoke_access_token("alice", 5000)
    await store.add_access_token(token("alice", "t4"))
    assert await store.token_spend("t4", 0, 1000) == 0.0


async def test_server_settings_are_kept_and_replaced(store: SQLiteStore) -> None:
    assert await store.get_server_setting("access") is None
    await store.set_server_setting("access", "closed", 1000)
    assert await store.get_server_setting("access") == "closed"
    await store.set_server_setting("access", "open", 2000)
    assert await store.get_server_setting("access") == "open"
    assert await store.get_server_setting("other") is None
