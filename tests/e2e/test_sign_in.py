"""Signing in with a person's token, end to end on loopback (docs/clients.md): a real server
process, a client that behaves as the IDE does at sign-in (tests/support/ide_login.py), a
person who pastes their token on the sign-in page, then the access token on unary RPCs and on
runs over HTTP/2 and the HTTP/1.1 shim, a refresh, a revocation, and the CLI's key exchange.
Afterwards no secret of the flow is in the server's log or database."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cursor_byok.transport.cursor.proto import aiserver_pb2
from tests.e2e.test_crash_recovery import db_reader
from tests.e2e.test_shim import Reader, ShimRun, run_request, unique
from tests.e2e.test_tokens import add_token, config_text, token_cli
from tests.support import connect_client as cc
from tests.support.ide_login import IdeLike, jwt_claims, person_signs_in
from tests.support.live import ServerProcess, server_process
from tests.support.upstream import FakeUpstream

GET_ME = "/aiserver.v1.DashboardService/GetMe"


@pytest.fixture
def signed(upstream: FakeUpstream, tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    db = tmp_path / "byok.db"
    config = tmp_path / "cursor-byok.toml"
    text = config_text(upstream, db, auth_token=None).replace(
        "[server]", '[server]\nlog_level = "debug"', 1
    )
    config.write_text(text)
    with server_process(text, tmp_path) as srv:
        yield srv, config


async def get_me(http: httpx.AsyncClient, token: str | None) -> aiserver_pb2.GetMeResponse:
    reply: aiserver_pb2.GetMeResponse = await cc.unary(
        http, GET_ME, aiserver_pb2.GetMeRequest(), aiserver_pb2.GetMeResponse, token=token
    )
    return reply


async def h2_turn(server: ServerProcess, token: str, text: str) -> dict[str, object] | None:
    client = await cc.H2Client.connect("127.0.0.1", server.port)
    try:
        stream = await client.open_run(token=token)

        async def send(message: object) -> None:
            await stream.send(message)  # type: ignore[arg-type]

        reader = Reader(stream, send)
        try:
            await send(run_request(text))
            return await reader.wait_end()
        finally:
            await reader.close()
    finally:
        await client.close()


async def shim_turn(server: ServerProcess, token: str, text: str) -> dict[str, object] | None:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        run = ShimRun(http, token=token)
        async with run.subscribe() as reader:
            await run.send(run_request(text))
            return await reader.wait_end()


async def wait_refused(http: httpx.AsyncClient, token: str, timeout: float = 6.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await get_me(http, token)
        except cc.ConnectCallError as err:
            assert err.code == "unauthenticated"
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the access token still works after its person token was revoked")


async def test_an_ide_like_client_signs_in_with_a_persons_token(
    signed: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, config = signed
    secret = await asyncio.to_thread(add_token, config, "alice")
    # Another person's token keeps the server closed once alice's is revoked (with none left
    # a loopback server opens: issue 25 point 5 is another helper's).
    await asyncio.to_thread(add_token, config, "keeper")
    secrets_seen = [secret]
    ide = IdeLike(website=server.url, api=server.url)
    secrets_seen.append(ide.verifier)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await asyncio.sleep(2.5)  # the server sees the new token (TokenDirectory reloads)
        # Before the person signs in: the poll answers "not yet", the server is closed.
        pending = await ide.poll_once(http)
        assert pending.status_code == 404 and pending.text == "Not found"
        with pytest.raises(cc.ConnectCallError) as refused:
            await get_me(http, None)
        assert refused.value.code == "unauthenticated"
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as browser:
            page = await person_signs_in(browser, ide.login_url(), secret)
            secrets_seen += [c.value for c in browser.cookies.jar]
        assert page.status_code == 200 and "signed in as <strong>alice</strong>" in page.text
        assert secret not in page.text
        assert await ide.poll(http)
        secrets_seen += [ide.access_token, ide.refresh_token]
        # The access token is JWT-shaped: a client reads exp to refresh before it.
        header = json.loads(base64.urlsafe_b64decode(ide.access_token.split(".")[0] + "=="))
        claims = jwt_claims(ide.access_token)
        assert header == {"alg": "HS256", "typ": "JWT"}
        assert claims["exp"] - claims["iat"] == 3600 and claims["sub"].startswith(
            "cursor-byok|tok_"
        )
        assert ide.refresh_token.startswith("cbr_")
        # A sign-in is claimed once.
        assert (await ide.poll_once(http)).status_code == 404
        # GetMe is that person; the access token works on unary RPCs and on runs.
        me = await get_me(http, ide.access_token)
        assert me.first_name == "alice" and me.auth_id == claims["sub"]
        assert await h2_turn(server, ide.access_token, unique("over http/2")) == {}
        assert await shim_turn(server, ide.access_token, unique("over the shim")) == {}
        # Refreshed before it expires (the client's clock says it is time).
        old = ide.access_token
        assert await ide.refresh_if_due(http, now=ide.refresh_at())
        assert ide.access_token != old
        secrets_seen.append(ide.access_token)
        assert (await get_me(http, ide.access_token)).first_name == "alice"
        assert await h2_turn(server, ide.access_token, unique("after the refresh")) == {}
        # Revoked: the access token, the refreshed one and the refresh token die with it.
        assert (await asyncio.to_thread(token_cli, config, "revoke", "alice")).returncode == 0
        await wait_refused(http, ide.access_token)
        await wait_refused(http, old)
        refresh = await ide.refresh(http)
        assert refresh.status_code == 401 and refresh.json()["shouldLogout"] is True
        end = await h2_turn(server, ide.access_token, unique("after revocation"))
        assert end is not None and end["error"]["code"] == "unauthenticated"  # type: ignore[index]
        # A new sign-in with the revoked token is refused on the page.
        again = IdeLike(website=server.url, api=server.url)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as browser:
            page = await person_signs_in(browser, again.login_url(), secret)
        assert page.status_code == 401 and secret not in page.text
    _assert_no_secret_anywhere(server, tmp_path, secrets_seen)
    with db_reader(tmp_path / "byok.db") as conn:
        calls = conn.execute("SELECT DISTINCT token_id FROM llm_calls").fetchall()
        person = conn.execute("SELECT token_id FROM access_tokens WHERE name = 'alice'").fetchall()
    # The runs made with the access token are the person's: their calls carry its id.
    assert {r[0] for r in calls} == {person[0][0]}


async def test_the_cli_exchanges_a_persons_token_for_its_access_token(
    signed: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, config = signed
    secret = await asyncio.to_thread(add_token, config, "bob")
    await asyncio.to_thread(add_token, config, "keeper")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await asyncio.sleep(2.5)
        wrong = await http.post(
            "/auth/exchange_user_api_key", json={}, headers={"authorization": "Bearer cbk_nope"}
        )
        assert wrong.status_code == 401 and "message" in wrong.json()["error"]
        assert "cbk_nope" not in wrong.text
        reply = await http.post(
            "/auth/exchange_user_api_key",
            content=b"{}",
            headers={"authorization": f"Bearer {secret}", "content-type": "application/json"},
        )
        assert reply.status_code == 200, reply.text
        access = reply.json()["accessToken"]
        assert jwt_claims(access)["exp"] > time.time()
        assert (await get_me(http, access)).first_name == "bob"
        assert await shim_turn(server, access, unique("cli over the shim")) == {}
        assert (await asyncio.to_thread(token_cli, config, "revoke", "bob")).returncode == 0
        await wait_refused(http, access)
        gone = await http.post(
            "/auth/exchange_user_api_key", json={}, headers={"authorization": f"Bearer {secret}"}
        )
        assert gone.status_code == 401
    _assert_no_secret_anywhere(server, tmp_path, [secret, access, reply.json()["refreshToken"]])


async def test_the_sign_in_page_refuses_cross_site_posts_and_floods(
    signed: tuple[ServerProcess, Path],
) -> None:
    server, config = signed
    secret = await asyncio.to_thread(add_token, config, "carol")
    ide = IdeLike(website=server.url, api=server.url)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as browser:
        page = await browser.get(ide.login_url())
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert not re.search(r"<(script|link|img)\b|src=", page.text)  # no external asset
        assert page.headers["cache-control"] == "no-store"
        assert "SameSite=Strict" in page.headers["set-cookie"]
        fields = dict(re.findall(r'name="([a-z]+)" value="([^"]*)"', page.text))
        # Another site's form: its Origin, and no cookie of ours.
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as attacker:
            forged = await attacker.post(
                "/loginDeepControl",
                data={**fields, "token": secret},
                headers={"origin": "https://evil.example"},
            )
        assert forged.status_code == 403 and secret not in forged.text
        cross = await browser.post(
            "/loginDeepControl",
            data={**fields, "token": secret},
            headers={"origin": "https://evil.example"},
        )
        assert cross.status_code == 403
        no_csrf = await browser.post(
            "/loginDeepControl", data={**fields, "csrf": "x", "token": secret}
        )
        assert no_csrf.status_code == 403
        # Guessing tokens from one address: 10 a minute, then 429.
        statuses = []
        for n in range(12):
            wrong = await browser.post(
                "/loginDeepControl",
                data={**fields, "token": f"cbk_guess{n}"},
                headers={"origin": server.url},
            )
            statuses.append(wrong.status_code)
            assert f"cbk_guess{n}" not in wrong.text  # never echoed
        assert statuses.count(429) >= 2 and 401 in statuses
        incomplete = await browser.get("/loginDeepControl")
        assert incomplete.status_code == 400


def _assert_no_secret_anywhere(server: ServerProcess, folder: Path, found: list[str]) -> None:
    log = server.log()
    assert "/auth/poll?" not in log and "verifier" not in log.lower()
    for value in found:
        assert value and value not in log, "a secret of the sign-in flow is in the log"
        for file in folder.glob("byok.db*"):
            assert value.encode() not in file.read_bytes(), f"a secret is in {file.name}"
