"""The HTTP side of signing in (transport.connect.app.PlainRoutes): the sign-in page, the
client's poll, the refresh route and the CLI's key exchange (docs/clients.md).

    GET  /loginDeepControl?uuid=&challenge=   the page: paste your cbk_ token
    POST /loginDeepControl                    the form (CSRF: a SameSite=Strict cookie that
                                              must match the form's field; same-origin only)
    POST /auth/poll {uuid, verifier}          404 "Not found" until signed in, then the tokens
    GET  /auth/poll?uuid=&verifier=           the same, for clients that poll with GET
    POST /oauth/token {refresh_token}         a new access token
    POST /auth/exchange_user_api_key          Authorization: Bearer cbk_… -> the tokens
    POST /auth/logout                         204

Every route is rate-limited per client address. Nothing here logs a query string, a body or a
token, and no error repeats what was sent. The page is plain HTML with no external asset.
"""

from __future__ import annotations

import hmac
import html
import json
import re
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from .sign_in import SignInFlow, TokenPair
from .transport.connect.app import PlainRequest

LOGIN_PATH = "/loginDeepControl"
POLL_PATH = "/auth/poll"
REFRESH_PATH = "/oauth/token"
EXCHANGE_PATH = "/auth/exchange_user_api_key"
LOGOUT_PATH = "/auth/logout"
_ROUTES = {
    (LOGIN_PATH, "GET"),
    (LOGIN_PATH, "HEAD"),
    (LOGIN_PATH, "POST"),
    (POLL_PATH, "GET"),
    (POLL_PATH, "POST"),
    (REFRESH_PATH, "POST"),
    (EXCHANGE_PATH, "POST"),
    (LOGOUT_PATH, "POST"),
}
CSRF_COOKIE = "cbk_sign_in"
_LOGIN_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")
_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{20,128}$")
_VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{20,256}$")
FORM = "POST " + LOGIN_PATH
# Requests per client address per minute: the form and the exchange take person tokens, so
# they are the tightest (a token has 256 random bits: this bounds the noise, not the odds).
LIMITS = {
    FORM: 10,
    LOGIN_PATH: 60,
    EXCHANGE_PATH: 30,
    REFRESH_PATH: 60,
    POLL_PATH: 240,
    LOGOUT_PATH: 60,
}


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


class RateLimiter:
    """At most `limit` requests per `window_s` per (route, address); memory bounded by
    `max_keys` (the least recently seen addresses are forgotten first)."""

    def __init__(
        self,
        window_s: float = 60.0,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window_s = window_s
        self._max_keys = max_keys
        self._clock = clock
        self._seen: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def allow(self, route: str, address: str, limit: int) -> bool:
        now = self._clock()
        key = (route, address)
        times = self._seen.pop(key, None) or deque()
        while times and times[0] <= now - self._window_s:
            times.popleft()
        allowed = len(times) < limit
        if allowed:
            times.append(now)
        self._seen[key] = times
        while len(self._seen) > self._max_keys:
            self._seen.popitem(last=False)
        return allowed


_PAGE_HEADERS: tuple[tuple[str, str], ...] = (
    ("cache-control", "no-store"),
    (
        "content-security-policy",
        "default-src 'none'; style-src 'unsafe-inline'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
)
_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:34em;margin:3em auto;padding:0 1em;"
    "color:#222}input[type=password]{width:100%;font:inherit;padding:.4em;box-sizing:border-box}"
    "button{font:inherit;padding:.4em 1.2em;margin-top:.8em}.note{color:#555;font-size:.9em}"
    ".error{color:#a00}"
)


def _page(title: str, body_html: str, status: int = 200, *, cookie: str | None = None) -> Reply:
    text = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
        f'</title><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body_html}"
        "</body></html>"
    )
    headers: tuple[tuple[str, str], ...] = _PAGE_HEADERS
    if cookie is not None:
        headers += (
            (
                "set-cookie",
                f"{CSRF_COOKIE}={cookie}; Path={LOGIN_PATH}; Max-Age=900; HttpOnly; "
                "SameSite=Strict",
            ),
        )
    return Reply(status, "text/html; charset=utf-8", text.encode(), headers)


def _json(status: int, value: object) -> Reply:
    return Reply(
        status, "application/json", json.dumps(value).encode(), (("cache-control", "no-store"),)
    )


def _not_found() -> Reply:
    # The exact body clients recognise as "not signed in yet" (they keep polling).
    return Reply(404, "text/plain; charset=utf-8", b"Not found", (("cache-control", "no-store"),))


