"""The Connect app with an authenticator (person tokens beside the server's own token): who may
run, who may read the operator's pages, and the principal a run carries, which only the app
sets (a client's own principal header is dropped)."""

from __future__ import annotations

import asyncio
from typing import Any

from cursor_byok.config import parse_config
from cursor_byok.launch import connect_app
from cursor_byok.transport.connect.channel import RunChannel
from cursor_byok.transport.connect.sessions import PRINCIPAL_HEADER, RunStartInfo
from cursor_byok.transport.cursor.proto import aiserver_pb2
from tests.support import connect_client as cc

CONFIG = """
[server]
{extra}
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.alpha]
provider = "local"
"""


class People:
    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens

    def required(self) -> bool:
        return bool(self.tokens)

    def principal(self, credentials: str) -> str | None:
        return self.tokens.get(credentials)

    def person(self, principal: str) -> str:
        return principal

    def refresh(self) -> None:
        return None

    def lingering(self, credentials: str) -> str | None:
        return None


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_who_may_run_and_who_may_read_the_operator_pages() -> None:
    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        return None

    people = People({"cbk_alice": "tok_alice"})
    with_operator = connect_app(
        parse_config(CONFIG.format(extra='auth_token = "op-secret"')),
        handler,
        authenticator=people,
    )
    assert with_operator.authorized(bearer("op-secret"))
    assert with_operator.authorized(bearer("cbk_alice"))
    assert not with_operator.authorized(bearer("cbk_bob")) and not with_operator.authorized({})
    assert with_operator.operator(bearer("op-secret"))
    assert not with_operator.operator(bearer("cbk_alice"))  # a person sees no team's usage
    loopback = connect_app(parse_config(CONFIG.format(extra="")), handler, authenticator=people)
    assert loopback.authorized(bearer("cbk_alice")) and loopback.operator(bearer("cbk_alice"))
    assert not loopback.authorized({})  # a token exists: loopback asks for one
    people.tokens.clear()
    assert loopback.authorized({})  # no tokens: loopback is open, as before


async def started_with(
    headers: dict[str, str], tokens: dict[str, str] | None = None
) -> RunStartInfo:
    """Append the first message of a shim run with these headers; the run's start info."""
    seen: asyncio.Future[RunStartInfo] = asyncio.get_running_loop().create_future()

    async def handler(channel: RunChannel, info: RunStartInfo) -> None:
        seen.set_result(info)
        channel.finish()

    app = connect_app(
        parse_config(CONFIG.format(extra="")),
        handler,
        authenticator=People({"cbk_alice": "tok_alice"} if tokens is None else tokens),
    )
    app.start()
    request = aiserver_pb2.BidiAppendRequest(append_seqno=0)
    request.request_id.request_id = "r1"
    request.data = cc.run_request("hi").SerializeToString().hex()
    body = request.SerializeToString()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": cc.APPEND,
        "headers": [
            (k.encode(), v.encode())
            for k, v in {"content-type": "application/proto", **headers}.items()
        ],
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 200, sent
    try:
        return await asyncio.wait_for(seen, 5)
    finally:
        await app.shutdown()


async def test_the_principal_travels_with_the_run_and_only_the_app_sets_it() -> None:
    info = await started_with(bearer("cbk_alice"))
    assert info.principal == "tok_alice"
    assert PRINCIPAL_HEADER not in info.headers
    forged = await started_with({**bearer("cbk_alice"), PRINCIPAL_HEADER: "tok_mallory"})
    assert forged.principal == "tok_alice"
    # A loopback server without tokens lets anyone run, and a forged principal is no one.
    nobody = await started_with({PRINCIPAL_HEADER: "tok_alice"}, tokens={})
    assert nobody.principal == ""
