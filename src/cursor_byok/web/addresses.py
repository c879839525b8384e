"""Which addresses the server may connect to when a model, a client or a page chose them.

One policy for every such connection (WebFetch's server-side fetch and each of its redirects;
nothing else the server does connects to an address it did not get from the operator):
public unicast only. Refused: loopback, private, link-local (where cloud metadata answers),
shared (100.64.0.0/10), reserved, documentation, benchmarking, multicast, unspecified, and the
metadata addresses that sit in public space. An IPv6 address that carries an IPv4 address
(IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`,
NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::`, Teredo's server and client) is judged by
the IPv4 address it carries; NAT64's local-use prefix `64:ff9b:1::/48` maps to whatever the
operator's translator says, so it is refused whole. IPv6 outside the global unicast block
`2000::/3` is refused.

The tables are written out here (from IANA's special-purpose registries) rather than taken
from `ipaddress`'s `is_global`, whose answers changed between Python patch releases and which
judges none of the embeddings above.

A URL's host may spell an IPv4 address as browsers read it (WHATWG URL, "IPv4 parser"): one to
four dot-separated parts, each decimal, octal (leading 0) or hex (0x), the last filling the
remaining bytes: `2852039166`, `0251.0376.0251.0376`, `0xa9fea9fe` and `169.254.43518` are all
169.254.169.254. `host_address` reads every such spelling, so the check never depends on what
the system resolver makes of it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["IPAddress", "allowed_by", "host_address", "is_public_address", "refusal"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class _Block:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    what: str


_IPV4_REFUSED = tuple(
    _Block(_V4(net), what)
    for net, what in (
        ("0.0.0.0/8", "unspecified ('this network')"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (carrier NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata answers there)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
        ("192.0.2.0/24", "reserved (documentation)"),
        ("192.88.99.0/24", "reserved (6to4 relay anycast)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "reserved (benchmarking)"),
        ("198.51.100.0/24", "reserved (documentation)"),
        ("203.0.113.0/24", "reserved (documentation)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        # Public space, answered by the cloud host itself: Azure's wire server.
        ("168.63.129.16/32", "a cloud metadata address"),
    )
)

_IPV6_REFUSED = tuple(
    _Block(_V6(net), what)
    for net, what in (
        ("64:ff9b:1::/48", "NAT64 local-use (maps to whatever the local translator says)"),
        ("100::/64", "reserved (discard)"),
        ("2001:2::/48", "reserved (benchmarking)"),
        ("2001:10::/28", "reserved (ORCHID)"),
        ("2001:db8::/32", "reserved (documentation)"),
        ("3fff::/20", "reserved (documentation)"),
        ("fc00::/7", "private (unique local; AWS metadata answers at fd00:ec2::254)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)
# 2001::/23 is IETF protocol assignments, reachable only where IANA says so.
_IETF_V6 = _V6("2001::/23")
_IETF_V6_GLOBAL = tuple(
    _V6(n) for n in ("2001:1::1/128", "2001:1::2/128", "2001:3::/32", "2001:4:112::/48")
)
_GLOBAL_UNICAST_V6 = _V6("2000::/3")

# IPv6 forms that carry an IPv4 address in their low 32 bits.
_LOW32 = tuple(
    _Block(_V6(net), what)
    for net, what in (
        ("::ffff:0:0/96", "an IPv4-mapped address"),
        ("::ffff:0:0:0/96", "an IPv4-translated address"),
        ("64:ff9b::/96", "a NAT64 address"),
        ("::/96", "an IPv4-compatible address"),
    )
)
_SIX_TO_FOUR = _V6("2002::/16")
_TEREDO = _V6("2001::/32")


def refusal(address: IPAddress) -> str | None:
    """Why the server will not connect to `address` (None: a public unicast address)."""
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_refusal(address)
    address = ipaddress.IPv6Address(int(address))  # the zone (%eth0) changes nothing
    if int(address) <= 1:  # before ::/96 below, which holds both
        return "unspecified" if int(address) == 0 else "loopback"
    for block in _LOW32:
        if address in block.network:
            return _carried(block.what, ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address in _SIX_TO_FOUR:
        return _carried("a 6to4 address", ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF))
    if address in _TEREDO:
        server = ipaddress.IPv4Address((int(address) >> 64) & 0xFFFFFFFF)
        client = ipaddress.IPv4Address(~int(address) & 0xFFFFFFFF)
        return _carried("a Teredo address", server, "server") or _carried(
            "a Teredo address", client, "client"
        )
    for block in _IPV6_REFUSED:
        if address in block.network:
            return block.what
    if address in _IETF_V6 and not any(address in net for net in _IETF_V6_GLOBAL):
        return "reserved (IETF protocol assignments)"
    if address not in _GLOBAL_UNICAST_V6:
        return "reserved (outside IPv6 global unicast, 2000::/3)"
    return None


def is_public_address(address: IPAddress) -> bool:
    """Whether the server may connect to `address` (see `refusal`)."""
    return refusal(address) is None


def allowed_by(networks: Sequence[str]) -> Callable[[IPAddress], bool]:
    """The policy widened by the operator's `[web_fetch] allowed_networks` (CIDRs): an address
    in one of them is allowed too, however it is spelled (an IPv4-mapped form of an allowed
    IPv4 address is allowed as well)."""
    nets = [ipaddress.ip_network(n, strict=False) for n in networks]
    if not nets:
        return is_public_address

    def allowed(address: IPAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in net for net in nets) or is_public_address(address)

    return allowed


def _ipv4_refusal(address: ipaddress.IPv4Address) -> str | None:
    for block in _IPV4_REFUSED:
        if address in block.network:
            return block.what
    return None


def _carried(form: str, inner: ipaddress.IPv4Address, role: str = "") -> str | None:
    why = _ipv4_refusal(inner)
    if why is None:
        return None
    whose = f" (its {role})" if role else ""
    return f"{form} carrying {inner}{whose}: {why}"


class HostError(ValueError):
    """A host that looks like an IPv4 address but is not a valid one."""


def host_address(host: str) -> IPAddress | None:
    """The address a URL's host spells (IPv6 in brackets or not, IPv4 in any spelling a
    browser reads), None for a name. Raises `HostError` for a number that is no address."""
    bare = host.strip()
    if bare.startswith("[") and bare.endswith("]"):
        bare = bare[1:-1]
    if ":" in bare:
        try:
            return ipaddress.IPv6Address(bare.split("%", 1)[0])
        except ValueError:
            raise HostError(f"{host!r} is not a valid IPv6 address") from None
    return _ipv4_spelling(bare)


def _ipv4_spelling(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()  # a trailing dot
    if not parts or _number(parts[-1]) is None:
        return None  # the last label is not a number: a name (WHATWG's "ends in a number")
    if len(parts) > 4:
        raise HostError(f"{host!r} has more than four parts of an IPv4 address")
    numbers: list[int] = []
    for part in parts:
        number = _number(part)
        if number is None:
            raise HostError(f"{host!r} is not a valid IPv4 address")
        numbers.append(number)
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise HostError(f"{host!r} is out of the IPv4 range")
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def _number(part: str) -> int | None:
    if not part or not part.isascii():
        return None
    text, base = part, 10
    if text[:2] in ("0x", "0X"):
        text, base = text[2:], 16
    elif len(text) > 1 and text[0] == "0":
        text, base = text[1:], 8
    if not text:
        return 0  # "0x" alone is zero
    try:
        return int(text, base) if text.isalnum() else None
    except ValueError:
        return None
