"""Server-side WebFetch through the production runtime (in-process, FauxLLM, real SQLite): the
client approves, cannot fetch, the server's job runner (web/jobs.py) fetches a real page on
loopback, and the model reads its text. Loopback is refused by the real policy; the runner
here is widened to the one test server, exactly as the fetch tests do."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from cursor_byok.llm.faux import FauxResponse
from cursor_byok.llm.types import ToolResultMessage
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from cursor_byok.web.fetch import IPAddress, PageFetcher, is_public_address
from cursor_byok.web.jobs import job_runner
from tests.runtime.harness import Client, open_server, run_request

LOOP = ipaddress.ip_address("127.0.0.1")


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(_: web.Request) -> web.Response:
        body = "<html><head><title>Notes</title></head><body><p>Server fetched.</p></body></html>"
        return web.Response(text=body, content_type="text/html")

    app = web.Application()
    app.router.add_get("/notes", page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def allowed(ip: IPAddress) -> bool:
    return ip == LOOP or is_public_address(ip)


@pytest.mark.parametrize("server_side", [True, False])
async def test_a_client_that_cannot_fetch_gets_the_servers_fetch(
    tmp_path: Path, site: str, server_side: bool
) -> None:
    url = f"{site}/notes"
    fetch = FauxResponse.tool_calls([("WebFetch", {"url": url})])
    server = await open_server(tmp_path / "db", [fetch, "Read it."])
    fetcher = PageFetcher(enabled=server_side, allowed=allowed)
    server.runner.services.run_job = job_runner(fetcher=fetcher)

    def cannot_fetch(request: a.ExecServerMessage) -> a.ExecClientMessage | None:
        if request.WhichOneof("message") != "fetch_args":
            return None
        error = a.FetchError(url=request.fetch_args.url, error="Not implemented")
        return a.ExecClientMessage(id=request.id, fetch_result=a.FetchResult(error=error))

    client = Client("r1", answers=[cannot_fetch])
    message = run_request("c1", "fetch it")
    message.run_request.action.user_message_action.request_context.web_fetch_enabled = True
    client.say(message)
    server.start(client)
    await client.until(
        lambda: any(m.WhichOneof("message") == "interaction_query" for m in client.sent),
        "the approval query",
    )
    (query,) = [
        m.interaction_query for m in client.sent if m.WhichOneof("message") == "interaction_query"
    ]
    assert query.web_fetch_request_query.args.url == url
    approved = a.WebFetchRequestResponse(approved=a.WebFetchRequestResponse.Approved())
    client.say(
        a.AgentClientMessage(
            interaction_response=a.InteractionResponse(
                id=query.id, web_fetch_request_response=approved
            )
        )
    )
    assert await client.ended() is None
    assert "turn_ended" in client.kinds()
    second = server.llm.requests[1]
    (result,) = [m for m in second.messages if isinstance(m, ToolResultMessage)]
    text = result.content[0].text  # type: ignore[union-attr]
    await fetcher.aclose()
    if server_side:
        assert not result.is_error
        assert text == f"Fetched {url} (HTTP 200, text/html).\n\n# Notes\n\nServer fetched."
    else:
        assert result.is_error
        assert text.endswith(
            "this server does not fetch pages for clients ([web_fetch] server_side is off)"
        )
