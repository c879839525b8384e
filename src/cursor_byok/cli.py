"""Command line: `cursor-byok serve|init|models|doctor|token`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .config import LOG_LEVELS, Config, ConfigError, load_config, port_number
from .llm.models import Model

CONFIG_HELP = (
    "TOML configuration file (default: $CURSOR_BYOK_CONFIG, else ./cursor-byok.toml, else "
    "~/.config/cursor-byok/config.toml)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cursor-byok",
        description="Serve Cursor's agent protocol against your own LLM provider and key.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"cursor-byok {__version__}")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--config", help=CONFIG_HELP)
    serve.add_argument("--host", help="address to listen on (default: server.host)")
    serve.add_argument("--port", type=port_number, help="port to listen on (default: server.port)")
    serve.add_argument("--db", help="SQLite file or postgresql:// URL (default: server.database)")
    serve.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.lower,
        help="how much to log (default: server.log_level, info)",
    )

    init = sub.add_parser("init", help="write a commented starter configuration")
    init.add_argument("path", nargs="?", default=None, help="where to write (cursor-byok.toml)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument(
        "--no-probe",
        action="store_true",
        help="do not ask a local llama-server (:8080) or Ollama (:11434) for its window",
    )

    models = sub.add_parser("models", help="list the models as clients will see them")
    models.add_argument("--config", help=CONFIG_HELP)

    doctor = sub.add_parser(
        "doctor", help="check the configuration, the database and every provider"
    )
    doctor.add_argument("--config", help=CONFIG_HELP)
    doctor.add_argument("--db", help="SQLite file or postgresql:// URL (default: server.database)")
    doctor.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds to wait for each provider's answer (default 20)",
    )
    from .token_cli import add_parser

    add_parser(sub, CONFIG_HELP)
    return parser


def _load(path: str | None) -> Config | None:
    try:
        return load_config(path)
    except ConfigError as exc:
        report_config_error(exc)
        return None


def report_config_error(exc: ConfigError) -> None:
    """One line per mistake on stderr, each with the same prefix (grep-able, and a line on
    its own still says what it is)."""
    for line in exc.lines():
        print(f"cursor-byok: configuration error: {line}", file=sys.stderr)


def cmd_init(
    path: str | None, force: bool, probe: Sequence[str] | None = None, *, probing: bool = True
) -> int:
    """Write the starter. `probing`: first ask the local servers at `probe` (default: the
    starter's llama-server, then Ollama) what window they serve, and write that."""
    from .starter_config import DEFAULT_PATH, PROBED_URLS, probe_local_servers, starter_config

    target = Path(path or DEFAULT_PATH)
    if target.is_dir():
        target = target / DEFAULT_PATH
    if target.exists() and not force:
        print(
            f"cursor-byok: {target} already exists; not overwriting it (use --force to replace it)",
            file=sys.stderr,
        )
        return 1
    local = probe_local_servers(probe or PROBED_URLS) if probing else None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Not world-readable: users may paste an api_key into it.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(starter_config(local))
    except OSError as exc:
        print(f"cursor-byok: cannot write {target}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {target}", file=sys.stderr)
    if local is not None:
        served = local.served
        print(
            f"  {served.server} answers at {local.base_url}: context_window = {local.window} "
            f"({served.source})",
            file=sys.stderr,
        )
    print("next steps:", file=sys.stderr)
    print(f"  1. edit {target}: enable the providers you use, export their keys", file=sys.stderr)
    print(f"  2. cursor-byok doctor --config {target}", file=sys.stderr)
    print(f"  3. cursor-byok serve --config {target}", file=sys.stderr)
    return 0


def prices_text(model: Model) -> str:
    """A model's prices as `models` shows them, with where they came from."""
    p = model.prices
    if model.prices_source == "local":
        return "local ($0)"
    if p is None:
        return "none (unpriced)"
    text = f"${p.input:g} / ${p.output:g}"
    if p.long_context is not None:
        above = p.long_context
        text += f", over {p.long_context_tokens:,}: ${above.input:g} / ${above.output:g}"
    return f"{text} ({model.prices_source})"


def _window_note(config: Config) -> str:
    kinds = {m.context_source for m in config.models.values()} - {"config"}
    if kinds == {"catalogue"}:
        return "the catalogue's"
    if kinds == {"default"}:
        return "the default, 128,000: set context_window to what the server serves"
    return "the catalogue's where it has one, else 128,000"


def models_table(config: Config) -> str:
    headers = (
        "ID",
        "NAME",
        "PROVIDER",
        "API",
        "UPSTREAM MODEL",
        "CONTEXT",
        "PRICES (USD/Mtok in/out)",
        "CATALOGUE",
        "REASONING",
        "ALIASES",
    )
    rows: list[tuple[str, ...]] = [headers]
    for m in config.models.values():
        s = m.settings
        if not s.reasoning:
            reasoning = "no"
        elif s.reasoning_effort:
            reasoning = f"yes ({s.reasoning_effort})"
        elif s.reasoning_budget:
            reasoning = f"yes (budget {s.reasoning_budget})"
        else:
            reasoning = "yes"
        rows.append(
            (
                m.id,
                m.display_name,
                m.provider.name,
                m.provider.api,
                s.model,
                f"{m.context_window:,}" + ("" if m.context_source == "config" else "*"),
                prices_text(m),
                m.catalogue or "not in catalogue",
                reasoning,
                ", ".join(m.aliases),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(headers))]
    right = {5}
    lines = []
    for r in rows:
        cells = [
            r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i])
            for i in range(len(headers))
        ]
        lines.append("  ".join(cells).rstrip())
    if any(m.context_source != "config" for m in config.models.values()):
        lines.append("* the window is not in the configuration: " + _window_note(config))
    for m in config.models.values():
        if m.catalogue_note:
            lines.append(f"{m.id}: {m.catalogue_note}")
    if config.server.default_model:
        lines.append(f"default model (for names not served): {config.server.default_model}")
    return "\n".join(lines)


def cmd_models(config: Config) -> int:
    if not config.models:
        print(
            "cursor-byok: no models configured; clients would show an empty model list. "
            "Add a [models.<id>] section.",
            file=sys.stderr,
        )
        return 1
    print(models_table(config))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a usage error, as for a wrong option: help on stderr, 2
        parser.print_help(sys.stderr)
        return 2
    if args.command == "init":
        return cmd_init(args.path, args.force, probing=not args.no_probe)
    if args.command == "doctor":
        from .doctor import doctor

        return doctor(args.config, database=args.db, timeout_s=args.timeout)
    config = _load(args.config)
    if config is None:
        return 2
    if args.command == "models":
        return cmd_models(config)
    if args.command == "token":
        from .token_cli import token_command

        return token_command(config, args)
    from .app import serve

    return serve(config, host=args.host, port=args.port, database=args.db, log_level=args.log_level)


if __name__ == "__main__":
    raise SystemExit(main())
