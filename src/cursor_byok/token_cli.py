"""`cursor-byok token add|list|revoke`: tokens per person, in the server's database.

Works while the server runs (another process on the same database): the server sees a new or
revoked token within access_tokens.REFRESH_S, and a revoked token's next model call is refused.
The secret is printed once, on stdout alone (so `$(cursor-byok token add …)` captures it);
everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime

from .access_tokens import TOKEN_NAME, new_secret, new_token_id, secret_hash
from .config import Config
from .llm.model_names import ModelNames, Resolved, Via
from .observability.dashboard_tokens import month_bounds
from .store.api import AccessTokenRecord, Store
from .store.backends import open_store
from .store.errors import StoreError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], config_help: str) -> None:
    token = sub.add_parser("token", help="tokens per person: add, list, revoke")
    verbs = token.add_subparsers(dest="token_command", required=True)
    add = verbs.add_parser("add", help="make a token for one person (shown once)")
    add.add_argument("name", help="who it is for (letters, digits, . _ @ -; up to 64)")
    add.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        help="the models it may use: ids or aliases, space- or comma-separated (default: all)",
    )
    add.add_argument(
        "--budget-usd",
        type=float,
        metavar="N",
        help="spend allowed per UTC calendar month, from the models' prices (default: none)",
    )
    add.add_argument("--rpm", type=int, metavar="N", help="model calls per minute (default: none)")
    listing = verbs.add_parser("list", help="the active tokens, their limits and this month's use")
    listing.add_argument("--all", action="store_true", help="revoked tokens too")
    revoke = verbs.add_parser("revoke", help="revoke a person's active token")
    revoke.add_argument("name")
    for verb in (add, listing, revoke):
        verb.add_argument("--config", help=config_help)
        verb.add_argument("--db", help="database (default: server.database)")


def _fail(message: str) -> int:
    print(f"cursor-byok: {message}", file=sys.stderr)
    return 1


def _models(config: Config, asked: list[str] | None) -> tuple[str, ...] | str:
    """The model names as given (validated against the served ones), or an error message."""
    if not asked:
        return ()
    names = [n.strip() for part in asked for n in part.split(",") if n.strip()]
    resolver = ModelNames(config.models.values())
    unknown = [
        n
        for n in names
        if not (isinstance(r := resolver.resolve(n), Resolved) and r.via is not Via.DEFAULT)
    ]
    if unknown:
        served = ", ".join(config.models) or "none are configured"
        return f"unknown model {', '.join(map(repr, unknown))}; this server offers: {served}"
    return tuple(dict.fromkeys(names))


def token_command(config: Config, args: argparse.Namespace) -> int:
    database = args.db or config.server.database
    try:
        return asyncio.run(_run(config, args, database))
    except StoreError as exc:
        return _fail(f"cannot use the database: {exc}")


async def _run(config: Config, args: argparse.Namespace, database: str) -> int:
    if args.token_command == "add":
        problem = _check_add(config, args)
        if problem is not None:
            return _fail(problem)
    store = await open_store(database)
    try:
        match args.token_command:
            case "add":
                return await _add(config, store, args)
            case "list":
                return await _list(store, include_revoked=args.all)
            case "revoke":
                return await _revoke(store, args.name)
            case other:
                return _fail(f"unknown token command {other!r}")
    finally:
        await store.close()


def _check_add(config: Config, args: argparse.Namespace) -> str | None:
    if not TOKEN_NAME.match(args.name):
        return (
            f"token name {args.name!r}: use 1 to 64 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    if args.budget_usd is not None and not args.budget_usd >= 0:
        return "--budget-usd must be a number of dollars, 0 or more"
    if args.rpm is not None and args.rpm < 1:
        return "--rpm must be 1 or more"
    models = _models(config, args.models)
    return models if isinstance(models, str) else None


async def _add(config: Config, store: Store, args: argparse.Namespace) -> int:
    models = _models(config, args.models)
    assert not isinstance(models, str)
    secret = new_secret()
    record = AccessTokenRecord(
        token_id=new_token_id(),
        name=args.name,
        secret_hash=secret_hash(secret),
        created_at_ms=int(time.time() * 1000),
        models=models,
        budget_usd=args.budget_usd,
        rpm=args.rpm,
    )
    saved = await store.add_access_token(record)
    if saved.outcome != "inserted":
        return _fail(
            f"a token named {args.name!r} is active; revoke it first "
            f"(cursor-byok token revoke {args.name})"
        )
    print(secret)
    print(
        f"token {args.name!r} added ({_limits(record)}). This is the only time its value is "
        "shown: give it to its owner, who sends it as `Authorization: Bearer <token>`.",
        file=sys.stderr,
    )
    return 0


def _limits(record: AccessTokenRecord) -> str:
    models = ", ".join(record.models) if record.models else "all models"
    budget = f"${record.budget_usd:.2f}/month" if record.budget_usd is not None else "no budget"
    rpm = f"{record.rpm} calls/min" if record.rpm is not None else "no rate limit"
    return f"{models}; {budget}; {rpm}"


async def _list(store: Store, *, include_revoked: bool) -> int:
    tokens = await store.list_access_tokens(include_revoked=include_revoked)
    start, end, month = month_bounds(int(time.time() * 1000))
    used = {u.token_id: u for u in await store.token_usage(start, end)}
    rows = [("NAME", "MODELS", "BUDGET/MONTH", f"SPENT {month}", "CALLS", "RPM", "CREATED")]
    for t in tokens:
        usage = used.get(t.token_id)
        created = datetime.fromtimestamp(t.created_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        if t.revoked_at_ms is not None:
            created += " (revoked)"
        rows.append(
            (
                t.name,
                ", ".join(t.models) or "all",
                f"${t.budget_usd:.2f}" if t.budget_usd is not None else "-",
                f"${usage.cost_usd:.4f}" if usage else "$0.0000",
                str(usage.llm_calls if usage else 0),
                str(t.rpm) if t.rpm is not None else "-",
                created,
            )
        )
    if len(rows) == 1:
        print("no tokens (add one with: cursor-byok token add NAME)", file=sys.stderr)
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return 0


async def _revoke(store: Store, name: str) -> int:
    revoked = await store.revoke_access_token(name, int(time.time() * 1000))
    if revoked is None:
        return _fail(f"no active token is named {name!r} (see: cursor-byok token list)")
    print(f"token {name!r} revoked; its next model call is refused", file=sys.stderr)
    return 0
