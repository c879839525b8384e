from __future__ import annotations

import datetime as dt
import io
import json
import logging
import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cursor_byok.llm.types import Usage
from cursor_byok.observability.logs import (
    _BARE_BEARER,
    _HEADER_VALUE,
    _MAY_HOLD_CREDENTIAL,
    _STANDARD_ATTRS,
    _URL_KEY,
    MASK,
    MIN_SECRET_LEN,
    JsonFormatter,
    RedactingFilter,
    TextFormatter,
    _extras,
    _kv,
    _may_hold_credential,
    install_redaction,
    log_run,
    redact_text,
    secrets_of,
    setup_logging,
)
from cursor_byok.transport.runtime.summary import RunSummary

from .helpers import (
    ALL_SECRETS,
    ANTHROPIC_KEY,
    AUTH_TOKEN,
    GEMINI_KEY,
    HEADER_SECRET,
    OPENAI_KEY,
    planted_config,
)

# Header values of credentials no config knows about: scrubbed by pattern.
FOREIGN_BEARER = "eyJhbGciOiJIUzI1NiJ9.FOREIGNjwtPAYLOAD.sig42"
FOREIGN_XAPI = "xk-FOREIGN-anthropic-style-9999"
FOREIGN_GOOG = "AIzaFOREIGNgoogKey00000000"
FOREIGN = (FOREIGN_BEARER, FOREIGN_XAPI, FOREIGN_GOOG)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


def test_secrets_of_collects_keys_token_and_sensitive_headers() -> None:
    found = secrets_of(planted_config())
    assert set(found) == set(ALL_SECRETS)
    assert "cursor-byok" not in found  # the X-Title header is not a secret


def test_redact_text_header_forms() -> None:
    cases = [
        f"Authorization: Bearer {FOREIGN_BEARER}",
        f"authorization=Bearer {FOREIGN_BEARER}",
        f"{{'authorization': 'Bearer {FOREIGN_BEARER}'}}",
        f'{{"x-api-key": "{FOREIGN_XAPI}"}}',
        f"[('x-api-key', '{FOREIGN_XAPI}')]",
        f"x-goog-api-key: {FOREIGN_GOOG}",
        f"GET https://generativelanguage.googleapis.com/v1beta/models?key={FOREIGN_GOOG}&alt=sse",
        f"sent Bearer {FOREIGN_BEARER} upstream",
    ]
    for text in cases:
        out = redact_text(text)
        assert not any(f in out for f in FOREIGN), (text, out)
        assert "***" in out


