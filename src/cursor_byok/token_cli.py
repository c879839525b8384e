"""`cursor-byok token add|list|revoke|rotate|open|close`: tokens per person, in the server's
database (a SQLite file or PostgreSQL, as `serve` opens it).

Works while the server runs (another process on the same database): the server sees a new,
revoked or rotated token, and a change of access, within access_tokens.REFRESH_S; a revoked
token's next model call is refused. A secret is printed once, on stdout alone (so
`$(cursor-byok token add …)` captures it); everything else goes to stderr. Every mistake is
one line, `cursor-byok: …`, and exit status 1; no database password is ever printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time

from .access_tokens import (
    ACCESS_SETTING,
    REFRESH_S,
    Access,
    new_secret,
    new_token_id,
    secret_hash,
    valid_name,
)
from .config import Config
from .start_check import moved_database
from .store.api import AccessTokenRecord, Store
from .store.backends import open_store, redact_database
from .store.errors import StoreError
from .token_report import access_text, as_json, limits_text, model_scope, read_report, table

MAX_RPM = 100_000
MAX_BUDGET_USD = 1_000_000.0
_WHOLE = re.compile(r"[0-9]{1,12}")
DB_HELP = "SQLite file or postgresql:// URL (default: server.database)"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], config_help: str) -> None:
    token = sub.add_parser(
        "token", help="tokens per person: add, list, revoke, rotate; open or close the server"
    )
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
        metavar="N",
        help="spend allowed per UTC calendar month, from the models' prices (default: none)",
    )
    add.add_argument("--rpm", metavar="N", help="model calls per minute (default: none)")
    listing = verbs.add_parser("list", help="the active tokens, their limits and this month's use")
    listing.add_argument("--all", action="store_true", help="revoked and rotated tokens too")
    listing.add_argument("--json", action="store_true", help="one JSON document on stdout")
    revoke = verbs.add_parser("revoke", help="revoke a person's active token")
    revoke.add_argument("name")
    rotate = verbs.add_parser(
        "rotate", help="give a person a new secret (shown once); the old one is refused"
    )
    rotate.add_argument("name")
    opened = verbs.add_parser(
        "open", help="let requests without a token in (a loopback server without auth_token)"
    )
    closed = verbs.add_parser("close", help="make every request need a token (the default)")
    for verb in (add, listing, revoke, rotate, opened, closed):
        verb.add_argument("--config", help=config_help)
        verb.add_argument("--db", help=DB_HELP)


def _fail(*problems: str) -> int:
    for problem in problems:
        print(f"cursor-byok: {problem}", file=sys.stderr)
    return 1


def _note(text: str) -> None:
    print(text, file=sys.stderr)


def _shown(name: str) -> str:
    """A name as an error quotes it: escaped, and cut when long."""
    text = repr(name)
    return text if len(text) <= 70 else text[:60] + "…' (" + str(len(name)) + " characters)"


def token_command(config: Config, args: argparse.Namespace) -> int:
    database: str = args.db or config.server.database
    if args.db is None and (moved := moved_database(config)) is not None:
        return _fail(moved)
    if args.token_command == "add":
        problems = check_add(config, args)
        if problems:
            return _fail(*problems)
    try:
        return asyncio.run(_run(config, args, database))
    except StoreError as exc:
        return _fail(f"cannot use the database: {redact_database(str(exc), database)}")


async def _run(config: Config, args: argparse.Namespace, database: str) -> int:
    store = await open_store(database)
    try:
        match args.token_command:
            case "add":
                return await _add(config, store, args)
            case "list":
                return await _list(config, store, include_revoked=args.all, json_out=args.json)
            case "revoke":
                return await _revoke(config, store, args.name)
            case "rotate":
                return await _rotate(store, args.name)
            case "open" | "close":
                access = Access.OPEN if args.token_command == "open" else Access.CLOSED
                return await _set_access(config, store, access)
            case other:
                return _fail(f"unknown token command {other!r}")
    finally:
        await store.close()


# -- add ------------------------------------------------------------------------------------


def _model_names(asked: list[str] | None) -> list[str] | None:
    if asked is None:
        return None
    return [n.strip() for part in asked for n in part.split(",") if n.strip()]


def check_add(config: Config, args: argparse.Namespace) -> list[str]:
    """Every mistake of a `token add`, one line each (none: it may go)."""
    problems: list[str] = []
    if not valid_name(args.name):
        problems.append(
            f"token name {_shown(args.name)}: use 1 to 64 letters, digits, '.', '_', '@' or "
            "'-', starting with a letter or digit"
        )
    names = _model_names(args.models)
    scope = model_scope(config, names or ())
    served = ", ".join(config.models) or "none are configured"
    if names is not None and not names:
        problems.append(
            "--models names no model (it was given an empty value); leave it out for every "
            f"model, or name some: {served}"
        )
    elif scope.unknown:
        problems.append(
            f"unknown model {', '.join(map(_shown, scope.unknown))}; this server offers: {served}"
        )
    budget = _budget(args.budget_usd)
    if isinstance(budget, str):
        problems.append(budget)
    elif budget is not None:
        unpriced = scope.unpriced(config)
        if scope.ids and len(unpriced) == len(scope.ids):
            which = "the models it may use" if names else "the models of this server"
            problems.append(
                f"--budget-usd: none of {which} has prices, so no call could be counted "
                f"against a budget and every one would be refused: {', '.join(unpriced)}; "
                "add prices to their [models.<id>] tables, or leave out --budget-usd"
            )
    rpm = _rpm(args.rpm)
    if isinstance(rpm, str):
        problems.append(rpm)
    return problems


def _budget(text: str | None) -> float | str | None:
    """The budget in dollars, or the line saying what is wrong with it."""
    if text is None:
        return None
    wrong = f"--budget-usd must be a number of dollars, 0 to {MAX_BUDGET_USD:,.0f}"
    try:
        value = float(text.strip().lstrip("$"))
    except ValueError:
        return f"{wrong}; got {_shown(text)}"
    if not math.isfinite(value) or value < 0:
        return f"{wrong}; got {_shown(text)}"
    if value > MAX_BUDGET_USD:
        return f"{wrong} a month; got {_shown(text)}"
    return value


def _rpm(text: str | None) -> int | str | None:
    if text is None:
        return None
    wrong = f"--rpm must be a whole number of model calls per minute, 1 to {MAX_RPM:,}"
    stripped = text.strip()
    if not _WHOLE.fullmatch(stripped) or not 1 <= int(stripped) <= MAX_RPM:
        return f"{wrong}; got {_shown(text)}"
    return int(stripped)


async def _add(config: Config, store: Store, args: argparse.Namespace) -> int:
    names = _model_names(args.models) or []
    budget, rpm = _budget(args.budget_usd), _rpm(args.rpm)
    assert not isinstance(budget, str) and not isinstance(rpm, str)
    secret = new_secret()
    record = AccessTokenRecord(
        token_id=new_token_id(),
        name=args.name,
        secret_hash=secret_hash(secret),
        created_at_ms=int(time.time() * 1000),
        models=tuple(dict.fromkeys(names)),
        budget_usd=budget,
        rpm=rpm,
    )
    saved = await store.add_access_token(record)
    if saved.outcome != "inserted":
        return _fail(
            f"a token named {args.name!r} is active; revoke it first "
            f"(cursor-byok token revoke {args.name}) or give it a new secret "
            f"(cursor-byok token rotate {args.name})"
        )
    if await store.get_server_setting(ACCESS_SETTING) is None:
        # The first token closes the server, on the record: revoking it later keeps it closed.
        await store.set_server_setting(ACCESS_SETTING, Access.CLOSED.value, record.created_at_ms)
    print(secret)
    _note(
        f"token {args.name!r} added ({limits_text(record)}). This is the only time its value "
        "is shown: give it to its owner, who sends it as `Authorization: Bearer <token>`."
    )
    scope = model_scope(config, record.models)
    unpriced = ", ".join(scope.unpriced(config))
    if budget is not None and unpriced:
        _note(f"note: under its budget it cannot call these models, without prices: {unpriced}")
    report = await read_report(store)
    _note(access_text(report, config))
    return 0


# -- list, revoke, rotate -------------------------------------------------------------------


async def _list(config: Config, store: Store, *, include_revoked: bool, json_out: bool) -> int:
    report = await read_report(store, include_revoked=include_revoked)
    if json_out:
        print(json.dumps(as_json(report), indent=2))
        return 0
    if not report.rows:
        _note("no tokens (add one with: cursor-byok token add NAME)")
    else:
        print("\n".join(table(report)))
    _note(access_text(report, config))
    return 0


async def _revoke(config: Config, store: Store, name: str) -> int:
    revoked = await store.revoke_access_token(name, int(time.time() * 1000))
    if revoked is None:
        return _fail(f"no active token is named {_shown(name)} (see: cursor-byok token list)")
    _note(
        f"token {name!r} revoked: its next model call is refused, and running servers refuse "
        f"its requests within {REFRESH_S:g} s (a run it started takes its tool results until "
        "that run ends)."
    )
    _note(access_text(await read_report(store), config))
    return 0


async def _rotate(store: Store, name: str) -> int:
    secret = new_secret()
    now = int(time.time() * 1000)
    new = await store.rotate_access_token(name, new_token_id(), secret_hash(secret), now)
    if new is None:
        return _fail(f"no active token is named {_shown(name)} (see: cursor-byok token list)")
    print(secret)
    _note(
        f"token {name!r} rotated: a new secret, the same person ({limits_text(new)}; this "
        "month's spend carries over). The old secret is refused: its runs end at their next "
        f"model call, and running servers refuse its requests, and take the new one, within "
        f"{REFRESH_S:g} s. This is the only time the new value is shown."
    )
    return 0


# -- open, close ----------------------------------------------------------------------------


async def _set_access(config: Config, store: Store, access: Access) -> int:
    await store.set_server_setting(ACCESS_SETTING, access.value, int(time.time() * 1000))
    report = await read_report(store)
    within = f"Running servers on this database take it within {REFRESH_S:g} s."
    if access is Access.OPEN:
        if config.server.auth_token:
            _note(
                "access open; server.auth_token is set, so every request still needs it or a "
                f"person token. {within}"
            )
        else:
            _note(
                "access open: requests without a token are let in (a server without "
                "auth_token listens on loopback only); person tokens still work, with their "
                f"limits. {within} Undo: cursor-byok token close"
            )
        return 0
    _note(f"access closed: every request needs a person token or server.auth_token. {within}")
    if not report.active and not config.server.auth_token:
        _note(
            "warning: no token is active and server.auth_token is not set: the server refuses "
            "every request until you add one (cursor-byok token add NAME)"
        )
    return 0
