"""WebFetch and GenerateImage over real HTTP against the REAL server process: `Run` on HTTP/2
and the HTTP/1.1 shim, our own client answering the approval queries and execs as the IDE
would (reference §2.15, §2.16), and a loopback fake of an OpenAI-compatible images endpoint.
Each test checks the query, the exec sent, the card, the text the model reads in the next
upstream request, and turn_ended."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from cursor_byok.loop.catalogue import Mode, Switches, offered
from cursor_byok.transport.cursor.proto import agent_pb2 as a
from tests.e2e.test_queries import (
    TRANSPORTS,
    cards,
    ide,
    query_of,
    respond,
    tool_names,
    tool_prompt,
)
from tests.e2e.test_shim import WORKSPACE, chat_requests, exec_of, exec_reply, run_request, unique
from tests.support.images import PNG
from tests.support.live import ServerProcess, ThreadedUpstream, brain_config, server_process
from tests.support.upstream import FakeUpstream, Received, Reply

MAX_TEXT_CHARS = 1500
IMAGE_TIMEOUT_S = 1.5
IMAGE_KEY = "sk-image-test-key-0123456789"


def images_answer(received: Received) -> Reply:
    """The fake images endpoint: the prompt's markers pick the answer."""
    prompt = json.loads(received.body).get("prompt", "") if received.body else ""
    if "[img500]" in prompt:
        return Reply.json(
            500, '{"error":{"message":"images: scripted failure","type":"server_error"}}'
        )
    if "[imgslow]" in prompt:
        reply = Reply.json(200, '{"data":[]}')
        reply.delay_s = IMAGE_TIMEOUT_S + 3
        return reply
    b64 = base64.b64encode(PNG).decode()
    return Reply.json(200, json.dumps({"created": 1, "data": [{"b64_json": b64}]}))


@pytest.fixture(scope="module")
def images() -> Iterator[FakeUpstream]:
    with ThreadedUpstream(images_answer) as up:
        yield up


def web_config(upstream: FakeUpstream, images: FakeUpstream, db: Any, *, server_side: bool) -> str:
    extra = f"""question_timeout_s = 20

[web_fetch]
server_side = {"true" if server_side else "false"}
max_text_chars = {MAX_TEXT_CHARS}

[image_generation]
provider = "images"
model = "img-test-1"
timeout_s = {IMAGE_TIMEOUT_S}

[providers.images]
api = "openai-chat"
base_url = "{images.base_url}/v1"
api_key = "{IMAGE_KEY}"
"""
    return brain_config(upstream.base_url, db=db, extra=extra)


