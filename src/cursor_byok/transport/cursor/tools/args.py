"""Reading the model's tool arguments.

The arguments are whatever JSON the model wrote, so every reader accepts the obvious spellings
("3" for 3, "true" for true) and answers None for anything else instead of raising: a bad
value is the model's mistake to be told about, never a crash of the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "INT32_MAX",
    "get_bool",
    "get_int",
    "get_str",
    "missing_strings",
    "positive_int32",
    "str_or_empty",
]

# Exec request fields such as ReadArgs.offset and ShellArgs.timeout are int32 on the wire.
INT32_MAX = 2**31 - 1


def get_str(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    return value if isinstance(value, str) else None


def str_or_empty(args: Mapping[str, Any], key: str) -> str:
    """The string argument, or "" when it is absent or not a string (what the wire sends)."""
    return get_str(args, key) or ""


def get_int(args: Mapping[str, Any], key: str) -> int | None:
    """An integer, an integral float, or a string of digits; booleans are not numbers."""
    value = args.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        # isdigit() also admits "--3" and superscripts, which int() refuses.
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def positive_int32(args: Mapping[str, Any], key: str) -> int | None:
    """A positive integer clamped to int32, or None (absent, invalid, zero or negative)."""
    value = get_int(args, key)
    if value is None or value <= 0:
        return None
    return min(value, INT32_MAX)


def get_bool(args: Mapping[str, Any], key: str) -> bool | None:
    value = args.get(key)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def missing_strings(args: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The keys among `keys` whose value is not a string, in order."""
    return [key for key in keys if get_str(args, key) is None]
