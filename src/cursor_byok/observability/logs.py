"""Logging set-up: readable text by default, JSON lines on request, secrets scrubbed from both.

- `setup_logging(format, level, secrets=...)` configures the root logger once.
- `log_run(summary, logger)` writes the one line per run (request, conversation, model, TTFT,
  duration, tokens, cache hit ratio, cost, outcome).
- `RedactingFilter(secrets_of(config))` replaces every configured secret (provider API keys,
  sensitive provider headers, the server's auth token) and every credential header value
  (`Authorization`, `x-api-key`, `x-goog-api-key`, `api-key`, a `key=` URL parameter) with
  `***` in the message, its arguments, the exception and stack text and any `extra` field.
  It is attached to handlers, so records of every logger that reach them are scrubbed.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any, Literal

from ..config import Config
from ..store.backends import database_secrets
from .metrics import cache_hit_ratio

if TYPE_CHECKING:
    from ..transport.runtime.summary import RunSummary

LogFormat = Literal["text", "json"]
MASK = "***"
MIN_SECRET_LEN = 4
RUN_LOGGER = "cursor_byok.runs"

_SENSITIVE_HEADER = re.compile(r"auth|key|token|secret|cookie|signature", re.IGNORECASE)

# `Authorization: Bearer x`, `'authorization': 'Bearer x'`, `("x-api-key", "x")`,
# `"x-goog-api-key":"x"`, `authorization=Basic x` ... the value (after an optional scheme) goes.
_HEADER_VALUE = re.compile(
    r"""(?ix)
    (\b(?:proxy-)?authorization|\bx-api-key|\bx-goog-api-key|\bapi-key)   # header name
    (["']?\s*[:=,]\s*["']?\s*)                                          # separator
    ((?:bearer|basic|token|key)\s+)?                                    # optional scheme
    ([^\s"',;)}\]]+)                                                    # the credential
    """
)
_BARE_BEARER = re.compile(r"(?i)(\bbearer\s+)([A-Za-z0-9._~+/=-]{8,})")
_URL_KEY = re.compile(r"(?i)([?&](?:key|api_key|apikey|access_token)=)([^&\s\"'#]+)")

# Attributes every LogRecord has; anything else on a record came in through `extra`.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None)).keys()
) | {"message", "asctime", "taskName"}


def secrets_of(config: Config, database: str | None = None) -> tuple[str, ...]:
    """Every secret a config holds: provider keys, sensitive provider and model headers, search
    backends' keys, the server's auth token, the password of a PostgreSQL `database` (and of
    `database`, a --db given instead). Longest first, so a secret that contains another goes
    whole."""
    found: set[str] = set(database_secrets(config.server.database))
    if database:
        found.update(database_secrets(database))
    if config.server.auth_token:
        found.add(config.server.auth_token)
    for provider in config.providers.values():
        if provider.api_key:
            found.add(provider.api_key)
        for name, value in provider.headers.items():
            if _SENSITIVE_HEADER.search(name) and value:
                found.add(value)
    for model in config.models.values():
        for name, value in model.settings.extra_headers.items():
            if _SENSITIVE_HEADER.search(name) and value:
                found.add(value)
    for backend in config.web_search.backends.values():
        if key := getattr(backend, "api_key", None):
            found.add(key)
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_LEN), key=len, reverse=True))


# Every text the three patterns above can change contains one of these: one search decides
# whether the three substitutions are needed (most log lines need none).
_MAY_HOLD_CREDENTIAL = re.compile(r"(?i)authorization|api-key|bearer|key=|access_token=")


def _may_hold_credential(text: str) -> bool:
    """Whether `_MAY_HOLD_CREDENTIAL` finds something in `text`. ASCII text (nearly every log
    line) is lowered and searched for the words with `in`, far cheaper than the regex; other
    text goes through the regex, whose case folding also matches some non-ASCII letters to
    ASCII ones (U+212A KELVIN SIGN to `k`, U+017F LONG S to `s`), which lowering does not."""
    if text.isascii():
        lowered = text.lower()  # the words spelled out: cheaper than any() over a generator
        return (
            "authorization" in lowered
            or "api-key" in lowered
            or "bearer" in lowered
            or "key=" in lowered
            or "access_token=" in lowered
        )
    return _MAY_HOLD_CREDENTIAL.search(text) is not None


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_LEN and secret in text:
            text = text.replace(secret, MASK)
    return _scrub_credentials(text)


def _scrub_credentials(text: str) -> str:
    if not _may_hold_credential(text):
        return text
    text = _HEADER_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{MASK}", text)
    text = _BARE_BEARER.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return _URL_KEY.sub(lambda m: f"{m.group(1)}{MASK}", text)


class RedactingFilter(logging.Filter):
    """Scrubs secrets from a record in place; never drops a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: tuple[str, ...] = tuple(
            sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
        )

    def redact(self, text: str) -> str:
        for secret in self.secrets:  # all long enough already
            if secret in text:
                text = text.replace(secret, MASK)
        return _scrub_credentials(text)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record (or leak its args)
            message = f"{record.msg!s} (unformattable arguments)"
        record.msg = self.redact(message)
        record.args = None
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        attrs = record.__dict__
        for name in attrs.keys() - _STANDARD_ATTRS:  # the extras, found in one pass
            attrs[name] = self._redact_value(attrs[name])
        return True

    def _redact_value(self, value: object) -> object:
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {str(k): self._redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._redact_value(v) for v in value]
        text = str(value)
        clean = self.redact(text)
        return clean if clean != text else value


class TextFormatter(logging.Formatter):
    """`2026-11-30 04:10:30,123 INFO cursor_byok.runs: message key=value ...`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._second: tuple[float, str] = (math.nan, "")  # a whole second and its text

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """What `logging.Formatter.formatTime` writes, the seconds' part formatted once per
        second (strftime of a struct_time costs more than the rest of the line's prefix)."""
        if datefmt:
            return super().formatTime(record, datefmt)
        created = record.created
        second = math.floor(created)  # the second localtime() takes (it floors)
        cached = self._second
        if cached[0] != second:
            text = time.strftime(self.default_time_format, self.converter(created))
            cached = self._second = (second, text)
        return f"{cached[1]},{int(record.msecs):03d}"

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        extras = _extras(record, _NOT_IN_TEXT)
        if extras:
            line += " " + " ".join(f"{k}={_kv(v)}" for k, v in extras.items())
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, extras, exc (when any)."""

    def __init__(self) -> None:
        super().__init__()
        self._second: tuple[float, str] = (math.nan, "")  # a whole UTC second, its ISO text

    def timestamp(self, created: float) -> str:
        """`datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`, the
        seconds' part formatted once per second. The microseconds are rounded half to even
        the way `fromtimestamp` rounds them, a rounding to 1,000,000 carrying to the next
        second as it does there."""
        fraction, whole = math.modf(created)
        second, micros = int(whole), round(fraction * 1e6)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        elif micros < 0:  # before 1970
            second, micros = second - 1, micros + 1_000_000
        cached = self._second
        if cached[0] != second:
            text = _dt.datetime.fromtimestamp(second, _dt.UTC).isoformat(timespec="seconds")
            cached = self._second = (second, text.removesuffix("+00:00"))
        return f"{cached[1]}.{micros // 1000:03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _extras(record).items():
            out.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False)


def _extras(record: logging.LogRecord, own: frozenset[str] = _STANDARD_ATTRS) -> dict[str, Any]:
    """The record's `extra` fields (its attributes not in `own`), in the order they were set.
    Their names are found with one set difference (in C); only a record that has some is
    walked again for their order."""
    attrs = record.__dict__
    names = attrs.keys() - own
    if not names:
        return {}
    return {k: v for k, v in attrs.items() if k in names}


# The text line leaves out the `run` extra: the run line's message already says it all.
_NOT_IN_TEXT = _STANDARD_ATTRS | {"run"}


_NEEDS_QUOTES = re.compile(r'[\s"=]')
_float_repr = float.__repr__


def _kv(value: object) -> str:
    if type(value) is int:
        return str(value)
    if type(value) is float:  # what json.dumps writes for a finite float, without its encoder
        return _float_repr(value) if math.isfinite(value) else json.dumps(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return json.dumps(value) if isinstance(value, float) else str(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or _NEEDS_QUOTES.search(text):
        return json.dumps(text)
    return text


def setup_logging(
    format: LogFormat | str = "text",
    level: int | str = logging.INFO,
    *,
    secrets: Iterable[str] = (),
    stream: IO[str] | None = None,
) -> RedactingFilter:
    """Configure the root logger: one stream handler (stderr) with the chosen format and the
    redacting filter. Handlers other libraries already attached get the filter too. Calling it
    again replaces the handler it installed before. Returns the filter."""
    if format not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {format!r}")
    redactor = RedactingFilter(secrets)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter())
    handler.addFilter(redactor)
    setattr(handler, "_cursor_byok", True)  # noqa: B010
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_cursor_byok", False):
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    install_redaction(redactor)
    return redactor


_installed: RedactingFilter | None = None


def install_redaction(redactor: RedactingFilter | None = None) -> None:
    """Attach the filter (default: the one `setup_logging` made last) to every handler that
    exists now (root and named loggers, e.g. the HTTP server's own), replacing any
    RedactingFilter attached before. Call it again after a library configured its own
    handlers (granian's Server() does so in its constructor)."""
    global _installed
    redactor = redactor or _installed
    if redactor is None:
        return
    _installed = redactor
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for lg in loggers:
        for handler in lg.handlers:
            for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
                handler.removeFilter(old)
            handler.addFilter(redactor)


def run_fields(summary: RunSummary, token: str | None = None) -> dict[str, Any]:
    """`token`: the name of the person token the run was made under (a run without one has
    no `token` field, nor `refused_by`)."""
    usage = summary.usage
    ratio = cache_hit_ratio(usage.input, usage.cache_read, usage.cache_write)
    person: dict[str, Any] = {}
    if token is not None:
        person["token"] = token
        if summary.refused_by:
            person["refused_by"] = summary.refused_by
    return {
        "request_id": summary.request_id,
        "conversation_id": summary.conversation_id,
        "model": summary.model,
        "provider": summary.provider,
        "outcome": summary.outcome,
        "llm_calls": summary.llm_calls,
        "fallbacks": summary.fallbacks,
        "ttft_ms": summary.ttft_ms,
        "duration_ms": summary.duration_ms,
        "input_tokens": usage.input,
        "output_tokens": usage.output,
        "cache_read_tokens": usage.cache_read,
        "cache_write_tokens": usage.cache_write,
        "reasoning_tokens": usage.reasoning,
        "cache_hit_ratio": None if ratio is None else round(ratio, 4),
        "cost_usd": round(summary.cost_usd, 6),
        "unpriced_calls": summary.unpriced_calls,  # made without prices: not in cost_usd
        **person,
        "error": summary.error,
    }


def log_run(
    summary: RunSummary, logger: logging.Logger | None = None, token: str | None = None
) -> None:
    """One line per run: INFO when it ended ok or was canceled, WARNING otherwise. In JSON
    format the fields are also under the `run` key. `token`: see `run_fields`."""
    logger = logger or logging.getLogger(RUN_LOGGER)
    fields = run_fields(summary, token)
    parts = []
    for key, value in fields.items():
        if value is None and key in ("error", "ttft_ms", "cache_hit_ratio"):
            continue
        if key in ("fallbacks", "unpriced_calls") and not value:  # the usual run: no word
            continue
        parts.append(f"{key}={_kv(value)}")
    level = logging.INFO if summary.outcome in ("ok", "canceled") else logging.WARNING
    logger.log(level, "run %s", " ".join(parts), extra={"run": fields})