@pytest.fixture(scope="module")
def wserver(
    upstream: FakeUpstream, images: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("web")
    with server_process(web_config(upstream, images, work / "db", server_side=False), work) as srv:
        yield srv


@pytest.fixture(scope="module")
def fetching_server(
    upstream: FakeUpstream, images: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    work = tmp_path_factory.mktemp("web-server-side")
    with server_process(web_config(upstream, images, work / "db", server_side=True), work) as srv:
        yield srv


def web_request(prompt: str) -> a.AgentClientMessage:
    message = run_request(prompt)
    message.run_request.action.user_message_action.request_context.web_fetch_enabled = True
    return message


def model_read(upstream: FakeUpstream, prompt: str) -> tuple[str, list[str]]:
    """The one tool result the model read in the second request, and the tools it had."""
    first, second = chat_requests(upstream, prompt)
    assert second["messages"][: len(first["messages"])] == first["messages"]  # extended
    (tool,) = [m for m in second["messages"] if m["role"] == "tool"]
    content = tool["content"]
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return text, tool_names(second)


URL = "https://docs.example.com/guide"
PAGE = (
    "<html><head><title>The Guide</title><script>track()</script></head><body>"
    "<h1>Install</h1><p>Run <code>make</code> then <a href='/next'>go on</a>.</p>"
    "<ul><li>fast</li><li>small</li></ul></body></html>"
)


async def fetch_turn(
    server: ServerProcess,
    transport: str,
    *,
    url: str = URL,
    approve: bool = True,
    fetch_result: a.FetchResult | None = None,
    throw: str | None = None,
) -> tuple[str, Any, a.WebFetchRequestQuery, a.FetchArgs | None]:
    prompt = tool_prompt("WebFetch", {"url": url})
    fetch_args = None
    async with ide(server, transport) as (send, reader):
        await send(web_request(prompt))
        asked = await reader.wait_for(query_of("web_fetch_request_query"))
        query = asked.interaction_query.web_fetch_request_query
        if not approve:
            rejected = a.WebFetchRequestResponse(
                rejected=a.WebFetchRequestResponse.Rejected(reason="not that site")
            )
            await send(respond(asked.interaction_query.id, web_fetch_request_response=rejected))
        else:
            approved = a.WebFetchRequestResponse(approved=a.WebFetchRequestResponse.Approved())
            await send(respond(asked.interaction_query.id, web_fetch_request_response=approved))
            sent = await reader.wait_for(exec_of("fetch_args"))
            fetch_args = sent.exec_server_message.fetch_args
            exec_id = sent.exec_server_message.id
            if throw is not None:
                msg = a.AgentClientMessage()
                msg.exec_client_control_message.throw.id = exec_id
                msg.exec_client_control_message.throw.error = throw
                await send(msg)
            else:
                await send(exec_reply(exec_id, fetch_result=fetch_result))
        end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended
    return prompt, reader, query, fetch_args


def the_card(reader: Any) -> a.ToolCall:
    (started,) = cards(reader, "tool_call_started")
    assert started.WhichOneof("tool") in ("web_fetch_tool_call", "generate_image_tool_call")
    (done,) = cards(reader, "tool_call_completed")
    assert done.WhichOneof("tool") == started.WhichOneof("tool")
    return done


# -- WebFetch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_web_fetch_approved_the_client_fetches_and_the_model_reads_text(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    success = a.FetchSuccess(url=URL, content=PAGE, status_code=200, content_type="text/html")
    prompt, reader, query, fetch_args = await fetch_turn(
        wserver, transport, fetch_result=a.FetchResult(success=success)
    )
    assert query.args == a.WebFetchArgs(url=URL, tool_call_id="call_t1")
    assert fetch_args == a.FetchArgs(url=URL, tool_call_id="call_t1")
    page = "# The Guide\n\n# Install\n\nRun `make` then [go on](/next).\n\n- fast\n- small"
    done = the_card(reader)
    assert done.web_fetch_tool_call.args == query.args
    assert done.web_fetch_tool_call.result == a.WebFetchResult(
        success=a.WebFetchSuccess(url=URL, markdown=page)
    )
    text, tools = model_read(upstream, prompt)
    assert text == f"Fetched {URL} (HTTP 200, text/html).\n\n{page}"
    assert "track()" not in text
    assert "WebFetch" in tools and "GenerateImage" in tools
    assert tools == list(
        offered(Mode.AGENT, Switches(web_fetch_enabled=True, image_generation=True))
    )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_web_fetch_rejected_is_an_error_result_and_nothing_is_fetched(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    prompt, reader, _query, fetch_args = await fetch_turn(wserver, transport, approve=False)
    assert fetch_args is None
    assert not [m for m in reader.messages if exec_of("fetch_args")(m)]
    done = the_card(reader)
    assert done.web_fetch_tool_call.result == a.WebFetchResult(
        rejected=a.WebFetchRejected(reason="not that site")
    )
    text, _ = model_read(upstream, prompt)
    assert text == f"The user declined fetching {URL}: not that site"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_web_fetch_client_error_is_an_error_result(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    error = a.FetchError(url=URL, error="getaddrinfo ENOTFOUND docs.example.com")
    prompt, reader, _q, _f = await fetch_turn(
        wserver, transport, fetch_result=a.FetchResult(error=error)
    )
    expected = f"Error: the client could not fetch {URL}: getaddrinfo ENOTFOUND docs.example.com"
    done = the_card(reader)
    assert done.web_fetch_tool_call.result == a.WebFetchResult(
        error=a.WebFetchError(url=URL, error=expected)
    )
    text, _ = model_read(upstream, prompt)
    assert text == expected


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("how", ["error", "throw"])
async def test_a_client_that_cannot_fetch_with_server_fetch_off(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str, how: str
) -> None:
    if how == "error":
        result = a.FetchResult(error=a.FetchError(url=URL, error="Not implemented"))
        prompt, reader, _q, _f = await fetch_turn(wserver, transport, fetch_result=result)
    else:
        prompt, reader, _q, _f = await fetch_turn(wserver, transport, throw="Not implemented")
    expected = (
        f"Error: the client cannot fetch web pages, and the server did not fetch {URL}: this "
        "server does not fetch pages for clients ([web_fetch] server_side is off)"
    )
    done = the_card(reader)
    assert done.web_fetch_tool_call.result.error.error == expected
    text, _ = model_read(upstream, prompt)
    assert text == expected


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_oversized_page_is_cut_and_says_so(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    lines = "\n".join(f"line {i:05d} of the long page" for i in range(400))
    success = a.FetchSuccess(url=URL, content=lines, status_code=200, content_type="text/plain")
    prompt, reader, _q, _f = await fetch_turn(
        wserver, transport, fetch_result=a.FetchResult(success=success)
    )
    text, _ = model_read(upstream, prompt)
    assert text.startswith(f"Fetched {URL} (HTTP 200, text/plain).\n\nline 00000 of the long page")
    assert f"of its {len(lines)} characters are shown (the limit is {MAX_TEXT_CHARS}).]" in text
    assert "line 00399" not in text
    assert len(text) < MAX_TEXT_CHARS + 200
    markdown = the_card(reader).web_fetch_tool_call.result.success.markdown
    assert markdown.endswith(f"(the limit is {MAX_TEXT_CHARS}).]")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_server_side_fetch_on_refuses_a_loopback_address(
    fetching_server: ServerProcess, upstream: FakeUpstream, images: FakeUpstream, transport: str
) -> None:
    # The images fake is a real HTTP server on loopback: the server must not fetch it.
    url = f"{images.base_url}/v1/private"
    before = len(images.requests)
    result = a.FetchResult(error=a.FetchError(url=url, error="Not implemented"))
    prompt, reader, _q, _f = await fetch_turn(
        fetching_server, transport, url=url, fetch_result=result
    )
    text, _ = model_read(upstream, prompt)
    assert text == (
        f"Error: the client cannot fetch web pages, and the server did not fetch {url}: "
        "refused: 127.0.0.1 is not a public address (127.0.0.1: loopback); the server fetches "
        "public addresses only"
    )
    assert len(images.requests) == before  # nothing reached it
    assert the_card(reader).web_fetch_tool_call.result.error.error == text


# -- GenerateImage ----------------------------------------------------------------------------


async def image_turn(
    server: ServerProcess, transport: str, description: str, *, approve: bool = True
) -> tuple[str, Any, a.GenerateImageRequestQuery, a.WriteArgs | None]:
    args = {"description": description, "filename": "fox.png", "aspect_ratio": "16:9"}
    prompt = tool_prompt("GenerateImage", args)
    write = None
    async with ide(server, transport) as (send, reader):
        await send(run_request(prompt))
        asked = await reader.wait_for(query_of("generate_image_request_query"))
        query = asked.interaction_query.generate_image_request_query
        if approve:
            response = a.GenerateImageRequestResponse(
                approved=a.GenerateImageRequestResponse.Approved(description=description)
            )
        else:
            response = a.GenerateImageRequestResponse(
                rejected=a.GenerateImageRequestResponse.Rejected(reason="no images today")
            )
        await send(respond(asked.interaction_query.id, generate_image_request_response=response))
        if approve and "[img" not in description:
            sent = await reader.wait_for(exec_of("write_args"), timeout=20)
            write = sent.exec_server_message.write_args
            ok = a.WriteSuccess(path=write.path, file_size=len(write.file_bytes))
            await send(
                exec_reply(sent.exec_server_message.id, write_result=a.WriteResult(success=ok))
            )
        end = await reader.wait_end(30)
    assert end == {} and reader.turn_ended
    return prompt, reader, query, write


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_generate_image_approved_writes_the_file_and_fills_the_card(
    wserver: ServerProcess, upstream: FakeUpstream, images: FakeUpstream, transport: str
) -> None:
    description = f"a red fox in the snow ({transport})"
    prompt, reader, query, write = await image_turn(wserver, transport, description)
    path = f"{WORKSPACE}/fox.png"
    assert query.tool_call_id == "call_t1"
    assert query.args == a.GenerateImageArgs(
        description=description, file_path=path, aspect_ratio="16:9"
    )
    assert write is not None
    assert write.path == path and write.file_bytes == PNG and write.tool_call_id == "call_t1"
    asked = [json.loads(r.body) for r in images.requests if description.encode() in r.body]
    assert asked == [{"model": "img-test-1", "prompt": description, "n": 1, "size": "1536x1024"}]
    (got,) = [r for r in images.requests if description.encode() in r.body]
    assert got.path == "/v1/images/generations"
    assert got.headers["authorization"] == f"Bearer {IMAGE_KEY}"
    done = the_card(reader)
    assert done.generate_image_tool_call.args == query.args
    assert done.generate_image_tool_call.result == a.GenerateImageResult(
        success=a.GenerateImageSuccess(file_path=path, image_data=base64.b64encode(PNG).decode())
    )
    text, _ = model_read(upstream, prompt)
    assert text == f"The image was generated and saved to {path} ({len(PNG)} bytes, PNG 2x1)."


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_generate_image_rejected_is_an_error_result(
    wserver: ServerProcess, upstream: FakeUpstream, images: FakeUpstream, transport: str
) -> None:
    description = f"a blue whale ({transport})"
    prompt, reader, _query, _write = await image_turn(
        wserver, transport, description, approve=False
    )
    assert not [r for r in images.requests if description.encode() in r.body]
    expected = "The user declined generating the image: no images today"
    done = the_card(reader)
    assert done.generate_image_tool_call.result == a.GenerateImageResult(
        error=a.GenerateImageError(error=expected)
    )
    text, _ = model_read(upstream, prompt)
    assert text == expected


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("marker", ["[img500]", "[imgslow]"])
async def test_an_image_endpoint_failure_is_an_error_result(
    wserver: ServerProcess, upstream: FakeUpstream, transport: str, marker: str
) -> None:
    description = f"a broken picture {marker} ({transport})"
    prompt, reader, _query, write = await image_turn(wserver, transport, description)
    assert write is None
    assert not [m for m in reader.messages if exec_of("write_args")(m)]
    if marker == "[img500]":
        expected = (
            "Error: the image was not generated: the image endpoint answered HTTP 500: "
            "server_error: images: scripted failure"
        )
    else:
        expected = (
            "Error: the image was not generated: the image endpoint gave no answer within "
            f"{IMAGE_TIMEOUT_S:g} s"
        )
    done = the_card(reader)
    assert done.generate_image_tool_call.result.error.error == expected
    text, _ = model_read(upstream, prompt)
    assert text == expected
    assert IMAGE_KEY not in text


# -- when the tools are offered ----------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_gates_webfetch_needs_the_client_and_generateimage_the_config(
    server: ServerProcess, wserver: ServerProcess, upstream: FakeUpstream, transport: str
) -> None:
    seen = {}
    for name, srv, fetch in (("plain", server, True), ("web", wserver, False)):
        prompt = unique(f"[brief] which tools ({name}, {transport})")
        message = web_request(prompt) if fetch else run_request(prompt)
        async with ide(srv, transport) as (send, reader):
            await send(message)
            assert await reader.wait_end(30) == {} and reader.turn_ended
        (body,) = chat_requests(upstream, prompt)
        seen[name] = tool_names(body)
    # No [image_generation]: no GenerateImage even with the client's web_fetch_enabled.
    assert seen["plain"] == list(offered(Mode.AGENT, Switches(web_fetch_enabled=True)))
    assert "WebFetch" in seen["plain"] and "GenerateImage" not in seen["plain"]
    # The client did not say web_fetch_enabled: no WebFetch, even on a server with the table.
    assert seen["web"] == list(offered(Mode.AGENT, Switches(image_generation=True)))
    assert "GenerateImage" in seen["web"] and "WebFetch" not in seen["web"]
