"""The container's HEALTHCHECK: GET /healthz of the server in this container, exit 0 on 200.

Standard library only, no proxy (a proxy set for the provider calls must not carry a loopback
probe), and no certificate check: the probe talks to its own container over loopback, where a
server certificate names the public host, not 127.0.0.1.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8700/healthz"


def healthy(url: str, timeout_s: float = 3.0) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(url, timeout=timeout_s) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


if __name__ == "__main__":
    sys.exit(0 if healthy(os.environ.get("CURSOR_BYOK_HEALTH_URL", DEFAULT_URL)) else 1)
