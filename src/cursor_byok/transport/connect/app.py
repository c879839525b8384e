"""The HTTP side: a raw ASGI app speaking Connect for one `Service` (service.py).

Routes (see docs/transport.md):
  POST <service.run_path>       bidi stream (HTTP/2, full duplex)           streams.py
  POST <service.runsse_path>    server stream of the HTTP/1.1 shim          streams.py
  POST <service.append_path>    unary, one client message of the shim
  POST <any unary path the service has>                                    answered by the service
  GET  /healthz                 200 once ready (no auth)
  GET  <extra routes>           metrics, dashboard (the composition root's)
  *    <plain routes>           sign-in pages and /auth/* (the composition root's; they check
                                credentials of their own, so no bearer token is asked)

Authentication (a bearer token) is checked from the headers before any body is read: the
server's own `auth_token`, or a credential the `Authenticator` knows (a person token), whose
principal then travels with the run (sessions.PRINCIPAL_HEADER, set here and only here).
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .clients import ClientAddresses, IPNetwork, allowance_key
from .envelopes import ConnectError
from .http import (
    CONNECT_PROTO,
    REPEATED_AUTHORIZATION,
    ClientGone,
    Receive,
    Scope,
    Send,
    UnaryCodec,
    auth_error_text,
    base_type,
    headers_of,
    plain,
    read_body,
    unary_error,
    unary_ok,
    unary_payload,
    unsupported_media,
)
from .relay import AppendRelay, RelayedAppends
from .rsgi import WRITE_NOWAIT
from .service import Codec, Service
from .session_registry import SessionRegistry
from .sessions import PRINCIPAL_HEADER, RunHandler, TransportLimits
from .streams import CANCELED, UNSUPPORTED_MEDIA, Streams

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
UNKNOWN_RPC = "other"  # the RPC label of a path no RPC has

_UNARY_CODECS: dict[str, UnaryCodec] = {
    "application/proto": "proto",
    "application/x-protobuf": "proto",
    "application/json": "json",
    "application/connect+proto": "connect",
    "application/grpc-web+proto": "grpc-web",
    "application/grpc-web": "grpc-web",
}


class HttpReply(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def content_type(self) -> str: ...

    @property
    def body(self) -> bytes: ...

    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...


class ExtraRoutes(Protocol):
    """Plain GET pages served beside the RPCs (metrics, dashboard) and an RPC outcome hook.
    Implemented by the composition root; the transport only routes to it."""

    def handles(self, path: str) -> bool: ...

    def is_public(self, path: str) -> bool: ...

    def is_personal(self, path: str) -> bool:
        """A page a person's token may read too: its own part of it (`viewer`)."""
        ...

    async def get(self, path: str, query: str = "", viewer: str | None = None) -> HttpReply | None:
        """The page; `viewer` the person whose own part it shows (None: the operator's)."""
        ...

    def observe_rpc(self, path: str, outcome: str) -> None:
        """Once per RPC request (unary, Run, RunSSE, BidiAppend): "ok", the Connect code it
        ended with, "canceled" (the client went away first) or "unsupported_media_type"."""
        ...


