"""Command line: `cursor-byok serve|init|models|doctor`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cursor-byok",
        description="Serve Cursor's agent protocol against your own LLM provider and key.",
    )
    parser.add_argument("--version", action="version", version=f"cursor-byok {__version__}")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--config", help="TOML configuration file (env CURSOR_BYOK_CONFIG)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--db", help="SQLite database file")
    models = sub.add_parser("models", help="list the models as clients will see them")
    models.add_argument("--config")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"cursor-byok: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "models":
        for model in config.models.values():
            print(f"{model.id}\t{model.provider.name}\t{model.settings.model}")
        return 0
    from .app import serve

    return serve(config, host=args.host, port=args.port, database=args.db)


if __name__ == "__main__":
    raise SystemExit(main())
