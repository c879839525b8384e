"""What `cursor-byok token list` (its table and its `--json`) and `cursor-byok doctor` say about
the tokens per person. It reads the store and the configuration; it never writes.

A person's use this month sums the calls of every token of its chain of rotations
(store: `person_id`); it is shown on the person's newest token, and a token that a rotation
replaced shows none of it, so the rows add up.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .access_tokens import ACCESS_SETTING, Access, access_of
from .config import Config
from .llm.model_names import ModelNames, Resolved, Via
from .llm.models import usd
from .observability.dashboard_tokens import month_bounds
from .store.api import AccessTokenRecord, Store, TokenUsage

JSON_VERSION = 1  # the shape of `token list --json` (docs/operations.md); bump on a change
Status = Literal["OK", "WARN", "FAIL"]


@dataclass(frozen=True)
class TokenRow:
    record: AccessTokenRecord
    usage: TokenUsage | None  # the person's this month, on its newest token only
    replaced: bool  # revoked by `token rotate` (its person has a newer token)


@dataclass(frozen=True)
class TokenReport:
    month: str  # the UTC calendar month of the use shown (2026-12)
    renews_ms: int  # when the next month begins
    access: Access
    rows: tuple[TokenRow, ...]  # by name, the newest token of a name first
    setting: str | None  # the stored access mode as written; None: never set

    @property
    def active(self) -> tuple[TokenRow, ...]:
        return tuple(r for r in self.rows if r.record.revoked_at_ms is None)


async def read_report(
    store: Store, *, include_revoked: bool = False, now_ms: int | None = None
) -> TokenReport:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    start, end, month = month_bounds(now_ms)
    every = await store.list_access_tokens(include_revoked=True)
    setting = await store.get_server_setting(ACCESS_SETTING)
    used = {u.token_id: u for u in await store.token_usage(start, end)}
    newest: dict[str, AccessTokenRecord] = {}
    for t in every:
        if t.person not in newest or t.created_at_ms > newest[t.person].created_at_ms:
            newest[t.person] = t
    rows = tuple(
        TokenRow(
            record=t,
            usage=used.get(t.person) if newest[t.person] is t else None,
            replaced=t.revoked_at_ms is not None and newest[t.person] is not t,
        )
        for t in every
        if include_revoked or t.revoked_at_ms is None
    )
    return TokenReport(month, end, access_of(setting, bool(every)), rows, setting)


# -- the models of a token ------------------------------------------------------------------


@dataclass(frozen=True)
class ModelScope:
    """What a token's model names come to in a configuration."""

    ids: tuple[str, ...]  # the served model ids it may use (every one when `everything`)
    unknown: tuple[str, ...] = ()  # its names that no served model answers to
    everything: bool = False  # no models limit

    def unpriced(self, config: Config) -> tuple[str, ...]:
        return tuple(i for i in self.ids if config.models[i].prices is None)


def model_scope(config: Config, names: Iterable[str]) -> ModelScope:
    """Resolved as a client's model names are (an exact id, an alias, then ignoring case); a
    name only the default model would serve allows nothing: a scope never falls back."""
    asked = tuple(names)
    if not asked:
        return ModelScope(ids=tuple(config.models), everything=True)
    resolver = ModelNames(config.models.values())
    ids: dict[str, None] = {}
    unknown: list[str] = []
    for name in asked:
        found = resolver.resolve(name)
        if isinstance(found, Resolved) and found.via is not Via.DEFAULT:
            ids[found.model.id] = None
        else:
            unknown.append(name)
    return ModelScope(ids=tuple(ids), unknown=tuple(unknown))


# -- token list -----------------------------------------------------------------------------


def limits_text(record: AccessTokenRecord) -> str:
    models = ", ".join(record.models) if record.models else "all models"
    budget = f"{usd(record.budget_usd)}/month" if record.budget_usd is not None else "no budget"
    rpm = f"{record.rpm} calls/min" if record.rpm is not None else "no rate limit"
    return f"{models}; {budget}; {rpm}"


def access_text(report: TokenReport, config: Config) -> str:
    if report.access is Access.OPEN:
        if config.server.auth_token:
            return (
                "access: open, but server.auth_token is set: every request still needs it or "
                "a person token"
            )
        return "access: open: requests without a token are let in (cursor-byok token close)"
    return (
        "access: closed: every request needs a person token or server.auth_token (revoking "
        "the last token keeps it so; cursor-byok token open lets requests without one in)"
    )


