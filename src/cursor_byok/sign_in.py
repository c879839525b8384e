"""Signing a client in with a person's token: the access and refresh tokens it gets, and how
they are checked (docs/clients.md, "Signing in with your token").

A client that signs in (the IDE's login, `agent login`) opens the sign-in page with a login id
(`uuid`) and a PKCE challenge, then polls with the verifier behind the challenge. The person
pastes their `cbk_` token on the page; the poll that proves the verifier gets an access token
and a refresh token bound to that person token. The CLI with `CURSOR_API_KEY=cbk_…` gets the
same pair from `/auth/exchange_user_api_key` at once.

- An access token is JWT-shaped (clients read `exp` to refresh before it): HS256 over
  `{sub, iss, iat, exp, jti}`, signed with a key made once per server and kept in its database.
  What makes it valid is its SHA-256 among the live session tokens (store 0010): a revoked
  person token or an expired access token is refused, whatever the signature says.
- A refresh token (`cbr_` + 256 random bits) lives as long as its person token.
- Each is stored as its SHA-256 only; none is ever logged.

`SessionDirectory` keeps the live access tokens' hashes in memory (the transport checks
credentials synchronously) and reloads them every `refresh_s` seconds, like TokenDirectory;
`Credentials` is the transport's Authenticator over both.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from .access_tokens import REFRESH_S, TokenDirectory, secret_hash
from .reloads import Reloads
from .store.api import SessionTokenRecord, SignInRecord, Store

log = logging.getLogger("cursor_byok.sign_in")

SIGNING_KEY = "access_token_signing_key"
PATH_KEY = "repository_path_key"
REFRESH_PREFIX = "cbr_"
ISSUER = "cursor-byok"
# A sign-in must be claimed by the client's poll within this time.
SIGN_IN_TTL_MS = 10 * 60 * 1000


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def pkce_challenge(verifier: str) -> str:
    """base64url(SHA-256(verifier)) without padding: what the client sent as `challenge`."""
    return _b64url(hashlib.sha256(verifier.encode("utf-8")).digest())


class _Claims(msgspec.Struct, frozen=True):
    sub: str
    iss: str
    iat: int
    exp: int
    jti: str


_HEADER = _b64url(b'{"alg":"HS256","typ":"JWT"}')


def sign_access_token(key: bytes, subject: str, issued_s: int, expires_s: int) -> str:
    claims = _Claims(
        sub=subject, iss=ISSUER, iat=issued_s, exp=expires_s, jti=secrets.token_hex(16)
    )
    body = f"{_HEADER}.{_b64url(msgspec.json.encode(claims))}"
    signature = hmac.new(key, body.encode("ascii"), hashlib.sha256).digest()
    return f"{body}.{_b64url(signature)}"


@dataclass(frozen=True, slots=True)
class TokenPair:
    access_token: str
    refresh_token: str | None
    expires_at_ms: int
    token_id: str


class SessionDirectory:
    """The live access tokens handed to signed-in clients, by hash."""

    def __init__(
        self,
        store: Store,
        *,
        ttl_s: int = 3600,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._refresh_s = refresh_s
        self._clock = clock
        self._key = b""
        self._live: dict[str, tuple[str, int]] = {}  # hash -> (person token id, expiry ms)
        # Access tokens no longer live (revoked person token, expiry), kept a day: a run a
        # revoked token started still takes their appends (access_tokens.py, `linger_s`).
        self._dropped: dict[str, tuple[str, int]] = {}  # hash -> (person token id, at ms)
        self.reloads = Reloads(self.load, refresh_s, "signed-in sessions")

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def load(self) -> None:
        if not self._key:
            fresh = _b64url(secrets.token_bytes(32))
            stored = await self._store.server_secret(SIGNING_KEY, fresh, self._now_ms())
            self._key = stored.encode("ascii")
        live = await self._store.list_session_tokens(self._now_ms())
        before, now = self._live, self._now_ms()
        self._live = {t.token_hash: (t.token_id, t.expires_at_ms or 0) for t in live}
        self._remember_dropped(before, now)
        self.reloads.loaded()

    def _remember_dropped(self, before: dict[str, tuple[str, int]], now: int) -> None:
        for token_hash, (token_id, _) in before.items():
            if token_hash not in self._live:
                self._dropped.setdefault(token_hash, (token_id, now))
        self._dropped = {
            h: (t, at) for h, (t, at) in self._dropped.items() if now - at < 86_400_000
        }

    def dropped(self, credentials: str) -> str | None:
        """The person token an access token stood for, when it stopped being live lately."""
        found = self._dropped.get(secret_hash(credentials))
        return found[0] if found is not None else None

    def refresh(self) -> asyncio.Task[None] | None:
        """The reload a request must wait for first, if any (reloads.py)."""
        return self.reloads.refresh()

    async def close(self) -> None:
        await self.reloads.close()

    def principal(self, credentials: str) -> str | None:
        """The person token an access token stands for, while it is live."""
        found = self._live.get(secret_hash(credentials))
        if found is None:
            return None
        token_id, expires_ms = found
        return token_id if expires_ms > self._now_ms() else None

    def forget(self, token_id: str) -> None:
        """Drop a person token's access tokens at once (it was revoked in this process)."""
        before = self._live
        self._live = {h: v for h, v in self._live.items() if v[0] != token_id}
        self._remember_dropped(before, self._now_ms())

    async def mint(self, token_id: str, *, with_refresh: bool) -> TokenPair:
        """A new access token (and refresh token) for person token `token_id`, stored as
        hashes before it is handed out."""
        now_ms = self._now_ms()
        expires_ms = now_ms + self._ttl_s * 1000
        access = sign_access_token(
            self._key, f"{ISSUER}|{token_id}", now_ms // 1000, expires_ms // 1000
        )
        await self._store.add_session_token(
            SessionTokenRecord(
                token_hash=secret_hash(access),
                kind="access",
                token_id=token_id,
                created_at_ms=now_ms,
                expires_at_ms=expires_ms,
            )
        )
        refresh = None
        if with_refresh:
            refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
            await self._store.add_session_token(
                SessionTokenRecord(
                    token_hash=secret_hash(refresh),
                    kind="refresh",
                    token_id=token_id,
                    created_at_ms=now_ms,
                )
            )
        self._live[secret_hash(access)] = (token_id, expires_ms)
        return TokenPair(access, refresh, expires_ms, token_id)