def emit_everything(log: logging.Logger) -> None:
    log.info("plain message with %s inside", OPENAI_KEY)
    log.info("key in the message itself: " + ANTHROPIC_KEY)
    log.warning("dict args %(k)s / %(t)s", {"k": GEMINI_KEY, "t": AUTH_TOKEN})
    log.info("headers %s", {"Authorization": f"Bearer {OPENAI_KEY}", "x-api-key": ANTHROPIC_KEY})
    log.info("tuple headers %r", [("x-goog-api-key", GEMINI_KEY), ("X-Custom-Auth", HEADER_SECRET)])
    log.info("foreign Authorization: Bearer %s and x-api-key: %s", FOREIGN_BEARER, FOREIGN_XAPI)
    log.info("url https://example.test/v1?key=%s", FOREIGN_GOOG)
    log.info(
        "with extra",
        extra={
            "api_key": OPENAI_KEY,
            "headers": {"authorization": f"Bearer {AUTH_TOKEN}"},
            "items": [ANTHROPIC_KEY, 3],
        },
    )
    try:
        raise RuntimeError(f"upstream said: invalid key {OPENAI_KEY} (token {AUTH_TOKEN})")
    except RuntimeError:
        log.exception("call failed for %s", GEMINI_KEY)
    try:
        raise ValueError(f"Authorization: Bearer {FOREIGN_BEARER}")
    except ValueError as exc:
        log.error("wrapped: %s", exc, exc_info=True)
    log.info("stack", stack_info=True, extra={"note": f"x-goog-api-key={GEMINI_KEY}"})
    log.info("bad format %d %d", HEADER_SECRET)  # a broken call must not leak its args


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_secret_reaches_any_output_line(fmt: str, restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging(fmt, "DEBUG", secrets=secrets_of(planted_config()), stream=stream)
    emit_everything(logging.getLogger("cursor_byok.test.redaction"))
    emit_everything(logging.getLogger("some.library"))  # other loggers go through it too
    out = stream.getvalue()
    lines = out.splitlines()
    assert len(lines) > 20
    for line in lines:
        for secret in (*ALL_SECRETS, *FOREIGN):
            assert secret not in line, (secret, line)
    assert out.count("***") >= 20
    assert "RuntimeError" in out and "Traceback" in out  # the exception is kept, scrubbed
    if fmt == "json":
        records = [json.loads(line) for line in lines if line.startswith("{")]
        assert len(records) == 24
        with_extra = [r for r in records if r["msg"] == "with extra"]
        assert with_extra[0]["api_key"] == "***"
        assert with_extra[0]["headers"] == {"authorization": "Bearer ***"}
        assert any("exc" in r and "***" in r["exc"] for r in records)


def test_filter_also_scrubs_preexisting_handlers(restore_logging: None) -> None:
    stream = io.StringIO()
    other = logging.getLogger("granian.like")
    handler = logging.StreamHandler(stream)
    other.addHandler(handler)
    other.propagate = False
    try:
        setup_logging("text", "INFO", secrets=[OPENAI_KEY], stream=io.StringIO())
        other.warning("access log with %s", OPENAI_KEY)
        assert OPENAI_KEY not in stream.getvalue() and "***" in stream.getvalue()
        assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
        setup_logging("text", "INFO", secrets=[OPENAI_KEY], stream=io.StringIO())
        assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    finally:
        other.removeHandler(handler)


def test_setup_logging_rejects_unknown_format() -> None:
    with pytest.raises(ValueError):
        setup_logging("xml")


def summary(**kw: object) -> RunSummary:
    base: dict[str, object] = dict(
        request_id="req-42",
        conversation_id="conv-7",
        model="gpt",
        provider="openai",
        outcome="ok",
        llm_calls=2,
        usage=Usage(input=100, output=40, cache_read=300, cache_write=100, reasoning=8),
        ttft_ms=321,
        duration_ms=4567,
        cost_usd=0.0123456789,
    )
    base.update(kw)
    return RunSummary(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_run_one_line_with_every_field(fmt: str, restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging(fmt, "INFO", stream=stream)
    log_run(summary())
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    line = lines[0]
    for part in (
        "req-42",
        "conv-7",
        "gpt",
        "openai",
        "321",
        "4567",
        "100",
        "40",
        "300",
        "0.6",
        "0.012346",
        "ok",
    ):
        assert part in line, part
    if fmt == "json":
        record = json.loads(line)
        assert record["level"] == "INFO" and record["logger"] == "cursor_byok.runs"
        run = record["run"]
        assert run["request_id"] == "req-42" and run["conversation_id"] == "conv-7"
        assert run["ttft_ms"] == 321 and run["duration_ms"] == 4567
        assert run["input_tokens"] == 100 and run["output_tokens"] == 40
        assert run["cache_read_tokens"] == 300 and run["cache_write_tokens"] == 100
        assert run["reasoning_tokens"] == 8
        assert run["cache_hit_ratio"] == 0.6
        assert run["cost_usd"] == 0.012346 and run["outcome"] == "ok"
    else:
        assert " INFO cursor_byok.runs: run request_id=req-42 " in line
        assert " run=" not in line  # its fields are the message already
        assert "cache_hit_ratio=0.6" in line


def test_log_run_says_fallbacks_only_when_there_were_some(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("text", "INFO", stream=stream)
    log_run(summary())
    log_run(summary(fallbacks=2))
    plain, fell_back = stream.getvalue().splitlines()
    assert "fallbacks=" not in plain
    assert " llm_calls=2 fallbacks=2 " in fell_back


def test_log_run_says_unpriced_calls_only_when_there_were_some(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("text", "INFO", stream=stream)
    log_run(summary())
    log_run(summary(unpriced_calls=1))
    plain, unpriced = stream.getvalue().splitlines()
    assert "unpriced_calls=" not in plain
    assert " cost_usd=0.012346 unpriced_calls=1" in unpriced  # not in its cost, it says so


def test_log_run_failure_is_a_warning_and_scrubbed(restore_logging: None) -> None:
    stream = io.StringIO()
    setup_logging("json", "INFO", secrets=[OPENAI_KEY], stream=stream)
    log_run(summary(outcome="failed", error=f"openai HTTP 401: bad key {OPENAI_KEY}", ttft_ms=None))
    record = json.loads(stream.getvalue())
    assert record["level"] == "WARNING"
    assert OPENAI_KEY not in stream.getvalue()
    assert record["run"]["error"] == "openai HTTP 401: bad key ***"


def test_reinstall_after_a_library_adds_handlers(restore_logging: None) -> None:
    setup_logging("json", "INFO", secrets=[OPENAI_KEY], stream=io.StringIO())
    late = logging.getLogger("late.library")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    late.addHandler(handler)
    late.propagate = False
    try:
        install_redaction()  # re-attaches the filter setup_logging made
        late.error("key %s", OPENAI_KEY)
        assert OPENAI_KEY not in stream.getvalue() and "***" in stream.getvalue()
    finally:
        late.removeHandler(handler)


_FRAGMENTS = [
    "Authorization: Bearer sk-live-123456789",
    "'authorization': 'Basic dXNlcjpwYXNz'",
    '("x-api-key", "abc123456789")',
    '"x-goog-api-key":"AIzaSy0123456789"',
    "proxy-authorization=token abcdef123",
    "bearer abcdefgh12345678",
    "https://h/v1?key=AIza999&alt=sse",
    "&access_token=tok_1234",
    "?api_key=zzz",
    "API-KEY: k-9",
    "run request_id=r-1 outcome=ok",
    " ",
    "key",
    "=",
    "Bearer",
    "\n",
    # Letters the regex's case folding matches to ASCII ones (LONG S ~ s, KELVIN SIGN ~ k):
    # lowering the text does not turn the first into `s`, so such text must take the regex.
    "https://h/v1?acce\u017fs_token=tok_5678",
    "x-api-\u212aey: k-10",
    "?\u212aey=AIza000",
    "\u017f",
    "\u212a",
    "\u00e9",
    "BEARER",
]


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=6), st.text(max_size=20))
def test_the_quick_check_never_skips_a_credential(parts: list[str], noise: str) -> None:
    """`redact_text` skips its three substitutions when one search finds nothing they could
    change: the result must be what the substitutions alone give, for any text."""
    text = noise.join(parts)
    full = _URL_KEY.sub(
        lambda m: f"{m.group(1)}{MASK}",
        _BARE_BEARER.sub(
            lambda m: f"{m.group(1)}{MASK}",
            _HEADER_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{MASK}", text),
        ),
    )
    assert redact_text(text) == full


@given(st.text(max_size=30), st.text(max_size=30))
def test_the_quick_check_agrees_with_its_regex(left: str, right: str) -> None:
    """The ASCII fast path of the quick check says what the regex says, for any neighbours of
    any of the words (their case-folding look-alikes included)."""
    for fragment in _FRAGMENTS:
        text = left + fragment + right
        assert _may_hold_credential(text) == bool(_MAY_HOLD_CREDENTIAL.search(text)), text


_SECRET_ALPHABET = st.characters(blacklist_characters="*", blacklist_categories=("Cs",))


@given(
    st.lists(
        st.text(_SECRET_ALPHABET, min_size=MIN_SECRET_LEN, max_size=24), min_size=1, max_size=3
    ),
    st.lists(st.text(max_size=12), min_size=2, max_size=5),
    st.sampled_from(["", "Authorization: Bearer ", "?access_token=", "\u212aey=", "\u00e9"]),
)
def test_a_configured_secret_is_masked_wherever_it_sits(
    secrets: list[str], neighbours: list[str], lead: str
) -> None:
    """Secrets embedded anywhere in a record (message, arguments, extras), between any
    neighbours, ASCII or not, never come out of the filter."""
    text = lead + secrets[0].join(neighbours) + "".join(secrets)
    record = logging.LogRecord("t", logging.INFO, "p", 1, "%s", (text,), None)
    record.detail = {"k": [text, 3], "n": None}
    record.note = text
    RedactingFilter(secrets).filter(record)
    assert record.detail["k"][1:] == [3] and record.detail["n"] is None
    for secret in secrets:
        assert secret not in record.getMessage()
        assert secret not in record.detail["k"][0]
        assert secret not in record.note
        assert secret not in redact_text(text, secrets)


def _record_at(created: float) -> logging.LogRecord:
    record = logging.LogRecord("t", logging.INFO, "p", 1, "m", None, None)
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0  # as LogRecord computes it
    return record


# Seconds and their neighbours: the cache of a second's text must follow every change of it.
_INSTANTS = st.one_of(
    st.floats(min_value=-1e9, max_value=4e9, allow_nan=False),
    st.integers(min_value=-10, max_value=2_000_000_000).flatmap(
        lambda s: st.sampled_from([s - 5e-7, s - 1e-9, float(s), s + 4e-7, s + 0.9995, s + 0.5])
    ),
)


@given(st.lists(_INSTANTS, min_size=1, max_size=12))
def test_the_timestamps_are_what_the_standard_formatting_writes(instants: list[float]) -> None:
    """One formatter for the whole sequence: its cached second never shows in a line of
    another second (text: `logging.Formatter.formatTime`; JSON: `datetime.isoformat`)."""
    text, js = TextFormatter(), JsonFormatter()
    for created in [*instants, *sorted(instants), *instants]:
        record = _record_at(created)
        assert text.formatTime(record) == logging.Formatter.formatTime(text, record), created
        iso = dt.datetime.fromtimestamp(created, dt.UTC).isoformat(timespec="milliseconds")
        assert js.timestamp(created) == iso, created


@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.none()))
def test_a_number_field_is_written_as_json_writes_it(value: float | int | bool | None) -> None:
    expected = json.dumps(value) if not isinstance(value, bool) else "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value):
        assert _kv(value) == repr(value) == expected
    elif value is not None and not isinstance(value, bool) and not isinstance(value, float):
        assert _kv(value) == str(value)
    else:
        assert _kv(value) == expected


_EXTRA_NAME = st.text("abcdefgh_", min_size=1, max_size=6).filter(
    lambda n: n not in _STANDARD_ATTRS
)


@given(st.lists(st.tuples(_EXTRA_NAME, st.integers()), max_size=6))
def test_the_extras_are_the_fields_set_beyond_a_records_own(fields: list[tuple[str, int]]) -> None:
    record = logging.LogRecord("t", logging.INFO, "p", 1, "m", None, None)
    for name, value in fields:
        setattr(record, name, value)
    expected = {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS}
    assert list(_extras(record).items()) == list(expected.items())