def _form(query: str) -> dict[str, str]:
    try:
        parsed = parse_qs(query, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return {}
    return {k: v[0] for k, v in parsed.items() if v}


def _body_fields(request: PlainRequest) -> dict[str, str]:
    """A JSON object's string fields, or a form's (whichever the body is); {} otherwise."""
    raw = request.body.decode("utf-8", "replace").strip()
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return (
            {k: v for k, v in value.items() if isinstance(v, str)}
            if isinstance(value, dict)
            else {}
        )
    return _form(raw)


def _same_origin(request: PlainRequest) -> bool:
    origin = request.headers.get("origin")
    if origin is None:
        return True  # no Origin: not a browser's cross-site form post (those carry one)
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def _bearer(request: PlainRequest) -> str:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else ""


class SignInRoutes:
    def __init__(self, flow: SignInFlow, limiter: RateLimiter | None = None) -> None:
        self._flow = flow
        self._limiter = limiter or RateLimiter()

    def handles(self, method: str, path: str) -> bool:
        return (path, method) in _ROUTES

    async def handle(self, request: PlainRequest) -> Reply:
        path = request.path
        route = FORM if path == LOGIN_PATH and request.method == "POST" else path
        if not self._limiter.allow(route, request.client, LIMITS.get(route, 60)):
            if path == LOGIN_PATH:
                return _page("Too many attempts", "<p>Wait a minute, then try again.</p>", 429)
            return _json(429, {"error": {"message": "too many requests; try again in a minute"}})
        if path == LOGIN_PATH:
            if request.method == "POST":
                return await self._submit(request)
            return self._show(request)
        if path == POLL_PATH:
            fields = _body_fields(request) if request.method == "POST" else _form(request.query)
            return await self._poll(fields.get("uuid", ""), fields.get("verifier", ""))
        if path == REFRESH_PATH:
            return await self._refresh(_body_fields(request))
        if path == EXCHANGE_PATH:
            return await self._exchange(_bearer(request))
        return Reply(204, "text/plain", b"")

    # -- the page --------------------------------------------------------------------------

    def _show(self, request: PlainRequest, *, error: str = "", status: int = 200) -> Reply:
        fields = _form(request.query) if request.method != "POST" else _body_fields(request)
        login_id, challenge = fields.get("uuid", ""), fields.get("challenge", "")
        if not (_LOGIN_ID.match(login_id) and _CHALLENGE.match(challenge)):
            return _page(
                "Sign in to cursor-byok",
                "<p class=error>This sign-in link is incomplete. Start signing in from your "
                "editor or the <code>agent</code> CLI again: it opens this page with the "
                "link's <code>uuid</code> and <code>challenge</code>.</p>",
                400,
            )
        csrf = secrets.token_urlsafe(24)
        message = f"<p class=error>{html.escape(error)}</p>" if error else ""
        form = (
            f"{message}<p>Paste the token your server's operator gave you (it starts with "
            "<code>cbk_</code>). Your editor then signs in as you.</p>"
            f'<form method="post" action="{LOGIN_PATH}" autocomplete="off">'
            f'<input type="hidden" name="uuid" value="{html.escape(login_id)}">'
            f'<input type="hidden" name="challenge" value="{html.escape(challenge)}">'
            f'<input type="hidden" name="csrf" value="{csrf}">'
            '<label for="token">Your token</label>'
            '<input type="password" id="token" name="token" required autofocus '
            'spellcheck="false" autocapitalize="off">'
            '<button type="submit">Sign in</button></form>'
            "<p class=note>Only continue if you just started signing in from your own editor "
            "or terminal. Whoever started it receives access as you.</p>"
        )
        return _page("Sign in to cursor-byok", form, status, cookie=csrf)

    async def _submit(self, request: PlainRequest) -> Reply:
        fields = _body_fields(request)
        cookie = SimpleCookie()
        try:
            cookie.load(request.headers.get("cookie", ""))
        except Exception:
            cookie = SimpleCookie()
        sent = cookie[CSRF_COOKIE].value if CSRF_COOKIE in cookie else ""
        form_csrf = fields.get("csrf", "")
        if (
            not _same_origin(request)
            or not sent
            or not hmac.compare_digest(sent.encode(), form_csrf.encode())
        ):
            return _page(
                "Sign in to cursor-byok",
                "<p class=error>This form expired or was sent from another page. Open the "
                "sign-in link from your editor again.</p>",
                403,
            )
        login_id, challenge = fields.get("uuid", ""), fields.get("challenge", "")
        if not (_LOGIN_ID.match(login_id) and _CHALLENGE.match(challenge)):
            return self._show(request)
        person = await self._flow.person_token(fields.get("token", "").strip())
        if person is None:
            return self._show(
                request,
                error="That token is not active on this server. Check it and paste it again.",
                status=401,
            )
        if not await self._flow.complete(login_id, challenge, person[0]):
            return _page(
                "Sign in to cursor-byok",
                "<p class=error>This sign-in link was used already. Start again from your "
                "editor.</p>",
                409,
            )
        return _page(
            "Signed in",
            f"<p>You are signed in as <strong>{html.escape(person[1])}</strong>. Go back to "
            "your editor; it finishes signing in within a few seconds. You can close this "
            "page.</p>",
        )

    # -- the client's routes ---------------------------------------------------------------

    async def _poll(self, login_id: str, verifier: str) -> Reply:
        if not (_LOGIN_ID.match(login_id) and _VERIFIER.match(verifier)):
            return _not_found()
        pair = await self._flow.poll(login_id, verifier)
        return _not_found() if pair is None else _json(200, _tokens(pair))

    async def _refresh(self, fields: dict[str, str]) -> Reply:
        token = fields.get("refresh_token", "")
        pair = await self._flow.refresh(token) if token else None
        if pair is None:
            return _json(
                401,
                {
                    "error": "invalid_grant",
                    "error_description": "the refresh token is not valid; sign in again",
                    "shouldLogout": True,
                },
            )
        return _json(
            200,
            {
                "access_token": pair.access_token,
                "id_token": pair.access_token,
                "shouldLogout": False,
            },
        )

    async def _exchange(self, secret: str) -> Reply:
        pair = await self._flow.exchange(secret) if secret else None
        if pair is None:
            return _json(
                401, {"error": {"message": "that API key is not an active token of this server"}}
            )
        return _json(200, _tokens(pair))


def _tokens(pair: TokenPair) -> dict[str, str]:
    body = {"accessToken": pair.access_token, "authId": f"cursor-byok|{pair.token_id}"}
    if pair.refresh_token is not None:
        body["refreshToken"] = pair.refresh_token
    return body


__all__ = ["LIMITS", "LOGIN_PATH", "POLL_PATH", "RateLimiter", "Reply", "SignInRoutes"]
