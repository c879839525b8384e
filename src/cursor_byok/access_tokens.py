"""Tokens per person: minting, hashing, and the directory the server authenticates against.

A token's secret is `cbk_` + 32 random bytes (urlsafe base64, 256 bits from `secrets`). Only
its SHA-256 is stored. A slow KDF (scrypt, argon2) protects guessable passwords; a 256-bit
random secret has nothing to guess, so a KDF would only add its cost to every request, and a
salted hash could not be looked up by value. SHA-256 of the secret is the lookup key: a
database leak gives hashes that open nothing.

The directory keeps the hashes of the active tokens in memory (the transport checks
credentials synchronously, before it reads a body) and reloads them from the store every
`refresh_s` seconds, so a token added or revoked by `cursor-byok token` (another process,
another replica) is seen within that time. The runtime reads the token again before each model
call (transport/runtime/access.py): a revoked token's next call is refused at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import secrets

from .store.api import AccessTokenRecord, Store

log = logging.getLogger("cursor_byok.tokens")

SECRET_PREFIX = "cbk_"
TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
REFRESH_S = 2.0


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_token_id() -> str:
    """A stable id for a token (what runs, calls and the principal header carry)."""
    return "tok_" + secrets.token_hex(8)


class TokenDirectory:
    """The active person tokens, as the transport's `Authenticator` wants them."""

    def __init__(self, store: Store, refresh_s: float = REFRESH_S) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._by_hash: dict[str, str] = {}  # secret hash -> token id
        self._names: dict[str, str] = {}  # token id -> name (revoked ones too)
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        tokens = await self._store.list_access_tokens(include_revoked=True)
        self._names = {t.token_id: t.name for t in tokens}
        self._by_hash = {t.secret_hash: t.token_id for t in tokens if t.revoked_at_ms is None}

    def start(self) -> None:
        """Reload every `refresh_s` seconds until `close`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._keep_loading())

    async def _keep_loading(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.load()
            except Exception as exc:  # keep the last list; the next round tries again
                log.warning("could not reload the tokens: %s", exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- transport.connect.Authenticator ------------------------------------------------------

    def required(self) -> bool:
        return bool(self._by_hash)

    def principal(self, credentials: str) -> str | None:
        return self._by_hash.get(secret_hash(credentials))

    # -- for metrics and the dashboard ----------------------------------------------------------

    def name_of(self, token_id: str) -> str | None:
        return self._names.get(token_id)

    def remember(self, record: AccessTokenRecord) -> None:
        """Take a token in at once (tests, or a token added through this process)."""
        self._names[record.token_id] = record.name
        if record.revoked_at_ms is None:
            self._by_hash[record.secret_hash] = record.token_id


__all__ = [
    "REFRESH_S",
    "SECRET_PREFIX",
    "TOKEN_NAME",
    "TokenDirectory",
    "new_secret",
    "new_token_id",
    "secret_hash",
]
