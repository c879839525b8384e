"""A client that signs in as the Cursor IDE and CLI do (docs/clients.md), and a person who
signs in on the page in a browser-like way.

The client: makes a verifier (32 random bytes, base64url), its challenge (base64url SHA-256)
and a login id (a UUID); opens `{website}/loginDeepControl?challenge=&uuid=&mode=login&
redirectTarget=cli`; polls `POST {api}/auth/poll {uuid, verifier}` with a growing delay while
it answers 404 "Not found" (falling back to GET with the query when POST is not served); reads
the access token's `exp` and refreshes at `max(exp - 5 min, issued + half its life)` through
`POST {api}/oauth/token {grant_type, client_id, refresh_token}`. The shapes are the public
SDK's and the peers' (docs/clients.md lists which are [U] for the IDE itself).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx

CLIENT_ID = "cursor-ide"  # the IDE sends its own OAuth client id; the server needs none


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt_claims(token: str) -> dict[str, Any]:
    """The payload of a JWT-shaped token, as a client reads it for `exp` (no verification)."""
    _, payload, _ = token.split(".")
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


@dataclass
class IdeLike:
    website: str
    api: str
    verifier: str = field(default_factory=lambda: _b64url(secrets.token_bytes(32)))
    login_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    access_token: str = ""
    refresh_token: str = ""
    polls: int = 0

    @property
    def challenge(self) -> str:
        return _b64url(hashlib.sha256(self.verifier.encode()).digest())

    def login_url(self, target: str = "cli") -> str:
        query = urlencode(
            {
                "challenge": self.challenge,
                "uuid": self.login_id,
                "mode": "login",
                "redirectTarget": target,
            }
        )
        return f"{self.website}/loginDeepControl?{query}"

    async def poll_once(self, http: httpx.AsyncClient, *, use_get: bool = False) -> httpx.Response:
        self.polls += 1
        if use_get:
            query = urlencode({"uuid": self.login_id, "verifier": self.verifier})
            return await http.get(
                f"{self.api}/auth/poll?{query}", headers={"accept": "application/json"}
            )
        return await http.post(
            f"{self.api}/auth/poll",
            json={"uuid": self.login_id, "verifier": self.verifier},
            headers={"accept": "application/json"},
        )

    async def poll(
        self, http: httpx.AsyncClient, *, timeout: float = 20.0, base_delay: float = 0.05
    ) -> bool:
        """Poll until signed in (True) or `timeout` (False), backing off as the client does."""
        deadline = time.monotonic() + timeout
        attempt = 0
        use_get = False
        while time.monotonic() < deadline:
            reply = await self.poll_once(http, use_get=use_get)
            if reply.status_code == 404 and not use_get and reply.text.strip() != "Not found":
                use_get = True  # the server has no POST /auth/poll
                continue
            if reply.status_code == 200:
                body = reply.json()
                self.access_token, self.refresh_token = body["accessToken"], body["refreshToken"]
                return True
            assert reply.status_code == 404, (reply.status_code, reply.text)
            await asyncio.sleep(min(base_delay * 1.2**attempt, 1.0))
            attempt += 1
        return False

    def refresh_at(self) -> float:
        claims = jwt_claims(self.access_token)
        issued, expires = float(claims["iat"]), float(claims["exp"])
        return max(expires - 300, issued + (expires - issued) / 2)

    async def refresh(self, http: httpx.AsyncClient) -> httpx.Response:
        reply = await http.post(
            f"{self.api}/oauth/token",
            json={
                "grant_type": "refresh_token",
                "client_id": CLIENT_ID,
                "refresh_token": self.refresh_token,
            },
        )
        if reply.status_code == 200 and not reply.json().get("shouldLogout"):
            self.access_token = reply.json()["access_token"]
        return reply

    async def refresh_if_due(self, http: httpx.AsyncClient, now: float) -> bool:
        if now < self.refresh_at():
            return False
        reply = await self.refresh(http)
        return reply.status_code == 200


_HIDDEN = re.compile(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">')


async def person_signs_in(http: httpx.AsyncClient, login_url: str, token: str) -> httpx.Response:
    """A person opens the login URL in a browser and submits their token with the form."""
    page = await http.get(login_url)
    assert page.status_code == 200, page.text
    fields = dict(_HIDDEN.findall(page.text))
    assert set(fields) == {"uuid", "challenge", "csrf"}, fields
    origin = str(page.url.copy_with(path="/", query=None)).rstrip("/")
    return await http.post(
        "/loginDeepControl",
        data={**fields, "token": token},
        headers={"origin": origin},
    )


__all__ = ["IdeLike", "jwt_claims", "person_signs_in"]
