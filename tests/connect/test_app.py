"""The real server on loopback (granian embedded in the test's event loop), spoken to over real
HTTP/1.1 (httpx) and real HTTP/2 (h2)."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import ssl
import struct
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from cursor_byok.config import Config, parse_config
from cursor_byok.launch import RunningServer, running_server
from cursor_byok.transport.connect.sessions import RunHandler, TransportLimits
from cursor_byok.transport.cursor.proto import agent_pb2, aiserver_pb2
from tests.support import connect_client as cc

CONFIG = """
[server]
host = "127.0.0.1"
{extra}
[providers.local]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.alpha]
provider = "local"
name = "Alpha One"
context_window = 200000
reasoning = true

[models.beta]
provider = "local"
context_window = 32000
"""
TOKEN = "s3cret-token"
FAST = TransportLimits(heartbeat_interval=0.2, orphan_timeout=0.5, reap_interval=0.05)
_SSL = ssl.create_default_context()  # built once: httpx would build one per client (~0.2 s)


def make_config(extra: str = "") -> Config:
    return parse_config(CONFIG.format(extra=extra))


@asynccontextmanager
async def server(
    handler: RunHandler = cc.ordered_echo_handler,
    *,
    config: Config | None = None,
    limits: TransportLimits = FAST,
) -> AsyncIterator[RunningServer]:
    async with running_server(config or make_config(), handler, limits=limits) as srv:
        yield srv


@asynccontextmanager
async def http1(srv: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=5, verify=_SSL) as client:
        yield client


@asynccontextmanager
async def h2(srv: RunningServer) -> AsyncIterator[cc.H2Client]:
    client = await cc.H2Client.connect(srv.host, srv.port)
    try:
        yield client
    finally:
        await client.close()


def rid() -> str:
    return str(uuid.uuid4())


async def shim_turn(client: httpx.AsyncClient, request_id: str) -> cc.StreamResult:
    """A whole good shim turn with the ordered echo handler."""
    async with cc.runsse(client, request_id) as stream:
        assert (await cc.append(client, request_id, 0, cc.run_request())).status_code == 200
        assert (await cc.append(client, request_id, 1, cc.cancel())).status_code == 200
        return await stream.read_all()


# ---------------------------------------------------------------------------------------------
# HTTP/2 Run
# ---------------------------------------------------------------------------------------------


async def test_run_bidi_round_trip_h2c() -> None:
    async with server(cc.echo_handler) as srv, h2(srv) as client:
        stream = await client.open_run(request_id="run-1")
        first = await stream.next_frame()  # sent before we write anything
        assert first is not None and first.flags == 0
        assert stream.result.heartbeats == 1
        await stream.send(cc.run_request("ping"))
        result = await stream.read_all()  # we never half-close: the server ends the stream
        assert result.status == 200
        assert result.headers["content-type"] == "application/connect+proto"
        assert result.texts == ["echo[run]: ", "ping"]
        assert result.turn_ended and result.end == {} and result.trailing == b""
        assert stream.ended


async def test_run_full_duplex_and_input_ids() -> None:
    async with server() as srv, h2(srv) as client:
        stream = await client.open_run(request_id="dup")
        await stream.send(cc.run_request())
        assert [m.interaction_update.text_delta.text for m in await stream.read_until(1)] == [
            "dup:0 run_request"
        ]
        await stream.send(cc.heartbeat())
        await stream.read_until(2)
        await stream.send(cc.cancel())
        result = await stream.read_all()
        assert result.texts == [
            "dup:0 run_request",
            "dup:1 client_heartbeat",
            "dup:2 conversation_action",
        ]
        assert result.end == {}


async def test_run_request_id_from_run_id_then_uuid() -> None:
    async with server() as srv, h2(srv) as client:
        stream = await client.open_run()
        await stream.send(cc.run_request(run_id="from-body"))
        await stream.send(cc.cancel())
        assert (await stream.read_all()).texts[0] == "from-body:0 run_request"
        stream = await client.open_run()
        await stream.send(cc.run_request())
        await stream.send(cc.cancel())
        first = (await stream.read_all()).texts[0]
        assert uuid.UUID(first.split(":")[0])


async def test_run_reused_request_id_is_refused() -> None:
    async with server() as srv, h2(srv) as client:
        one = await client.open_run(request_id="same")
        await one.send(cc.run_request())
        await one.read_until(1)
        two = await client.open_run(request_id="same")
        await two.send(cc.run_request())
        result = await two.read_all()
        assert result.error is not None and result.error["code"] == "already_exists"
        await one.send(cc.cancel())
        assert (await one.read_all()).end == {}


async def test_run_gzip_frames() -> None:
    async with server(cc.echo_handler) as srv, h2(srv) as client:
        stream = await client.open_run(extra={"connect-content-encoding": "gzip"})
        await stream.send(cc.run_request("squeezed"), compress=True)
        result = await stream.read_all()
        assert result.texts == ["echo[run]: ", "squeezed"] and result.end == {}


async def test_run_heartbeats_while_handler_is_slow() -> None:
    async with server(cc.slow_handler) as srv, h2(srv) as client:
        stream = await client.open_run()
        await stream.send(cc.run_request())
        arrivals = []
        while await stream.next_frame(3) is not None:
            arrivals.append(time.monotonic())
        result = stream.result
        assert result.texts == ["done thinking"] and result.end == {}
        # SLOW_SECONDS of silence at 0.2 s: at least 4 heartbeats, no gap much above 0.2 s
        assert result.heartbeats >= 4
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        assert max(gaps) < 0.8


async def test_run_error_end_stream_with_details() -> None:
    async with server(cc.failing_handler) as srv, h2(srv) as client:
        stream = await client.open_run()
        await stream.send(cc.run_request())
        result = await stream.read_all()
        assert result.status == 200
        assert result.texts == ["partial"] and not result.turn_ended
        assert result.error is not None
        assert result.error["code"] == "unavailable" and result.error["message"] == "provider down"
        details = cc.decode_error_details(result.error)
        assert details.error == aiserver_pb2.ErrorDetails.ERROR_PROVIDER_ERROR
        assert details.details.detail == "HTTP 503" and details.details.is_retryable


async def test_run_handler_crash_is_internal() -> None:
    async with server(cc.crashing_handler) as srv, h2(srv) as client:
        stream = await client.open_run()
        await stream.send(cc.run_request())
        result = await stream.read_all()
        assert result.error is not None and result.error["code"] == "internal"
        assert "boom" not in result.error["message"]  # no internals leak to the client


async def test_run_client_reset_ends_input() -> None:
    async with server() as srv, h2(srv) as client:
        assert srv.app is not None
        stream = await client.open_run(request_id="gone")
        await stream.send(cc.run_request())
        await stream.read_until(1)
        await client.reset(stream.stream_id)
        for _ in range(100):
            session = srv.app.registry.get("gone")
            if session is not None and session.finished:
                break
            await asyncio.sleep(0.02)
        assert session is not None and session.finished
        assert session.ending is not None and session.ending.code == "canceled"
        # the connection is still usable
        again = await client.open_run()
        await again.send(cc.run_request())
        await again.send(cc.cancel())
        assert (await again.read_all()).end == {}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (cc.envelope(cc.run_request().SerializeToString())[:-3], "invalid_argument"),  # truncated
        (struct.pack(">BI", 0, 2**31), "resource_exhausted"),  # oversized, nothing follows
        (cc.envelope(b"\xff\xff\xff\xff"), "invalid_argument"),  # not protobuf
        (cc.envelope(b"\x01\x02", 0x01), "invalid_argument"),  # compressed, no encoding
    ],
    ids=["truncated", "oversized", "undecodable", "compressed-without-encoding"],
)
async def test_run_malformed_input_then_server_still_serves(body: bytes, code: str) -> None:
    async with server(cc.echo_handler) as srv, h2(srv) as client:
        stream = await client.open_run()
        await stream.send(body)
        if code != "resource_exhausted":
            await stream.end()
        result = await stream.read_all()
        assert result.error is not None and result.error["code"] == code, result.end
        good = await client.open_run()
        await good.send(cc.run_request("after"))
        assert (await good.read_all()).texts == ["echo[run]: ", "after"]


async def test_run_frame_limit_is_exact() -> None:
    """A message of exactly `max_frame_size` bytes is delivered; one byte more ends the run
    with resource_exhausted, and the server goes on serving."""
    at_limit = cc.run_request("x" * 1000).SerializeToString()
    over = cc.run_request("x" * 1001).SerializeToString()
    assert len(over) == len(at_limit) + 1
    limits = TransportLimits(
        heartbeat_interval=0.2, orphan_timeout=0.5, reap_interval=0.05, max_frame_size=len(at_limit)
    )
    async with server(cc.echo_handler, limits=limits) as srv, h2(srv) as client:
        stream = await client.open_run()
        await stream.send(cc.envelope(at_limit))
        assert (await stream.read_all()).texts == ["echo[run]: ", "x" * 1000]
        stream = await client.open_run()
        await stream.send(cc.envelope(over))
        result = await stream.read_all()
        assert result.error is not None and result.error["code"] == "resource_exhausted"
        assert str(len(at_limit)) in result.error["message"]
        good = await client.open_run()
        await good.send(cc.run_request("after"))
        assert (await good.read_all()).texts == ["echo[run]: ", "after"]


async def test_run_wrong_content_type() -> None:
    async with server(cc.echo_handler) as srv, h2(srv) as client:
        stream = await client.open(cc.RUN, {"content-type": "application/json"}, end_stream=True)
        await stream.read_all()
        assert stream.result.status == 415


# ---------------------------------------------------------------------------------------------
# HTTP/1.1 shim
# ---------------------------------------------------------------------------------------------


async def test_shim_runsse_first_then_appends() -> None:
    async with server() as srv, http1(srv) as client:
        result = await shim_turn(client, "sse-first")
        assert result.status == 200
        assert result.headers["content-type"] == "text/event-stream"
        assert result.headers["cache-control"] == "no-cache"
        assert result.messages[0].interaction_update.HasField("heartbeat")
        assert result.texts == ["sse-first:0 run_request", "sse-first:1 conversation_action"]
        assert result.turn_ended and result.end == {} and result.trailing == b""


async def test_shim_append_before_runsse() -> None:
    async with server() as srv, http1(srv) as client:
        r = "append-first"
        resp = await cc.append(client, r, 0, cc.run_request())
        assert resp.status_code == 200 and resp.content == b""
        assert resp.headers["content-type"] == "application/proto"
        await cc.append(client, r, 1, cc.cancel())
        async with cc.runsse(client, r) as stream:
            result = await stream.read_all()
        assert result.texts == [f"{r}:0 run_request", f"{r}:1 conversation_action"]
        assert result.end == {}


async def test_shim_out_of_order_and_duplicate_appends() -> None:
    async with server() as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            order = [3, 1, 3, 2, 0, 1, 0, 2]
            await asyncio.gather(
                *(cc.append(client, r, n, cc.heartbeat() if n else cc.run_request()) for n in order)
            )
            for n in (5, 4):
                await cc.append(client, r, n, cc.cancel() if n == 5 else cc.heartbeat())
            result = await stream.read_all()
        assert result.texts == [
            f"{r}:0 run_request",
            f"{r}:1 client_heartbeat",
            f"{r}:2 client_heartbeat",
            f"{r}:3 client_heartbeat",
            f"{r}:4 client_heartbeat",
            f"{r}:5 conversation_action",
        ]


async def test_shim_hex_and_binary_and_gzip_appends() -> None:
    async with server() as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            await cc.append(client, r, 0, cc.run_request(), binary=True)
            resp = await cc.append(client, r, 1, cc.heartbeat(), gzip_body=True)
            assert resp.status_code == 200
            upper = cc.heartbeat().SerializeToString().hex().upper()
            await cc.append(client, r, 2, b"", hex_data=upper)
            resp = await cc.append(
                client,
                r,
                3,
                cc.heartbeat(),
                enveloped=True,
                content_type="application/grpc-web+proto",
            )
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "application/grpc-web+proto"
            assert resp.content.endswith(b"grpc-status: 0\r\n")
            await cc.append(client, r, 4, cc.cancel(), binary=True, gzip_body=True)
            result = await stream.read_all()
        assert [t.split(" ")[0] for t in result.texts] == [f"{r}:{n}" for n in range(5)]


async def test_shim_bad_appends_enqueue_nothing() -> None:
    async with server() as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            bad = [
                await cc.append(client, r, 0, b"", hex_data="zz"),
                await cc.append(client, r, 0, b"", hex_data="abc"),  # odd length
                await cc.append(client, r, 0, b"\xff\xff\xff"),  # hex fine, protobuf not
                await cc.append(client, r, 0, b"\x0a\x05ab", binary=True),  # truncated field
            ]
            for resp in bad:
                assert resp.status_code == 400, resp.text
                assert resp.json()["code"] == "invalid_argument"
                assert resp.headers["content-type"] == "application/json"
            not_a_request = await client.post(
                cc.APPEND, content=b"\xff\xff", headers={"content-type": "application/proto"}
            )
            assert not_a_request.status_code == 400
            await cc.append(client, r, 0, cc.run_request())
            await cc.append(client, r, 1, cc.cancel())
            result = await stream.read_all()
        assert result.texts == [f"{r}:0 run_request", f"{r}:1 conversation_action"]


async def test_shim_too_many_held_appends() -> None:
    limits = TransportLimits(heartbeat_interval=0.2, max_held_appends=4)
    async with server(limits=limits) as srv, http1(srv) as client:
        r = rid()
        for n in range(2, 6):
            assert (await cc.append(client, r, n, cc.heartbeat())).status_code == 200
        resp = await cc.append(client, r, 6, cc.heartbeat())
        assert resp.status_code == 429 and resp.json()["code"] == "resource_exhausted"
        for n in (0, 1):
            await cc.append(client, r, n, cc.run_request() if n == 0 else cc.heartbeat())
        await cc.append(client, r, 6, cc.cancel())
        async with cc.runsse(client, r) as stream:
            result = await stream.read_all()
        assert len(result.texts) == 7 and result.end == {}


async def test_shim_runsse_reconnect_replays() -> None:
    async with server() as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            await cc.append(client, r, 0, cc.run_request())
            assert len(await stream.read_until(1)) == 1
        # the first RunSSE dropped; the run goes on
        await cc.append(client, r, 1, cc.heartbeat())
        async with cc.runsse(client, r) as stream:
            got = await stream.read_until(2)
            assert [m.interaction_update.text_delta.text for m in got] == [
                f"{r}:0 run_request",
                f"{r}:1 client_heartbeat",
            ]
            await cc.append(client, r, 2, cc.cancel())
            result = await stream.read_all()
        assert len(result.texts) == 3 and result.end == {}
        # a finished run is still replayed whole during the grace period
        async with cc.runsse(client, r) as stream:
            again = await stream.read_all()
        assert again.texts == result.texts and again.end == {}


async def test_shim_orphan_run_is_cancelled() -> None:
    async with server() as srv, http1(srv) as client:
        assert srv.app is not None
        r = rid()
        async with cc.runsse(client, r) as stream:
            await cc.append(client, r, 0, cc.run_request())
            await stream.read_until(1)
        session = srv.app.registry.get(r)
        assert session is not None
        for _ in range(100):
            if session.finished:
                break
            await asyncio.sleep(0.02)
        assert session.ending is not None and session.ending.code == "canceled"


async def test_shim_heartbeats_while_handler_is_slow() -> None:
    async with server(cc.slow_handler) as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            await cc.append(client, r, 0, cc.run_request())
            arrivals = []
            while await stream.next_frame(3) is not None:
                arrivals.append(time.monotonic())
        assert stream.result.heartbeats >= 4 and stream.result.end == {}
        assert max(b - a for a, b in itertools.pairwise(arrivals)) < 0.8


async def test_shim_error_end_stream_with_details() -> None:
    async with server(cc.failing_handler) as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r) as stream:
            await cc.append(client, r, 0, cc.run_request())
            result = await stream.read_all()
        assert result.status == 200 and result.error is not None
        assert result.error["code"] == "unavailable"
        assert cc.decode_error_details(result.error).details.title == "Server Error"


async def test_shim_grpc_web_runsse() -> None:
    async with server(cc.failing_handler) as srv, http1(srv) as client:
        r = rid()
        async with cc.runsse(client, r, content_type="application/grpc-web+proto") as stream:
            await cc.append(client, r, 0, cc.run_request())
            body = b""
            async for chunk in stream.response.aiter_raw():
                body += chunk
        assert stream.response.headers["content-type"] == "application/grpc-web+proto"
        frames, rest = cc.split_frames(body)
        assert rest == b"" and frames[-1].flags == 0x80
        assert b"grpc-status: 14" in frames[-1].payload


async def test_runsse_bad_bodies() -> None:
    async with server(cc.echo_handler) as srv, http1(srv) as client:
        headers = {"content-type": "application/connect+proto"}
        for body in (cc.envelope(b"\xff\xff"), cc.envelope(b""), b"\x00\x00\x00"):
            resp = await client.post(cc.RUNSSE, content=body, headers=headers)
            assert resp.status_code == 200
            frames, _ = cc.split_frames(resp.content)
            assert frames[-1].flags == 0x02 and b"invalid_argument" in frames[-1].payload
        resp = await client.post(cc.RUNSSE, content=b"x", headers={"content-type": "text/plain"})
        assert resp.status_code == 415
        result = await shim_turn_echo(client)
        assert result.texts == ["echo[runsse]: ", "hello"]


async def shim_turn_echo(client: httpx.AsyncClient) -> cc.StreamResult:
    r = rid()
    async with cc.runsse(client, r) as stream:
        await cc.append(client, r, 0, cc.run_request())
        return await stream.read_all()


async def test_append_wrong_content_type_and_oversized() -> None:
    limits = TransportLimits(heartbeat_interval=0.2, max_unary_body=1024)
    async with server(cc.echo_handler, limits=limits) as srv, http1(srv) as client:
        resp = await client.post(cc.APPEND, content=b"x", headers={"content-type": "text/plain"})
        assert resp.status_code == 415
        big = cc.agent_pb2.AgentClientMessage()
        big.run_request.action.user_message_action.user_message.text = "x" * 4000
        resp = await cc.append(client, rid(), 0, big)
        assert resp.status_code == 429 and resp.json()["code"] == "resource_exhausted"
        result = await shim_turn_echo(client)
        assert result.end == {}


# ---------------------------------------------------------------------------------------------
# Unary RPCs, routing
# ---------------------------------------------------------------------------------------------


async def test_unary_rpcs_answer_with_configured_models() -> None:
    async with server() as srv, http1(srv) as client:
        for path in (
            "/agent.v1.AgentService/GetUsableModels",
            "/aiserver.v1.AiService/GetUsableModels",
        ):
            resp = await cc.unary(
                client, path, agent_pb2.GetUsableModelsRequest(), agent_pb2.GetUsableModelsResponse
            )
            assert [m.model_id for m in resp.models] == ["alpha", "beta"]
            alpha, beta = resp.models
            assert alpha.display_name == "Alpha One" and alpha.HasField("thinking_details")
            assert beta.display_name == "beta" and not beta.HasField("thinking_details")
        for path in (
            "/agent.v1.AgentService/GetDefaultModelForCli",
            "/aiserver.v1.AiService/GetDefaultModelForCli",
        ):
            default = await cc.unary(
                client,
                path,
                agent_pb2.GetDefaultModelForCliRequest(),
                agent_pb2.GetDefaultModelForCliResponse,
            )
            assert default.model.model_id == "alpha"
        available = await cc.unary(
            client,
            "/aiserver.v1.AiService/AvailableModels",
            aiserver_pb2.AvailableModelsRequest(use_model_parameters=True),
            aiserver_pb2.AvailableModelsResponse,
        )
        assert list(available.model_names) == ["alpha", "beta"]
        a = available.models[0]
        assert a.context_token_limit == 200000 and a.supports_thinking and a.supports_agent
        assert available.models[1].context_token_limit == 32000
        assert available.composer_model_config.default_model == "alpha"
        for path in (
            "/aiserver.v1.ServerConfigService/GetServerConfig",
            "/aiserver.v1.AiService/GetServerConfig",
        ):
            sc = await cc.unary(
                client,
                path,
                aiserver_pb2.GetServerConfigRequest(),
                aiserver_pb2.GetServerConfigResponse,
            )
            assert sc.http2_config == aiserver_pb2.HTTP2_CONFIG_UNSPECIFIED
            assert not sc.HasField("agent_url_config")
        me = await cc.unary(
            client,
            "/aiserver.v1.DashboardService/GetMe",
            aiserver_pb2.GetMeRequest(),
            aiserver_pb2.GetMeResponse,
        )
        assert me.auth_id
        privacy = await cc.unary(
            client,
            "/aiserver.v1.DashboardService/GetUserPrivacyMode",
            aiserver_pb2.GetUserPrivacyModeRequest(),
            aiserver_pb2.GetUserPrivacyModeResponse,
        )
        assert privacy.privacy_mode == aiserver_pb2.PRIVACY_MODE_NO_STORAGE
        name = await cc.unary(
            client,
            "/agent.v1.AgentService/NameAgent",
            agent_pb2.NameAgentRequest(
                user_message="\n  Fix the flaky login test in CI please now\nmore"
            ),
            agent_pb2.NameAgentResponse,
        )
        assert name.name == "Fix the flaky login test in"


async def test_unary_json_codec_and_enveloped_request() -> None:
    async with server(config=make_config("http2 = false")) as srv, http1(srv) as client:
        sc = await cc.unary(
            client,
            "/aiserver.v1.ServerConfigService/GetServerConfig",
            aiserver_pb2.GetServerConfigRequest(),
            aiserver_pb2.GetServerConfigResponse,
            codec="json",
        )
        assert sc.http2_config == aiserver_pb2.HTTP2_CONFIG_FORCE_ALL_DISABLED
        # an enveloped body sent as application/proto (lenient decoding)
        body = cc.envelope(
            agent_pb2.NameAgentRequest(user_message="hello there").SerializeToString()
        )
        resp = await client.post(
            "/agent.v1.AgentService/NameAgent",
            content=body,
            headers={"content-type": "application/proto"},
        )
        assert agent_pb2.NameAgentResponse.FromString(resp.content).name == "hello there"
        # Connect-streaming framing for a unary method: answered the same way
        resp = await client.post(
            "/agent.v1.AgentService/NameAgent",
            content=body,
            headers={"content-type": "application/connect+proto"},
        )
        frames, _ = cc.split_frames(resp.content)
        assert agent_pb2.NameAgentResponse.FromString(frames[0].payload).name == "hello there"
        assert frames[1].flags == 0x02 and frames[1].payload == b"{}"


async def test_unknown_rpc_and_paths() -> None:
    async with server() as srv, http1(srv) as client:
        resp = await client.post(
            "/aiserver.v1.AiService/StreamCpp",
            content=b"",
            headers={"content-type": "application/proto"},
        )
        assert resp.status_code == 501 and resp.json()["code"] == "unimplemented"
        assert (await client.get("/nothing")).status_code == 404
        assert (await client.get("/healthz")).status_code == 200
        bad = await client.post(
            "/agent.v1.AgentService/GetUsableModels",
            content=b"\xff\xff\xff",
            headers={"content-type": "application/proto"},
        )
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
        gz = await client.post(
            "/agent.v1.AgentService/NameAgent",
            content=gzip.compress(
                agent_pb2.NameAgentRequest(user_message="zip").SerializeToString()
            ),
            headers={"content-type": "application/proto", "content-encoding": "gzip"},
        )
        assert agent_pb2.NameAgentResponse.FromString(gz.content).name == "zip"


async def test_unary_over_h2() -> None:
    async with server() as srv, h2(srv) as client:
        stream = await client.open(
            "/agent.v1.AgentService/GetUsableModels",
            {"content-type": "application/proto"},
            end_stream=True,
        )
        await stream.headers_event.wait()
        body = b""
        while (chunk := await asyncio.wait_for(stream.data.get(), 5)) is not None:
            body += chunk
        assert stream.result.status == 200
        assert len(agent_pb2.GetUsableModelsResponse.FromString(body).models) == 2


# ---------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------


async def test_auth_unary_rejected_before_body() -> None:
    config = make_config(f'auth_token = "{TOKEN}"')
    async with server(config=config) as srv:
        # HTTP/1.1: announce a huge body, send a few bytes, get the answer anyway
        reader, writer = await asyncio.open_connection(srv.host, srv.port)
        writer.write(
            b"POST /agent.v1.AgentService/GetUsableModels HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/proto\r\ncontent-length: 1000000000\r\n\r\nabc"
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 5)
        assert status.split(b" ")[1] == b"401"
        writer.close()
        async with http1(srv) as client:
            with pytest.raises(cc.ConnectCallError) as exc:
                await cc.unary(
                    client,
                    "/agent.v1.AgentService/GetUsableModels",
                    agent_pb2.GetUsableModelsRequest(),
                    agent_pb2.GetUsableModelsResponse,
                    token="wrong",
                )
            assert exc.value.status == 401 and exc.value.code == "unauthenticated"
            resp = await cc.append(client, rid(), 0, cc.run_request())
            assert resp.status_code == 401
            ok = await cc.unary(
                client,
                "/agent.v1.AgentService/GetUsableModels",
                agent_pb2.GetUsableModelsRequest(),
                agent_pb2.GetUsableModelsResponse,
                token=TOKEN,
            )
            assert len(ok.models) == 2
            assert (await client.get("/healthz")).status_code == 200  # open


@pytest.mark.parametrize("token", [TOKEN, None])
async def test_a_request_with_two_authorization_headers_is_refused(token: str | None) -> None:
    """Which of two credentials would count is a guess: neither does, in either order, for a
    unary call and for a stream, with a token configured and without one."""
    config = make_config(f'auth_token = "{token}"' if token else "")
    path = "/aiserver.v1.AiService/GetServerConfig"
    json_body = {"content-type": "application/json"}
    async with server(cc.echo_handler, config=config) as srv, http1(srv) as client:
        for pair in (("Bearer wrong", f"Bearer {TOKEN}"), (f"Bearer {TOKEN}", "Bearer wrong")):
            auth = [("authorization", value) for value in pair]
            r = await client.post(path, content=b"{}", headers=[*json_body.items(), *auth])
            assert r.status_code == 401
            assert r.json() == {
                "code": "unauthenticated",
                "message": "the request carries more than one Authorization header; "
                "send exactly one",
            }
        one = [*json_body.items(), ("authorization", f"Bearer {TOKEN}")]
        assert (await client.post(path, content=b"{}", headers=one)).status_code == 200
        stream = await client.post(
            "/agent.v1.AgentService/RunSSE",
            content=cc.envelope(aiserver_pb2.BidiRequestId(request_id=rid()).SerializeToString()),
            headers=[
                ("content-type", "application/connect+proto"),
                ("authorization", f"Bearer {TOKEN}"),
                ("authorization", f"Bearer {TOKEN}"),
            ],
        )
        assert b"more than one Authorization header" in stream.content


async def test_auth_streams_rejected_before_body() -> None:
    config = make_config(f'auth_token = "{TOKEN}"')
    async with server(cc.echo_handler, config=config) as srv:
        async with h2(srv) as client:
            stream = await client.open_run()  # headers only: no body was ever sent
            result = await stream.read_all()
            assert result.status == 200 and result.error is not None
            assert result.error["code"] == "unauthenticated"
            unary = await client.open(
                "/aiserver.v1.AiService/AvailableModels",
                {"content-type": "application/proto", "content-length": "999999999"},
            )
            await asyncio.wait_for(unary.headers_event.wait(), 5)
            assert unary.result.status == 401
            good = await client.open_run(token=TOKEN)
            await good.send(cc.run_request())
            assert (await good.read_all()).end == {}
        async with http1(srv) as client:
            async with cc.runsse(client, rid()) as stream:
                result = await stream.read_all()
            assert result.error is not None and result.error["code"] == "unauthenticated"
            r = rid()
            async with cc.runsse(client, r, token=TOKEN) as stream:
                await cc.append(client, r, 0, cc.run_request(), token=TOKEN)
                assert (await stream.read_all()).end == {}