class SignInFlow:
    """The steps of signing in, each a store read or write; the HTTP side is sign_in_page.py."""

    def __init__(self, store: Store, tokens: TokenDirectory, sessions: SessionDirectory) -> None:
        self._store = store
        self._tokens = tokens
        self._sessions = sessions

    def _now_ms(self) -> int:
        return self._sessions._now_ms()

    async def person_token(self, secret: str) -> tuple[str, str] | None:
        """(token id, name) of an active person token with this secret."""
        record = await self._store.find_access_token(secret_hash(secret))
        if record is None or record.revoked_at_ms is not None:
            return None
        return record.token_id, record.name

    async def complete(self, login_id: str, challenge: str, token_id: str) -> bool:
        """Record that a person signed in for `login_id`; False when it was used already."""
        saved = await self._store.record_sign_in(
            SignInRecord(
                login_id=login_id,
                challenge=challenge,
                token_id=token_id,
                signed_in_at_ms=self._now_ms(),
            )
        )
        return saved.outcome == "inserted"

    async def poll(self, login_id: str, verifier: str) -> TokenPair | None:
        """The client's tokens once a person signed in for `login_id` and `verifier` proves
        the challenge; None while nobody has (or for a wrong verifier: the same answer)."""
        now = self._now_ms()
        claimed = await self._store.claim_sign_in(
            login_id, pkce_challenge(verifier), now, now - SIGN_IN_TTL_MS
        )
        if claimed is None:
            return None
        record = await self._store.get_access_token(claimed.token_id)
        if record is None or record.revoked_at_ms is not None:
            return None
        log.info("token %r signed a client in", record.name)
        return await self._sessions.mint(claimed.token_id, with_refresh=True)

    async def refresh(self, refresh_token: str) -> TokenPair | None:
        found = await self._store.find_session_token(secret_hash(refresh_token), self._now_ms())
        if found is None or found.kind != "refresh":
            return None
        return await self._sessions.mint(found.token_id, with_refresh=False)

    async def exchange(self, secret: str) -> TokenPair | None:
        """The CLI's `CURSOR_API_KEY=cbk_…`: an access token (and refresh token) at once."""
        person = await self.person_token(secret)
        if person is None:
            return None
        return await self._sessions.mint(person[0], with_refresh=True)


class Credentials:
    """The transport's Authenticator: person tokens, and the access tokens signed-in clients
    hold (same person, same limits: the principal is the person token's id)."""

    def __init__(self, tokens: TokenDirectory, sessions: SessionDirectory) -> None:
        self._tokens = tokens
        self._sessions = sessions

    def required(self) -> bool:
        return self._tokens.required()

    def principal(self, credentials: str) -> str | None:
        return self._tokens.principal(credentials) or self._sessions.principal(credentials)

    def person(self, principal: str) -> str:
        return self._tokens.person(principal)

    def refresh(self) -> Awaitable[object] | None:
        """What a request waits for before its credentials are checked: the reloads of a list
        older than its refresh time (none on most requests)."""
        tokens, sessions = self._tokens.refresh(), self._sessions.refresh()
        if tokens is None or sessions is None:
            return tokens or sessions
        return asyncio.gather(tokens, sessions)

    def lingering(self, credentials: str) -> str | None:
        """A revoked person token, or an access token of one, while runs it started may still
        be going (their appends are taken: access_tokens.TokenDirectory.lingering)."""
        found = self._tokens.lingering(credentials)
        if found is not None:
            return found
        token_id = self._sessions.dropped(credentials)
        return token_id if token_id is not None and self._tokens.revoked_lately(token_id) else None


__all__ = [
    "PATH_KEY",
    "SIGNING_KEY",
    "Credentials",
    "SessionDirectory",
    "SignInFlow",
    "TokenPair",
    "pkce_challenge",
    "sign_access_token",
]
