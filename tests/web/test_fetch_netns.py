"""Every form of a non-public address, fetched by the server's real page fetcher directly and
after a redirect, inside a network namespace that has only `lo`: nothing else exists there, so
a miss cannot reach anything beyond this machine's loopback, and a listener on every loopback
address counts what a miss would reach. Each case counts the connects and name lookups the
fetcher made (Python's audit events, tests/web/netns_probe.py): a refused form makes no
connect at all, and a name is looked up exactly once (the connection would go to the checked
address, never to a second lookup's).

Names come from the namespace's own /etc/hosts (`ip netns exec` mounts /etc/netns/NAME/hosts
over it), so a name resolving to NAT64, IPv4-compatible or 6to4 forms of the metadata address
goes through the system resolver as it would in production. Needs root to make the namespace;
skipped, saying why, only where namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO

HOSTS = """\
127.0.0.1 localhost
::1 localhost
169.254.169.254 metadata.test
64:ff9b::a9fe:a9fe nat64-metadata.test
::a9fe:a9fe compat-metadata.test
::ffff:0:a9fe:a9fe translated-metadata.test
::ffff:169.254.169.254 mapped-metadata.test
2002:a9fe:a9fe::1 sixtofour-metadata.test
2001:0:a9fe:a9fe:: teredo-metadata.test
64:ff9b:1::a9fe:a9fe nat64-local.test
10.0.0.1 private.test
8.8.8.8 mixed.test
127.0.0.1 mixed.test
"""

# (id, URL with {port}, an address the refusal must name)
LITERALS = [
    ("nat64-metadata", "http://[64:ff9b::a9fe:a9fe]:{port}/", "169.254.169.254"),
    ("nat64-loopback", "http://[64:ff9b::7f00:1]:{port}/", "127.0.0.1"),
    ("nat64-local-use", "http://[64:ff9b:1::a9fe:a9fe]:{port}/", "NAT64 local-use"),
    ("ipv4-compatible-metadata", "http://[::a9fe:a9fe]:{port}/", "169.254.169.254"),
    ("ipv4-compatible-loopback", "http://[::7f00:1]:{port}/", "127.0.0.1"),
    ("ipv4-mapped-metadata", "http://[::ffff:169.254.169.254]:{port}/", "169.254.169.254"),
    ("ipv4-mapped-loopback", "http://[::ffff:127.0.0.1]:{port}/", "127.0.0.1"),
    ("ipv4-translated-metadata", "http://[::ffff:0:a9fe:a9fe]:{port}/", "169.254.169.254"),
    ("ipv4-translated-loopback", "http://[::ffff:0:7f00:1]:{port}/", "127.0.0.1"),
    ("6to4-metadata", "http://[2002:a9fe:a9fe::1]:{port}/", "169.254.169.254"),
    ("6to4-loopback", "http://[2002:7f00:1::]:{port}/", "127.0.0.1"),
    ("teredo-server-metadata", "http://[2001:0:a9fe:a9fe::]:{port}/", "169.254.169.254"),
    ("teredo-client-loopback", "http://[2001:0:808:808::80ff:fffe]:{port}/", "127.0.0.1"),
    ("decimal-metadata", "http://2852039166:{port}/", "169.254.169.254"),
    ("decimal-loopback", "http://2130706433:{port}/", "127.0.0.1"),
    ("octal-metadata", "http://0251.0376.0251.0376:{port}/", "169.254.169.254"),
    ("octal-loopback", "http://0177.0.0.1:{port}/", "127.0.0.1"),
    ("hex-metadata", "http://0xa9fea9fe:{port}/", "169.254.169.254"),
    ("hex-parts-loopback", "http://0x7f.0x0.0x0.0x1:{port}/", "127.0.0.1"),
    ("short-loopback", "http://127.1:{port}/", "127.0.0.1"),
    ("short-metadata", "http://169.254.43518:{port}/", "169.254.169.254"),
    ("loopback", "http://127.0.0.1:{port}/", "127.0.0.1"),
    ("loopback-other", "http://127.0.0.2:{port}/", "127.0.0.2"),
    ("loopback-v6", "http://[::1]:{port}/", "::1"),
    ("unspecified", "http://0.0.0.0:{port}/", "0.0.0.0"),
    ("unspecified-v6", "http://[::]:{port}/", "unspecified"),
    ("private", "http://10.0.0.1:{port}/", "10.0.0.1"),
    ("private-192", "http://192.168.1.1:{port}/", "192.168.1.1"),
    ("link-local-metadata", "http://169.254.169.254:{port}/", "169.254.169.254"),
    ("link-local-v6", "http://[fe80::1]:{port}/", "fe80::1"),
    ("unique-local-aws-metadata", "http://[fd00:ec2::254]:{port}/", "fd00:ec2::254"),
    ("shared", "http://100.64.0.1:{port}/", "shared address space"),
    ("azure-wire-server", "http://168.63.129.16:{port}/", "metadata"),
    ("reserved", "http://240.0.0.1:{port}/", "240.0.0.1"),
    ("multicast", "http://224.0.0.1:{port}/", "multicast"),
    ("multicast-v6", "http://[ff02::1]:{port}/", "multicast"),
]
NAMES = [
    ("name-localhost", "http://localhost:{port}/", "loopback"),
    ("name-metadata", "http://metadata.test:{port}/", "169.254.169.254"),
    ("name-nat64-metadata", "http://nat64-metadata.test:{port}/", "169.254.169.254"),
    ("name-ipv4-compatible", "http://compat-metadata.test:{port}/", "169.254.169.254"),
    ("name-ipv4-translated", "http://translated-metadata.test:{port}/", "169.254.169.254"),
    ("name-ipv4-mapped", "http://mapped-metadata.test:{port}/", "169.254.169.254"),
    ("name-6to4", "http://sixtofour-metadata.test:{port}/", "169.254.169.254"),
    ("name-teredo", "http://teredo-metadata.test:{port}/", "169.254.169.254"),
    ("name-nat64-local-use", "http://nat64-local.test:{port}/", "NAT64 local-use"),
    ("name-private", "http://private.test:{port}/", "10.0.0.1"),
    ("name-one-of-two-loopback", "http://mixed.test:{port}/", "127.0.0.1"),
]
FORMS = LITERALS + NAMES
VIAS = ("direct", "redirect")
CONTROLS = [
    ("control-loopback", "http://127.0.0.1:{port}/", "unguarded"),
    ("control-ipv4-mapped", "http://[::ffff:127.0.0.1]:{port}/", "unguarded"),
    ("control-decimal", "http://2130706433:{port}/", "unguarded"),
]


def _ip(*args: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    inside = ["ip", "netns", "exec", namespace, "ip"] if namespace is not None else ["ip"]
    command = [*inside, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture(scope="module")
def lo_only_namespace() -> Iterator[str]:
    """A fresh network namespace holding only `lo` (up), its own hosts file and a resolver
    that answers nothing; removed afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` (iproute2): network namespaces cannot be made here")
    if os.geteuid() != 0:
        pytest.skip("making a network namespace needs root")
    name = f"cbyok-fetch-{os.getpid()}-{secrets.token_hex(3)}"
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"network namespaces are unavailable here: {made.stderr.strip()}")
    etc = Path("/etc/netns") / name
    try:
        etc.mkdir(parents=True)
        (etc / "hosts").write_text(HOSTS)
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")  # no DNS server in there
        up = _ip("link", "set", "lo", "up", namespace=name)
        assert up.returncode == 0, up.stderr
        links = _ip("-o", "link", "show", namespace=name).stdout.splitlines()
        assert [line.split(":")[1].strip() for line in links] == ["lo"], links
        yield name
    finally:
        _ip("netns", "del", name)
        shutil.rmtree(etc, ignore_errors=True)


@pytest.fixture(scope="module")
def probed(lo_only_namespace: str) -> dict[str, dict[str, Any]]:
    """Every case fetched once, in one probe process inside the namespace."""
    cases = [
        {"id": f"{via}:{form}", "url": url, "via": via} for form, url, _ in FORMS for via in VIAS
    ] + [{"id": form, "url": url, "via": via} for form, url, via in CONTROLS]
    run = subprocess.run(
        ["ip", "netns", "exec", lo_only_namespace, sys.executable, "-m", "tests.web.netns_probe"],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return {result["id"]: result for result in json.loads(run.stdout)}


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize(("form", "url", "named"), FORMS, ids=[f[0] for f in FORMS])
def test_every_form_is_refused_before_any_connect(
    probed: dict[str, dict[str, Any]], form: str, url: str, named: str, via: str
) -> None:
    got = probed[f"{via}:{form}"]
    assert got["said"].startswith("refused: "), got
    assert named in got["said"], got
    assert got["said"].endswith("the server fetches public addresses only"), got
    # Direct: not one connect. After a redirect: only the one to the redirecting page.
    assert got["connects"] == ([] if via == "direct" else ["127.88.0.1"]), got
    assert got["victim_accepted"] == 0, got
    # A literal is never looked up; a name exactly once (what is checked is what is used).
    is_name = (form, url, named) in NAMES
    host = url.split("//", 1)[1].rsplit(":", 1)[0]
    assert got["lookups"] == ([host] if is_name else []), got


@pytest.mark.parametrize(("form", "url", "via"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_the_harness_sees_the_connect_a_miss_would_make(
    probed: dict[str, dict[str, Any]], form: str, url: str, via: str
) -> None:
    """With the policy off, the same forms do reach the loopback listener: the counts above
    would catch a miss."""
    got = probed[form]
    assert got["victim_accepted"] == 1, got
    assert got["connects"], got
