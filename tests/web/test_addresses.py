"""The address policy (web/addresses.py) as a table: every form of a non-public address is
refused with the reason the model reads, public addresses pass, and a URL host's IPv4
spellings (decimal, octal, hex, fewer parts) are read as a browser reads them. The same forms
through a real fetch, in a namespace with only `lo`: test_fetch_netns.py."""

from __future__ import annotations

import ipaddress

import pytest

from cursor_byok.web.addresses import (
    HostError,
    allowed_by,
    host_address,
    is_public_address,
    refusal,
)

METADATA = "link-local (cloud metadata answers there)"

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("0.0.0.0", "unspecified ('this network')"),
    ("::", "unspecified"),
    ("10.1.2.3", "private"),
    ("172.16.5.5", "private"),
    ("192.168.0.10", "private"),
    ("fd00::1", "private (unique local; AWS metadata answers at fd00:ec2::254)"),
    ("fd00:ec2::254", "private (unique local; AWS metadata answers at fd00:ec2::254)"),
    ("169.254.169.254", METADATA),
    ("fe80::1", "link-local"),
    ("fec0::1", "site-local"),
    ("100.64.0.1", "shared address space (carrier NAT)"),
    ("100.100.100.200", "shared address space (carrier NAT)"),  # Alibaba's metadata
    ("168.63.129.16", "a cloud metadata address"),  # Azure's wire server, in public space
    ("192.0.0.192", "reserved (IETF protocol assignments)"),  # Oracle's metadata
    ("192.0.2.1", "reserved (documentation)"),
    ("198.18.0.1", "reserved (benchmarking)"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "reserved (documentation)"),
    ("100::1", "reserved (discard)"),
    ("2001:2::1", "reserved (benchmarking)"),
    ("4000::1", "reserved (outside IPv6 global unicast, 2000::/3)"),
    # IPv4 carried in IPv6: judged by what it carries.
    ("::ffff:169.254.169.254", f"an IPv4-mapped address carrying 169.254.169.254: {METADATA}"),
    ("::ffff:127.0.0.1", "an IPv4-mapped address carrying 127.0.0.1: loopback"),
    ("::ffff:0:a9fe:a9fe", f"an IPv4-translated address carrying 169.254.169.254: {METADATA}"),
    ("::ffff:0:7f00:1", "an IPv4-translated address carrying 127.0.0.1: loopback"),
    ("::a9fe:a9fe", f"an IPv4-compatible address carrying 169.254.169.254: {METADATA}"),
    ("::7f00:1", "an IPv4-compatible address carrying 127.0.0.1: loopback"),
    ("::10.0.0.1", "an IPv4-compatible address carrying 10.0.0.1: private"),
    ("64:ff9b::a9fe:a9fe", f"a NAT64 address carrying 169.254.169.254: {METADATA}"),
    ("64:ff9b::7f00:1", "a NAT64 address carrying 127.0.0.1: loopback"),
    ("64:ff9b::c0a8:1", "a NAT64 address carrying 192.168.0.1: private"),
    ("64:ff9b:1::a9fe:a9fe", "NAT64 local-use (maps to whatever the local translator says)"),
    ("64:ff9b:1:ffff::8.8.8.8", "NAT64 local-use (maps to whatever the local translator says)"),
    ("2002:a9fe:a9fe::1", f"a 6to4 address carrying 169.254.169.254: {METADATA}"),
    ("2002:7f00:1::", "a 6to4 address carrying 127.0.0.1: loopback"),
    ("2001:0:a9fe:a9fe::", f"a Teredo address carrying 169.254.169.254 (its server): {METADATA}"),
    # Teredo's client is stored inverted: ~0x7f000001 = 0x80fffffe.
    ("2001:0:808:808::80ff:fffe", "a Teredo address carrying 127.0.0.1 (its client): loopback"),
]


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_every_non_public_form_is_refused_with_its_reason(address: str, why: str) -> None:
    ip = ipaddress.ip_address(address)
    assert refusal(ip) == why
    assert not is_public_address(ip)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "64:ff9b::808:808",  # NAT64 of a public address: how an IPv6-only network reaches IPv4
        "::ffff:8.8.8.8",
        "2002:808:808::1",  # 6to4 of a public address
        "2001:0:808:808::f7f7:f7f7",  # Teredo, server and client 8.8.8.8
        "2001:4:112::1",  # AS112-v6: IANA says globally reachable
    ],
)
def test_public_addresses_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("169.254.169.254", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),  # decimal
        ("0251.0376.0251.0376", "169.254.169.254"),  # octal
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),  # hex per part
        ("0xA9FEA9FE", "169.254.169.254"),  # hex whole
        ("169.254.43518", "169.254.169.254"),  # three parts, the last fills two bytes
        ("169.16689662", "169.254.169.254"),  # two parts
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("127.0.0.1.", "127.0.0.1"),  # a trailing dot
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("::ffff:7f00:1", "::ffff:7f00:1"),
        ("[fe80::1%25eth0]", "fe80::1"),
    ],
)
def test_a_hosts_address_spellings_are_read_as_a_browser_reads_them(
    host: str, address: str
) -> None:
    assert host_address(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize("host", ["example.com", "localhost", "1e3", "a1.b2", "0x7g.example"])
def test_names_are_names(host: str) -> None:
    assert host_address(host) is None


@pytest.mark.parametrize("host", ["1.2.3.4.5", "0x100.1", "256.1.1.1", "1.2.3.4294967296", "a.1"])
def test_a_number_that_is_no_address_is_an_error(host: str) -> None:
    with pytest.raises(HostError):
        host_address(host)


def test_the_operators_allowed_networks_widen_the_policy_and_nothing_else() -> None:
    assert allowed_by([]) is is_public_address
    allowed = allowed_by(["127.0.0.1/32", "fd00:1::/64"])
    for address in ("127.0.0.1", "::ffff:127.0.0.1", "fd00:1::5", "8.8.8.8"):
        assert allowed(ipaddress.ip_address(address)), address
    for address in ("127.0.0.2", "::ffff:127.0.0.2", "10.0.0.1", "fd00:2::5", "169.254.169.254"):
        assert not allowed(ipaddress.ip_address(address)), address