def table(report: TokenReport) -> list[str]:
    head = ("NAME", "MODELS", "BUDGET/MONTH", f"SPENT {report.month}", "CALLS", "RPM", "CREATED")
    cells: list[tuple[str, ...]] = [head]
    for row in report.rows:
        t, usage = row.record, row.usage
        created = datetime.fromtimestamp(t.created_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        if t.revoked_at_ms is not None:
            created += " (rotated)" if row.replaced else " (revoked)"
        cells.append(
            (
                t.name,
                ", ".join(t.models) or "all",
                usd(t.budget_usd) if t.budget_usd is not None else "-",
                usd(usage.cost_usd) if usage else usd(0.0),
                str(usage.llm_calls if usage else 0),
                str(t.rpm) if t.rpm is not None else "-",
                created,
            )
        )
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def as_json(report: TokenReport) -> dict[str, Any]:
    """The documented shape of `token list --json` (docs/operations.md, "Tokens per person")."""
    tokens = []
    for row in report.rows:
        t, u = row.record, row.usage
        tokens.append(
            {
                "name": t.name,
                "active": t.revoked_at_ms is None,
                "models": list(t.models),
                "budget_usd": t.budget_usd,
                "rpm": t.rpm,
                "created_at_ms": t.created_at_ms,
                "revoked_at_ms": t.revoked_at_ms,
                "replaced": row.replaced,
                "llm_calls": u.llm_calls if u else 0,
                "input_tokens": u.input_tokens if u else 0,
                "output_tokens": u.output_tokens if u else 0,
                "cache_read_tokens": u.cache_read_tokens if u else 0,
                "cache_write_tokens": u.cache_write_tokens if u else 0,
                "cost_usd": u.cost_usd if u else 0.0,
                "unpriced_calls": u.unpriced_calls if u else 0,
            }
        )
    return {
        "version": JSON_VERSION,
        "month": report.month,
        "access": report.access.value,
        "tokens": tokens,
    }


# -- doctor ---------------------------------------------------------------------------------


@dataclass
class Finding:
    """One row of doctor's table (doctor.Check without the import)."""

    name: str
    status: Status
    detail: str
    next_step: str = ""


def findings(report: TokenReport, config: Config) -> list[Finding]:
    """Doctor's rows about tokens: the active ones and their spend, the access mode, and each
    token that can call nothing (or less than its owner may think)."""
    active = report.active
    rows: list[Finding] = []
    if not active:
        rows.append(Finding("tokens", "OK", f"no active token; {access_text(report, config)}"))
    else:
        shown = [_spend_line(r) for r in active[:12]]
        more = f", and {len(active) - 12} more" if len(active) > 12 else ""
        rows.append(
            Finding(
                "tokens",
                "OK",
                f"{len(active)} active, this month ({report.month}, UTC): {', '.join(shown)}"
                f"{more}; {access_text(report, config)}",
            )
        )
    nobody = report.access is Access.CLOSED and not active and not config.server.auth_token
    if nobody:
        rows.append(
            Finding(
                "access",
                "WARN",
                "access is closed, no token is active and server.auth_token is not set: the "
                "server refuses every request",
                "cursor-byok token add NAME (or cursor-byok token open, on loopback)",
            )
        )
    if report.access is Access.OPEN and active and not config.server.auth_token:
        rows.append(
            Finding(
                "access",
                "WARN",
                "access is open: requests without a token are let in, outside every token's limits",
                "cursor-byok token close, if that is not what you meant",
            )
        )
    for row in active:
        rows.extend(_token_problems(row, report, config))
    return rows


def _spend_line(row: TokenRow) -> str:
    t = row.record
    spent = usd(row.usage.cost_usd if row.usage else 0.0)
    budget = f" of {usd(t.budget_usd)}" if t.budget_usd is not None else ""
    return f"{t.name} {spent}{budget}"


def _token_problems(row: TokenRow, report: TokenReport, config: Config) -> list[Finding]:
    t = row.record
    name = f"token {t.name}"
    scope = model_scope(config, t.models)
    found: list[Finding] = []
    again = f"cursor-byok token revoke {t.name}, then add it again with served models"
    if not scope.ids:
        unknown = ", ".join(scope.unknown) or "none"
        found.append(
            Finding(
                name,
                "WARN",
                f"none of its models is served by this configuration ({unknown}): every run "
                "made with it is refused",
                f"{again} (served: {', '.join(config.models) or 'none'})",
            )
        )
        return found
    if scope.unknown:
        found.append(
            Finding(
                name,
                "WARN",
                f"some of its models are not served: {', '.join(scope.unknown)}; it may use "
                f"{', '.join(scope.ids)}",
                again,
            )
        )
    if t.budget_usd is not None:
        unpriced = scope.unpriced(config)
        if len(unpriced) == len(scope.ids):
            found.append(
                Finding(
                    name,
                    "WARN",
                    f"it has a budget and none of the models it may use has prices "
                    f"({', '.join(unpriced)}): every model call is refused",
                    f"add prices to [models.{unpriced[0]}] (and the others), or revoke it and "
                    "add it again without --budget-usd",
                )
            )
        elif unpriced:
            found.append(
                Finding(
                    name,
                    "WARN",
                    f"it has a budget, and these models of it have no prices, so it cannot "
                    f"call them: {', '.join(unpriced)}",
                    f"add prices to [models.{unpriced[0]}]",
                )
            )
        spent = row.usage.cost_usd if row.usage else 0.0
        if spent >= t.budget_usd:
            renews = datetime.fromtimestamp(report.renews_ms / 1000, tz=UTC)
            found.append(
                Finding(
                    name,
                    "WARN",
                    f"it has spent its monthly budget: {usd(spent)} of {usd(t.budget_usd)} in "
                    f"{report.month} (UTC); its calls are refused until {renews:%Y-%m-%d}",
                )
            )
    return found


__all__ = [
    "JSON_VERSION",
    "Finding",
    "ModelScope",
    "TokenReport",
    "TokenRow",
    "access_text",
    "as_json",
    "findings",
    "limits_text",
    "model_scope",
    "read_report",
    "table",
]
