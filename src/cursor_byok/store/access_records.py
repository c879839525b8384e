"""The records of people's access (store.api re-exports them): person tokens, sign-ins on the
sign-in page, the session tokens handed to signed-in clients, and a person's usage sums."""

from __future__ import annotations

from typing import Literal

import msgspec


class AccessTokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A token per person: its name, the SHA-256 of its secret (the secret is never stored)
    and its limits. `models` empty: every model. Revoked tokens keep their row, so their
    calls keep their attribution; one token per name is active at a time. `person_id`: the
    id of the first token of its chain of rotations (its own id, or "" for it, when never
    rotated): a person's spend and usage sum the calls of every token of the chain."""

    token_id: str
    name: str
    secret_hash: str
    created_at_ms: int
    models: tuple[str, ...] = ()
    budget_usd: float | None = None
    rpm: int | None = None
    revoked_at_ms: int | None = None
    person_id: str = ""

    @property
    def person(self) -> str:
        return self.person_id or self.token_id


class SignInRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A person signed in on the sign-in page for a client's login id (its `uuid`) with the
    token `token_id`. `challenge` is the client's public PKCE challenge; the client's poll,
    which proves the verifier behind it, claims the sign-in once (`claimed_at_ms`)."""

    login_id: str
    challenge: str
    token_id: str
    signed_in_at_ms: int
    claimed_at_ms: int | None = None


class SessionTokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An access or refresh token handed to a client that signed in with person token
    `token_id`: only its SHA-256 (hex) is stored. `expires_at_ms` None: it lives as long as
    its person token (refresh tokens)."""

    token_hash: str
    kind: Literal["access", "refresh"]
    token_id: str
    created_at_ms: int
    expires_at_ms: int | None = None


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The sums over the model calls made under one person's tokens in a time window.
    `token_id` is that person's id (AccessTokenRecord.person: its first token's id)."""

    token_id: str
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0  # finished calls stored without a cost
