"""docs/troubleshooting.md is keyed by the server's messages word for word.

Each message below is made by the code that sends it (the model-name resolver, the Connect
authentication, the person-token limits over a real SQLite store, a provider adapter against
loopback servers that refuse, fail or stall, the loop, the storage endings, the configuration
and the listener). Every one must match a heading of the page (`…` standing for a name or a
number), and every heading must match one of them: a reworded message fails here until the
page says it again.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import msgspec
import pytest

from cursor_byok.config import ConfigError, load_config, parse_config
from cursor_byok.launch import listen_error
from cursor_byok.llm.deadlines import Deadline, missed
from cursor_byok.llm.model_names import ModelNames, Unknown
from cursor_byok.llm.models import Prices
from cursor_byok.loop import ToolResult, transition
from cursor_byok.loop.context import TurnContext
from cursor_byok.loop.window import Refusal
from cursor_byok.store.api import AccessTokenRecord, Reservation, ReservationTotals
from cursor_byok.store.errors import (
    BackendMissingError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
)
from cursor_byok.store.postgres.missing import missing_store
from cursor_byok.store.sqlite import SQLiteStore
from cursor_byok.transport.connect.http import REPEATED_AUTHORIZATION, auth_error_text
from cursor_byok.transport.runtime.access import TokenLimits
from cursor_byok.transport.runtime.conversation import Conversation, NotYours
from cursor_byok.transport.runtime.ending import storage_ending
from cursor_byok.transport.runtime.requests import ClientTimeout
from cursor_byok.transport.runtime.reservations import refusal_words
from tests.llm.test_upstream_http import HEAD_200_LENGTH, error_of, once
from tests.loop.loop_helpers import result, tool_call
from tests.loop.test_loop_transition import at_tools
from tests.paths import REPO
from tests.runtime.harness import MODEL
from tests.support.raw_server import Act, scripted

PAGE = REPO / "docs" / "troubleshooting.md"


def headings() -> list[str]:
    return re.findall(r"^### `(.+)`$", PAGE.read_text(encoding="utf-8"), flags=re.M)


def pattern(heading: str) -> re.Pattern[str]:
    return re.compile(".+".join(re.escape(part) for part in heading.split("…")), re.S)


def http_error(status: int, reason: str) -> bytes:
    body = b'{"error": {"message": "refused by the test"}}'
    return b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s" % (status, reason, len(body), body)


async def token_refusals(db: Path) -> list[str]:
    priced = msgspec.structs.replace(MODEL, prices=Prices(input=1.0))
    other = msgspec.structs.replace(MODEL, id="other", aliases=())
    store = await SQLiteStore.open(db)
    try:
        tokens = {
            "revoked": {"revoked_at_ms": 1},
            "scoped": {"models": (other.id,)},
            "unpriced": {"budget_usd": 5.0},
        }
        for name, limits in tokens.items():
            record = AccessTokenRecord(
                token_id=f"tok_{name}", name=name, secret_hash=name * 8, created_at_ms=0, **limits
            )  # type: ignore[arg-type]
            assert (await store.add_access_token(record)).outcome == "inserted"
        limits = TokenLimits(store, ModelNames((priced, other)), lambda: 1_700_000_000_000)
        asked = [
            ("tok_revoked", priced),
            ("tok_scoped", priced),
            ("tok_unpriced", MODEL),
        ]
        # The budget spent and the rate: the reservation's words (reservation_refusals).
        said = [(await limits.screen(token, model))[0] for token, model in asked]
    finally:
        await store.close()
    return [refusal.message for refusal in said if refusal is not None]


def reservation_refusals() -> list[str]:
    """The budget and rate refusals of a reservation the store refused (reservations.py)."""
    record = AccessTokenRecord(
        token_id="tok_a", name="ann", secret_hash="h" * 8, created_at_ms=0, budget_usd=1.0, rpm=2
    )
    reserve = Reservation(token_id="tok_a", amount_usd=0.5, budget_usd=1.0, rpm=2)
    now = 1_700_000_000_000
    said = []
    for totals in (
        ReservationTotals(spent_usd=0.7, reserved_usd=0.0, recent_calls=0, refused_by="budget"),
        ReservationTotals(spent_usd=0.2, reserved_usd=0.4, recent_calls=0, refused_by="budget"),
        ReservationTotals(spent_usd=1.0, reserved_usd=0.0, recent_calls=0, refused_by="budget"),
        ReservationTotals(
            spent_usd=0.0,
            reserved_usd=0.0,
            recent_calls=2,
            oldest_recent_ms=now - 30_000,
            refused_by="rate",
        ),
    ):
        said.append(refusal_words(record, reserve, totals, now)[1])
    return said


async def provider_errors() -> list[str]:
    said = []
    for status, reason in ((401, b"Unauthorized"), (404, b"Not Found"), (429, b"Too Many")):
        async with scripted([http_error(status, reason)]) as server:
            said.append(error_of(await once(server.port)).error_message)
    said.append(error_of(await once(9)).error_message)  # the discard port: nothing listens
    async with scripted([Act.HOLD], [HEAD_200_LENGTH + b"ab", Act.HOLD]) as server:
        said.append(error_of(await once(server.port, read=0.2)).error_message)
        said.append(error_of(await once(server.port, read=0.2)).error_message)
    said.append(missed("openai", Deadline.FIRST_OUTPUT, 300, answered=False))
    said.append(missed("openai", Deadline.FIRST_OUTPUT, 300, answered=True))
    said.append(missed("openai", Deadline.IDLE, 120, answered=True))
    return said


def loop_failures() -> list[str]:
    too_big = Refusal(window=8192, fixed=4300, rest=4100, answer=1024).message()
    state = at_tools([tool_call("a")], TurnContext(max_llm_calls=1))
    stopped = transition(state, ToolResult(message=result("a"))).command
    return [too_big, stopped.message.error_message or ""]  # type: ignore[union-attr]


def start_errors(cwd: Path) -> list[str]:
    said = []
    with pytest.raises(ConfigError) as none:
        load_config(None, env={}, cwd=cwd)
    said += none.value.lines()
    for text in (
        '[providers.o]\napi = "openai-chat"\napi_key_env = "OPENAI_API_KEY"\n'
        '[models.g]\nprovider = "o"\n',
        "[server]\nprot = 8700\n",
        '[server]\nhost = "0.0.0.0"\n[providers.l]\napi = "openai-chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\n[models.g]\nprovider = "l"\n',
    ):
        with pytest.raises(ConfigError) as bad:
            parse_config(text, env={})
        said += bad.value.lines()
    for code, port in ((errno.EADDRINUSE, 8700), (errno.EACCES, 80)):
        said.append(str(listen_error(OSError(code, "refused"), "127.0.0.1", port)))
    return said


def sign_in_page_errors() -> list[str]:
    """The page's error lines, from sign_in_page.py's HTML with its string literals joined."""
    source = (REPO / "src" / "cursor_byok" / "sign_in_page.py").read_text()
    joined = re.sub(r'"\s*\n\s*"', "", source)
    lines = re.findall(r"<p class=error>([^<]+)</p>", joined)
    lines += re.findall(r'error="([^"]+)"', joined)
    lines = [line for line in lines if "{" not in line]  # the template, not a message
    assert len(lines) >= 3
    return lines


async def produced(tmp_path: Path) -> list[str]:
    said = [
        Unknown("gpt-4", ("local", "gpt-5 (gpt-5-latest)")).message(),
        auth_error_text({}),
        auth_error_text({"authorization": REPEATED_AUTHORIZATION}),
        str(ClientTimeout("the context request", 30)),
    ]
    said += await token_refusals(tmp_path / "tokens.db")
    said += reservation_refusals()
    conversation = Conversation("c1", None, None, viewer="tok_a")  # type: ignore[arg-type]
    with pytest.raises(NotYours) as not_yours:
        conversation._check_owner("tok_b")
    said.append(str(not_yours.value))
    said.append(
        "request_id 'r1' belongs to a run someone else started"  # session_registry.SessionRegistry
    )
    said += await provider_errors()
    said += loop_failures()
    for error in (StoreFullError("db", "full"), StoreLockedError("db", "locked")):
        said.append(storage_ending(error).message)
    said.append(storage_ending(StoreIOError("db", "read failed")).message)
    said += start_errors(tmp_path)
    with pytest.raises(BackendMissingError) as missing:
        await missing_store("No module named 'psycopg'").open("postgresql://me:pw@db/cursor")
    said.append(str(missing.value))
    said += sign_in_page_errors()
    return said


async def test_every_message_is_a_heading_and_every_heading_a_message(tmp_path: Path) -> None:
    said = await produced(tmp_path)
    keyed = {heading: pattern(heading) for heading in headings()}
    assert len(keyed) >= 30
    unmatched = [m for m in said if not any(p.fullmatch(m) for p in keyed.values())]
    assert unmatched == [], "messages docs/troubleshooting.md does not name"
    unused = [h for h, p in keyed.items() if not any(p.fullmatch(m) for m in said)]
    assert unused == [], "headings no message of the code matches"


def test_a_reworded_message_is_caught() -> None:
    keyed = [pattern(h) for h in headings()]
    assert any(p.fullmatch(Unknown("x", ("a",)).message()) for p in keyed)
    assert not any(p.fullmatch("unknown model 'x'; served: a") for p in keyed)
