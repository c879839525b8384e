"""Who a request counts as for the per-client limits (ledger.py): the person its token names,
else its address, the peer's or, behind trusted reverse proxies, the one they forwarded.

Behind a proxy every request's peer is the proxy, so keyed by peer a whole team shares one
client's allowance. `X-Forwarded-For` says who the proxy's own peer was, but anyone can send
that header: it is read only from a peer in `server.trusted_proxies`, and then only its hops
that those proxies appended. Each proxy appends its own peer, so walking the list from the
right, the first hop outside the trusted networks is the client; the hops left of it are
whatever the client wrote and are never believed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from .ledger import client_key

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

FORWARDED_FOR = b"x-forwarded-for"
MAX_HOPS = 32  # proxies in front of one server; past them the last trusted hop answers
PERSON_PREFIX = "person:"  # a client key that is a principal, never an address


def parse_networks(cidrs: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The networks of `server.trusted_proxies` (config.py has checked each is a CIDR)."""
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs)


def _address(text: str) -> IPAddress | None:
    """A hop as proxies write it: an address, an IPv6 one maybe in brackets, maybe a port."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # IPv4 with a port
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class ClientAddresses:
    """The client address of each request, given the trusted proxies' networks."""

    def __init__(self, trusted: Sequence[IPNetwork] = ()) -> None:
        self._trusted = tuple(trusted)

    def _is_trusted(self, address: IPAddress) -> bool:
        return any(address in network for network in self._trusted)

    def address(self, peer: str, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The client's address: `peer` unless it is a trusted proxy, then the rightmost
        `X-Forwarded-For` hop outside the trusted networks (every such header, in order)."""
        if not self._trusted or not peer:
            return peer
        current = _address(peer)
        if current is None or not self._is_trusted(current):
            return peer
        values = [v.decode("latin-1") for k, v in headers if k.lower() == FORWARDED_FOR]
        hops = [h for value in values for h in value.split(",") if h.strip()]
        for hop in reversed(hops[-MAX_HOPS:]):
            address = _address(hop)
            if address is None:  # not written by a proxy: the one right of it answers
                break
            current = address
            if not self._is_trusted(address):
                break
        return str(current)


def allowance_key(principal: str | None, address: str) -> str:
    """Whose allowance a request's runs count against: the person its token names, else its
    address (ledger.client_key: IPv6 by /64)."""
    if principal:
        return f"{PERSON_PREFIX}{principal}"
    return client_key(address)
