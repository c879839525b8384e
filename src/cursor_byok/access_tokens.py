"""Tokens per person: minting, hashing, and the directory the server authenticates against.

A token's secret is `cbk_` + 32 random bytes (urlsafe base64, 256 bits from `secrets`). Only
its SHA-256 is stored. A slow KDF (scrypt, argon2) protects guessable passwords; a 256-bit
random secret has nothing to guess, so a KDF would only add its cost to every request, and a
salted hash could not be looked up by value. SHA-256 of the secret is the lookup key: a
database leak gives hashes that open nothing.

The directory keeps the hashes of the active tokens in memory (the transport checks
credentials synchronously, before it reads a body) and reloads them from the store when a
request comes and the list is older than `refresh_s` seconds (reloads.py: never while the
server is idle), so a token added or revoked by `cursor-byok token` (another process,
another replica, another worker) is seen within that time. The runtime reads the token again
before each model call (transport/runtime/access.py): a revoked token's next call is refused
at once.

Who must authenticate is the stored access mode (`server_settings.access`, written by
`cursor-byok token open|close`), read on the same refresh: `closed`, every request needs a
token; `open`, a request without one is let in (a loopback server; a non-loopback one always
has `auth_token`). Never set, it is closed once any token was ever added: revoking the last
token does not open the server.

A token revoked while a run it started is still going keeps that run's shim appends (a tool's
result, a cancel) for `linger_s` after its revocation, so the run ends at its next model
call instead of waiting out the tool timeout; new runs and reopened streams are refused.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable

from .reloads import Reloads
from .store.api import AccessTokenRecord, Store

log = logging.getLogger("cursor_byok.tokens")

SECRET_PREFIX = "cbk_"
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")  # the whole name: fullmatch
REFRESH_S = 2.0
ACCESS_SETTING = "access"  # the server_settings row `cursor-byok token open|close` writes


class Access(enum.Enum):
    """Whether a request without a token is let in (auth_token, when set, is needed anyway)."""

    OPEN = "open"
    CLOSED = "closed"


def access_of(setting: str | None, tokens_ever: bool) -> Access:
    """The access mode from the stored setting: as an operator set it; never set, closed once
    a token was ever added (revoked ones count: revoking the last token keeps it closed). A
    value this version does not know closes it."""
    if setting is None:
        return Access.CLOSED if tokens_ever else Access.OPEN
    return Access.OPEN if setting == Access.OPEN.value else Access.CLOSED


def valid_name(name: str) -> bool:
    return TOKEN_NAME.fullmatch(name) is not None


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_token_id() -> str:
    """A stable id for a token (what runs, calls and the principal header carry)."""
    return "tok_" + secrets.token_hex(8)


def _access_reason(
    access: Access, setting: str | None, tokens: tuple[AccessTokenRecord, ...]
) -> str:
    active = sum(1 for t in tokens if t.revoked_at_ms is None)
    if setting not in (None, *(a.value for a in Access)):
        why = f"the stored value {setting!r} is unknown: closed to be safe"
    elif setting is None:
        why = "tokens were added" if tokens else "no token was ever added"
    else:
        why = "as cursor-byok token open|close set it"
    effect = (
        "requests without a token are let in"
        if access is Access.OPEN
        else "every request needs a token"
    )
    return f"{why}; {active} active token(s): {effect}"


class TokenDirectory:
    """The active person tokens, as the transport's `Authenticator` wants them."""

    def __init__(
        self,
        store: Store,
        refresh_s: float = REFRESH_S,
        *,
        linger_s: float = 0.0,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._linger_ms = int(linger_s * 1000)
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._by_hash: dict[str, str] = {}  # secret hash -> token id
        self._revoked: dict[str, tuple[str, int]] = {}  # hash -> (token id, revoked at ms)
        self._revoked_at: dict[str, int] = {}  # token id -> revoked at ms
        self._names: dict[str, str] = {}  # token id -> name (revoked ones too)
        self._persons: dict[str, str] = {}  # token id -> its person (revoked ones too)
        self.reloads = Reloads(self.load, refresh_s, "tokens")
        self.access: Access | None = None  # None until the first load

    async def load(self) -> None:
        tokens = await self._store.list_access_tokens(include_revoked=True)
        setting = await self._store.get_server_setting(ACCESS_SETTING)
        self._names = {t.token_id: t.name for t in tokens}
        self._persons = {t.token_id: t.person for t in tokens}
        self._by_hash = {t.secret_hash: t.token_id for t in tokens if t.revoked_at_ms is None}
        self._revoked = {
            t.secret_hash: (t.token_id, t.revoked_at_ms)
            for t in tokens
            if t.revoked_at_ms is not None
        }
        self._revoked_at = {token_id: at_ms for token_id, at_ms in self._revoked.values()}
        access = access_of(setting, bool(tokens))
        # Said at start when tokens are in play, and whenever it changes after.
        if access is not self.access and (self.access is not None or setting or tokens):
            log.info("access %s (%s)", access.value, _access_reason(access, setting, tokens))
        self.access = access
        self.reloads.loaded()

    def refresh(self) -> asyncio.Task[None] | None:
        """The reload a request must wait for first, if any (reloads.py)."""
        return self.reloads.refresh()

    async def close(self) -> None:
        await self.reloads.close()

    # -- transport.connect.Authenticator ------------------------------------------------------

    def required(self) -> bool:
        return self.access is not Access.OPEN

    def principal(self, credentials: str) -> str | None:
        return self._by_hash.get(secret_hash(credentials))

    def person(self, principal: str) -> str:
        """The person a token id belongs to (the first token of its chain of rotations): the
        owner of the runs and conversations it starts. A token not loaded yet: itself."""
        return self._persons.get(principal, principal)

    def lingering(self, credentials: str) -> str | None:
        """The id of the token these credentials were, when it was revoked no longer than
        `linger_s` ago: the transport still takes its appends to runs it started that are
        still going (and nothing else)."""
        found = self._revoked.get(secret_hash(credentials))
        return found[0] if found is not None and self.revoked_lately(found[0]) else None

    def revoked_lately(self, token_id: str) -> bool:
        """Whether the token was revoked no longer than `linger_s` ago."""
        at_ms = self._revoked_at.get(token_id)
        return at_ms is not None and self._now_ms() - at_ms <= self._linger_ms

    # -- for metrics and the dashboard ----------------------------------------------------------

    def name_of(self, token_id: str) -> str | None:
        return self._names.get(token_id)

    def remember(self, record: AccessTokenRecord) -> None:
        """Take a token in at once (tests, or a token added through this process)."""
        self._names[record.token_id] = record.name
        self._persons[record.token_id] = record.person
        if record.revoked_at_ms is None:
            self._by_hash[record.secret_hash] = record.token_id


__all__ = [
    "ACCESS_SETTING",
    "REFRESH_S",
    "SECRET_PREFIX",
    "TOKEN_NAME",
    "Access",
    "TokenDirectory",
    "access_of",
    "new_secret",
    "new_token_id",
    "secret_hash",
    "valid_name",
]
