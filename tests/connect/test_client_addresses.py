"""Whose allowance a run counts against (issue 27, point 6): the person its token names, else
its address; behind `server.trusted_proxies` the rightmost X-Forwarded-For hop outside them,
the header ignored from any other peer. Over real HTTP on loopback: each client's connections
leave from its own 127/8 address, the "proxy" being 127.0.0.1."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from cursor_byok.config import ConfigError, parse_config
from cursor_byok.launch import RunningServer, running_server
from cursor_byok.transport.connect.clients import ClientAddresses, allowance_key, parse_networks
from cursor_byok.transport.connect.sessions import TransportLimits
from cursor_byok.transport.cursor.proto import aiserver_pb2
from tests.connect.test_app import make_config
from tests.connect.test_person_tokens import People
from tests.support import connect_client as cc

PER_CLIENT = 4
LIMITS = TransportLimits(
    heartbeat_interval=0.2,
    reap_interval=0.05,
    max_unstarted_per_client=PER_CLIENT,
    unstarted_timeout=60,
)
PROXY = "127.0.0.1"


@asynccontextmanager
async def serving(
    extra: str = 'trusted_proxies = ["127.0.0.1/32"]', people: People | None = None
) -> AsyncIterator[RunningServer]:
    async with running_server(
        make_config(extra), cc.echo_handler, limits=LIMITS, authenticator=people
    ) as srv:
        yield srv


@asynccontextmanager
async def client_from(srv: RunningServer, address: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=10, transport=transport) as c:
        yield c


async def open_waiting(
    client: httpx.AsyncClient, headers: dict[str, str] | None = None, count: int = 1
) -> list[int]:
    """`count` runs that wait for their first message (an append with append_seqno 1)."""
    statuses = []
    for _ in range(count):
        resp = await cc.append(client, str(uuid.uuid4()), 1, cc.heartbeat(), headers=headers)
        statuses.append(resp.status_code)
    return statuses


def unstarted(srv: RunningServer, key: str) -> int:
    assert srv.app is not None
    return srv.app.registry.ledger.unstarted(key)


async def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_allowance() -> None:
    async with serving() as srv, client_from(srv, PROXY) as proxy:
        alice = {"x-forwarded-for": "10.0.0.7"}
        bob = {"x-forwarded-for": "10.0.0.8"}
        assert await open_waiting(proxy, alice, PER_CLIENT) == [200] * PER_CLIENT
        assert await open_waiting(proxy, bob, PER_CLIENT) == [200] * PER_CLIENT
        assert await open_waiting(proxy, alice) == [429]  # alice's own bound still holds
        assert unstarted(srv, "10.0.0.7") == unstarted(srv, "10.0.0.8") == PER_CLIENT
        assert unstarted(srv, PROXY) == 0
        # The client wrote a hop of its own: the proxy appended the real one, which counts.
        chain = {"x-forwarded-for": "10.0.0.8, 192.0.2.50"}
        assert await open_waiting(proxy, chain) == [200]
        assert unstarted(srv, "192.0.2.50") == 1 and unstarted(srv, "10.0.0.8") == PER_CLIENT


async def test_the_header_from_a_peer_that_is_not_a_trusted_proxy_is_ignored() -> None:
    """The spoof: a client sends X-Forwarded-For straight to the server to get a fresh
    allowance per request; its own address counts all the same."""
    async with serving() as srv, client_from(srv, "127.0.0.9") as spoofer:
        statuses = []
        for n in range(PER_CLIENT + 2):
            statuses += await open_waiting(spoofer, {"x-forwarded-for": f"10.1.0.{n}"})
        assert statuses == [200] * PER_CLIENT + [429, 429]
        assert unstarted(srv, "127.0.0.9") == PER_CLIENT
        assert all(unstarted(srv, f"10.1.0.{n}") == 0 for n in range(PER_CLIENT + 2))


async def test_hops_the_trusted_proxies_wrote_are_skipped_and_repeated_headers_joined() -> None:
    extra = 'trusted_proxies = ["127.0.0.1/32", "10.9.0.0/16"]'
    async with serving(extra) as srv, client_from(srv, PROXY) as proxy:
        # client 198.51.100.4 -> proxy 10.9.1.1 -> proxy 127.0.0.1 -> server
        chain = {"x-forwarded-for": "6.6.6.6, 198.51.100.4, 10.9.1.1"}
        assert await open_waiting(proxy, chain) == [200]
        assert unstarted(srv, "198.51.100.4") == 1 and unstarted(srv, "6.6.6.6") == 0
        # Two header lines (a proxy that adds its own instead of appending): read in order.
        request_id = str(uuid.uuid4())
        req = aiserver_pb2.BidiAppendRequest(
            append_seqno=1, data=cc.heartbeat().SerializeToString().hex()
        )
        req.request_id.request_id = request_id
        raw = [("x-forwarded-for", "6.6.6.6"), ("x-forwarded-for", "203.0.113.9, 10.9.2.2")]
        resp = await proxy.post(
            cc.APPEND,
            content=req.SerializeToString(),
            headers=[*raw, ("content-type", "application/proto"), ("x-request-id", request_id)],
        )
        assert resp.status_code == 200, resp.text
        assert unstarted(srv, "203.0.113.9") == 1


async def test_without_trusted_proxies_the_peer_counts_whatever_the_header_says() -> None:
    async with serving(extra="") as srv, client_from(srv, PROXY) as proxy:
        statuses = []
        for n in range(PER_CLIENT + 1):
            statuses += await open_waiting(proxy, {"x-forwarded-for": f"10.2.0.{n}"})
        assert statuses == [200] * PER_CLIENT + [429]
        assert unstarted(srv, PROXY) == PER_CLIENT


async def test_with_person_tokens_each_person_has_their_own_allowance() -> None:
    people = People({"cbk_alice": "tok_alice", "cbk_bob": "tok_bob"})
    async with serving(extra="", people=people) as srv, client_from(srv, PROXY) as office:
        alice = {"authorization": "Bearer cbk_alice"}
        bob = {"authorization": "Bearer cbk_bob"}
        assert await open_waiting(office, alice, PER_CLIENT) == [200] * PER_CLIENT
        assert await open_waiting(office, bob, PER_CLIENT) == [200] * PER_CLIENT
        assert await open_waiting(office, alice) == [429]
        assert unstarted(srv, "person:tok_alice") == PER_CLIENT
        assert unstarted(srv, PROXY) == 0


def test_address_rules() -> None:
    addresses = ClientAddresses(parse_networks(["127.0.0.1/32", "fd00::/8"]))

    def of(peer: str, *values: str) -> str:
        return addresses.address(peer, [(b"X-Forwarded-For", v.encode()) for v in values])

    assert of("127.0.0.1", "10.0.0.1") == "10.0.0.1"
    assert of("::ffff:127.0.0.1", "10.0.0.1") == "10.0.0.1"  # a mapped peer is the same peer
    assert of("127.0.0.1") == "127.0.0.1"  # no header: the proxy itself
    assert of("127.0.0.1", "[2001:db8::1]:443") == "2001:db8::1"
    assert of("127.0.0.1", "192.0.2.1:5555") == "192.0.2.1"
    assert of("127.0.0.1", "2001:db8::2, fd00::1") == "2001:db8::2"
    assert of("127.0.0.1", "fd00::1, 127.0.0.1") == "fd00::1"  # all trusted: the leftmost
    assert of("127.0.0.1", "garbage, fd00::1") == "fd00::1"  # not a proxy's hop: stop there
    assert of("127.0.0.1", ", , 192.0.2.7 ,") == "192.0.2.7"
    assert of("127.0.0.2", "10.0.0.1") == "127.0.0.2"  # not trusted: the header is ignored
    assert ClientAddresses().address("127.0.0.1", [(b"x-forwarded-for", b"1.2.3.4")]) == (
        "127.0.0.1"
    )
    assert allowance_key("tok_a", "10.0.0.1") == "person:tok_a"
    assert allowance_key(None, "2001:db8:1:2::5") == "2001:db8:1:2::/64"


def test_trusted_proxies_must_be_cidrs() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config('[server]\ntrusted_proxies = ["10.0.0.0/8", "nginx", "10.0.0.0/33"]\n', env={})
    assert list(info.value.problems) == [
        "server.trusted_proxies: 'nginx' is not a CIDR (127.0.0.1/32)",
        "server.trusted_proxies: '10.0.0.0/33' is not a CIDR (127.0.0.1/32)",
    ]
    config = parse_config('[server]\ntrusted_proxies = ["127.0.0.1", "::1/128"]\n', env={})
    assert config.server.trusted_proxies == ["127.0.0.1", "::1/128"]