@dataclass(frozen=True, slots=True)
class PlainRequest:
    """A request to a plain route: its body whole (at most `MAX_PLAIN_BODY` bytes)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes
    client: str  # the peer's address ("" when the server does not know it)


class PlainRoutes(Protocol):
    """Plain HTTP routes beside the RPCs that authenticate by themselves (the sign-in flow).
    The transport reads their body (bounded) and never logs their query or body."""

    def handles(self, method: str, path: str) -> bool: ...

    async def handle(self, request: PlainRequest) -> HttpReply: ...


MAX_PLAIN_BODY = 64 * 1024


class Authenticator(Protocol):
    """Bearer credentials other than the server's own token (the composition root's person
    tokens). Synchronous: it answers from memory, before any body is read."""

    def required(self) -> bool:
        """Whether a request must authenticate even when the server has no `auth_token`."""
        ...

    def principal(self, credentials: str) -> str | None:
        """Who these credentials are (a stable id, never the secret), or None."""
        ...

    def person(self, principal: str) -> str:
        """The person a principal belongs to (the same across a token's rotations): runs of
        one person may join each other's streams, no one else's
        (session_registry.SessionRegistry)."""
        ...

    def lingering(self, credentials: str) -> str | None:
        """Who these credentials were, when they were revoked recently enough that a run they
        started may still be going; None otherwise. Only such a run's appends take them."""
        ...

    def refresh(self) -> Awaitable[object] | None:
        """What to wait for before the credentials of a request are checked (its lists
        reloaded when too old); None, the usual answer, when nothing: no coroutine per
        request."""
        ...


class ConnectApp:
    """The ASGI application. `handler` runs each agent run (see sessions.RunHandler)."""

    def __init__(
        self,
        service: Service,
        handler: RunHandler,
        *,
        auth_token: str | None = None,
        runsse_content_type: str = "text/event-stream",
        limits: TransportLimits | None = None,
        routes: ExtraRoutes | None = None,
        authenticator: Authenticator | None = None,
        relay: AppendRelay | None = None,
        plain_routes: PlainRoutes | None = None,
        trusted_proxies: Sequence[IPNetwork] = (),
    ) -> None:
        self.service = service
        # Behind these proxies the client is the X-Forwarded-For hop they appended (clients.py).
        self.addresses = ClientAddresses(trusted_proxies)
        self.plain_routes = plain_routes
        self.authenticator = authenticator
        self.routes = routes
        self.limits = limits or TransportLimits()
        self.registry = SessionRegistry(
            handler,
            self.limits,
            error_details_type=service.error_details_type,
            parse=service.parse_client,
            person_of=self._person_of,
        )
        # Replicas: appends go through the database (relay.py); None: straight to the session.
        self.relayed = RelayedAppends(relay, self.registry, service.parse_client) if relay else None
        self.streams = Streams(
            service, self.registry, self.limits, runsse_content_type, relayed=self.relayed
        )
        self.ready = False
        self._closing: asyncio.Task[None] | None = None
        self._token = auth_token.encode() if auth_token else None

    # -- entry --------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        if not self.ready:  # served without lifespan events
            self.registry.start()
            self.ready = True
        path: str = scope["path"]
        method: str = scope["method"]
        headers = headers_of(scope)
        headers.pop(PRINCIPAL_HEADER, None)  # only this app says who a request is
        if self.authenticator is not None and (reload := self.authenticator.refresh()):
            await reload
        principal = self._principal(headers)
        if principal:
            headers[PRINCIPAL_HEADER] = principal
        service = self.service
        peer = scope.get("client")
        address = self.addresses.address(peer[0] if peer else "", scope["headers"])
        # Whose allowance its runs count against: a person by token, else an address.
        client = allowance_key(principal, address)
        try:
            if path == HEALTH_PATH:
                await self._health(method, send)
            elif self.plain_routes is not None and self.plain_routes.handles(method, path):
                await self._plain(scope, receive, send, headers, address)
            elif method in ("GET", "HEAD") and self.routes and self.routes.handles(path):
                await self._extra(path, scope, send, headers)
            elif method != "POST":
                await plain(send, 404 if method in ("GET", "HEAD") else 405, b"not found\n")
            elif path == service.run_path:
                write_nowait = scope.get("extensions", {}).get(WRITE_NOWAIT)
                outcome = CANCELED  # unless the stream returns: the client went away
                try:
                    outcome = await self.streams.run(
                        receive, send, headers, self.authorized(headers), write_nowait, client
                    )
                finally:
                    self._observe(path, outcome)
            elif path == service.runsse_path:
                outcome = CANCELED
                try:
                    outcome = await self.streams.runsse(
                        receive, send, headers, self.authorized(headers), client
                    )
                finally:
                    self._observe(path, outcome)
            else:
                await self._unary(path, receive, send, headers, client)
        except ClientGone:
            log.debug("client went away: %s", path)

    def start(self) -> None:
        """Ready to serve (the server calls this once it listens)."""
        self.registry.start()
        self.ready = True

    async def shutdown(self) -> None:
        """End every run (SessionRegistry.close); once, however often it is awaited."""
        self.ready = False
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self.registry.close())
        await asyncio.shield(self._closing)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _extra(self, path: str, scope: Scope, send: Send, headers: dict[str, str]) -> None:
        assert self.routes is not None
        viewer = None
        principal = headers.get(PRINCIPAL_HEADER, "")
        if self.routes.is_personal(path) and principal and self.authorized(headers):
            viewer = self._person_of(principal)  # a person's token: their own part of it
        elif not (self.routes.is_public(path) or self.operator(headers)):
            await plain(send, 401, auth_error_text(headers).encode() + b"\n")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        reply = await self.routes.get(path, query, viewer)
        if reply is None:
            await plain(send, 404, b"not found\n")
            return
        head = [(b"content-type", reply.content_type.encode("latin-1"))]
        head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": reply.status, "headers": head})
        await send({"type": "http.response.body", "body": reply.body, "more_body": False})

    async def _plain(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], peer: str
    ) -> None:
        assert self.plain_routes is not None
        try:
            declared = int(headers.get("content-length", "0") or 0)
        except ValueError:
            declared = 0
        if declared > MAX_PLAIN_BODY:
            await plain(send, 413, b"request body too large\n")
            return
        body = b""
        if scope["method"] not in ("GET", "HEAD"):
            try:
                body = await read_body(receive, MAX_PLAIN_BODY)
            except ConnectError:
                await plain(send, 413, b"request body too large\n")
                return
        request = PlainRequest(
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=headers,
            body=body,
            client=peer,
        )
        reply = await self.plain_routes.handle(request)
        head = [(b"content-type", reply.content_type.encode("latin-1"))]
        head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": reply.status, "headers": head})
        await send({"type": "http.response.body", "body": reply.body, "more_body": False})

    def _observe(self, path: str, outcome: str) -> None:
        if self.routes is not None:
            self.routes.observe_rpc(path, outcome)

    async def _health(self, method: str, send: Send) -> None:
        if method not in ("GET", "HEAD"):
            await plain(send, 405, b"method not allowed\n")
        elif self.ready:
            await plain(send, 200, b"ok\n")
        else:
            await plain(send, 503, b"starting\n")

    def authorized(self, headers: Mapping[str, str]) -> bool:
        """Whether the request's headers carry the configured bearer token or a credential the
        authenticator knows (when either is required). A request with more than one
        Authorization header never is, token or not."""
        if headers.get("authorization") == REPEATED_AUTHORIZATION:
            return False
        required = self.authenticator is not None and self.authenticator.required()
        if self._token is None and not required:
            return True
        credentials = _bearer(headers)
        if credentials is None:
            return False
        if self._token is not None and hmac.compare_digest(
            credentials.encode("latin-1"), self._token
        ):
            return True
        return self._principal(headers) is not None

    def operator(self, headers: Mapping[str, str]) -> bool:
        """Whether the request may read the operator's pages (metrics, dashboard): with an
        `auth_token`, only that token opens them (a person token shows a team's usage to no
        one); without one, whoever may use the server."""
        if self._token is None:
            return self.authorized(headers)
        return self.authorized(headers) and self._principal(headers) is None

    def _person_of(self, principal: str) -> str:
        """The person of a principal ("": the operator's, or no token at all)."""
        if not principal or self.authenticator is None:
            return principal
        return self.authenticator.person(principal)

    def _principal(self, headers: Mapping[str, str]) -> str | None:
        """The principal of a person token among the headers, if they carry one."""
        if self.authenticator is None or headers.get("authorization") == REPEATED_AUTHORIZATION:
            return None
        credentials = _bearer(headers)
        if not credentials:
            return None
        return self.authenticator.principal(credentials)

    # -- unary --------------------------------------------------------------------------------

    async def _unary(
        self, path: str, receive: Receive, send: Send, headers: dict[str, str], client: str = ""
    ) -> None:
        codec = _UNARY_CODECS.get(base_type(headers))
        handler = self.service.unary(path)
        known = path == self.service.append_path or handler is not None
        lingering = None
        if not self.authorized(headers):
            lingering = self._lingering(headers) if handler is None and known else None
            if lingering is None:
                err = ConnectError("unauthenticated", auth_error_text(headers))
                await unary_error(send, codec or "proto", err)
                self._observe(path, err.code)
                return
            headers[PRINCIPAL_HEADER] = lingering
        if not known:
            await unary_error(send, codec or "proto", ConnectError("unimplemented", path))
            self._observe(UNKNOWN_RPC, "unimplemented")  # a scanner's paths are no labels
            return
        if codec is None:
            await unsupported_media(send, headers, "application/proto or application/json")
            self._observe(path, UNSUPPORTED_MEDIA)
            return
        try:
            declared = int(headers.get("content-length", "0") or 0)
        except ValueError:
            declared = 0
        message_codec: Codec = "json" if codec == "json" else "proto"
        try:
            if declared > self.limits.max_unary_body:
                raise ConnectError(
                    "resource_exhausted",
                    f"request of {declared} bytes exceeds {self.limits.max_unary_body}",
                )
            body = await read_body(receive, self.limits.max_unary_body)
            raw = unary_payload(body, codec, headers, self.limits.max_unary_body)
            try:
                if handler is None:
                    await self._append(raw, message_codec, headers, client, lingering)
                    response = self.service.append_response(message_codec)
                else:
                    answer = handler(raw, message_codec, headers)
                    response = await answer if inspect.isawaitable(answer) else answer
            except ValueError as exc:
                raise ConnectError("invalid_argument", str(exc)) from None
        except ConnectError as err:
            await unary_error(send, codec, err)
            self._observe(path, err.code)
            return
        await unary_ok(send, codec, response)
        self._observe(path, "ok")

    def _lingering(self, headers: Mapping[str, str]) -> str | None:
        """The principal of a token revoked while a run it started may still be going."""
        if self.authenticator is None or headers.get("authorization") == REPEATED_AUTHORIZATION:
            return None
        credentials = _bearer(headers)
        return self.authenticator.lingering(credentials) if credentials else None

    async def _append(
        self,
        raw: bytes,
        codec: Codec,
        headers: dict[str, str],
        client: str,
        lingering: str | None = None,
    ) -> None:
        append = self.service.parse_append(raw, codec)
        request_id = append.request_id or headers.get("x-request-id", "")
        if not request_id:
            raise ConnectError("invalid_argument", "request_id is missing")
        if append.seqno < 0:
            raise ConnectError("invalid_argument", f"append_seqno must be >= 0, got {append.seqno}")
        if lingering is not None:
            await self._check_lingering(request_id, lingering)
        if self.relayed is not None:
            # Stored first, then acknowledged; the replica holding the RunSSE delivers it.
            person = self.registry.person_of(headers.get(PRINCIPAL_HEADER, ""))
            await self.relayed.publish(
                request_id, append.seqno, append.payload, append.message, client, person
            )
            return
        session, _ = self.registry.get_or_create(
            request_id, "runsse", headers, client, first_message=append.seqno == 0
        )
        session.append(append.seqno, append.payload, append.message)

    async def _check_lingering(self, request_id: str, principal: str) -> None:
        """A revoked token's append goes only to a run it started that is still going here,
        or, with replicas, to the relay when a run under that request id started somewhere
        (the relay starts no run: the replica holding the run delivers it while the run goes
        on, and a stream reopened with the token is refused)."""
        session = self.registry.find(request_id)
        if session is None and self.relayed and await self.relayed.run_started(request_id):
            return
        info = session.info if session is not None else None
        if session is None or session.finished or info is None or info.principal != principal:
            raise ConnectError("unauthenticated", "this token was revoked; ask for a new one")


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


__all__ = [
    "CONNECT_PROTO",
    "HEALTH_PATH",
    "Authenticator",
    "ConnectApp",
    "ExtraRoutes",
    "HttpReply",
    "PlainRequest",
    "PlainRoutes",
]
