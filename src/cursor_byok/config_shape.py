"""The configuration file's shape checked against its msgspec Struct types, every mistake at once.

Why not let msgspec decode straight into the Structs: it stops at the first mistake and says it
in its own words (``Object contains unknown field `api_key_envv` - at `providers[...]` `` names
no provider). Here the plain data from tomllib is walked against the Struct fields instead, so
each unknown key, wrong type and missing key is reported with its full TOML key, with a
did-you-mean for unknown keys. What is wrong is left out of the cleaned data, so the checks of
values that follow can still run on the rest without repeating the same mistake.
"""

from __future__ import annotations

import datetime
import difflib
import json
import math
import types
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin

import msgspec

_BARE_KEY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class _Bad:
    """A value that failed its check (and was reported)."""


_BAD = _Bad()


@dataclass
class Shape:
    """What the walk found: the problems, the data without them, and the table entries
    dropped for a problem, as (parent key, entry name), e.g. ("providers", "openai")."""

    problems: list[str] = field(default_factory=list)
    cleaned: dict[str, Any] = field(default_factory=dict)
    dropped: set[tuple[str, str]] = field(default_factory=set)
    # (full key, problem) of every number setting that is nan, infinite or negative: reported
    # after the value checks, for a key none of them named (config.number_errors).
    numbers: list[tuple[str, str]] = field(default_factory=list)


def key_path(parent: str, key: str) -> str:
    """The full TOML key of `key` under `parent`, quoted where TOML needs quotes."""
    part = key if key and set(key) <= _BARE_KEY else json.dumps(key)
    return f"{parent}.{part}" if parent else part


def check_shape(data: dict[str, Any], root: type[msgspec.Struct]) -> Shape:
    shape = Shape()
    cleaned = _struct(data, root, "", shape)
    shape.cleaned = cleaned if cleaned is not None else {}
    return shape


def _struct(
    value: dict[str, Any], cls: type[msgspec.Struct], path: str, shape: Shape
) -> dict[str, Any] | None:
    """The table with its bad keys left out; None when it cannot be used at all (a required
    key missing or bad)."""
    fields = {f.encode_name: f for f in msgspec.structs.fields(cls)}
    out: dict[str, Any] = {}
    usable = True
    for key, item in value.items():
        here = key_path(path, key)
        info = fields.get(key)
        if info is None:
            shape.problems.append(f"{here}: {_unknown_key(key, list(fields))}")
            continue
        checked = _value(item, info.type, here, shape)
        if isinstance(checked, _Bad):
            usable = usable and not info.required
            continue
        out[key] = checked
    for name, info in fields.items():
        if info.required and name not in value:
            shape.problems.append(f"{key_path(path, name)}: missing (required)")
            usable = False
    return out if usable else None


def _value(item: Any, tp: Any, path: str, shape: Shape) -> Any:
    cls = _struct_in(tp)
    if cls is not None and isinstance(item, dict):
        cleaned = _struct(item, cls, path, shape)
        return _BAD if cleaned is None else cleaned
    if get_origin(tp) is dict and isinstance(item, dict):
        value_type = get_args(tp)[1] if get_args(tp) else Any
        out: dict[str, Any] = {}
        for key, sub in item.items():
            checked = _value(sub, value_type, key_path(path, key), shape)
            if isinstance(checked, _Bad):
                shape.dropped.add((path, key))
                continue
            out[key] = checked
        return out
    try:
        msgspec.convert(item, tp)
    except msgspec.ValidationError:
        shape.problems.append(f"{path}: expected {_expected(tp)}, got {_kind(item)}")
        return _BAD
    if (problem := _bad_number(item, tp)) is not None:
        shape.numbers.append((path, problem))
    return item


def _bad_number(item: Any, tp: Any) -> str | None:
    """Why a number setting's value cannot be meant (nan, an infinity, below zero), or None.

    No setting takes one: nan compares false with every bound (a price of nan never adds up
    to a budget, a timeout of nan never fires), and no count, size, time or price is below
    zero. Checked for every int and float field, so a setting added later is covered too."""
    if isinstance(item, bool) or not isinstance(item, int | float):
        return None
    if not any(m in (int, float) for m in _members(tp)):
        return None
    if isinstance(item, float) and not math.isfinite(item):
        return f"must be a finite number, got {item}"
    if item < 0:
        return f"must not be negative, got {item:g}"
    return None


def number_errors(shape: Shape, problems: list[str]) -> list[str]:
    """The nan, infinite and negative numbers of `shape` no other check has named already
    (that check's own message, with its bounds, says it better)."""
    named = tuple(problems)
    return [
        f"{path} {problem}"
        for path, problem in shape.numbers
        if not any(p.startswith((f"{path} ", f"{path}:")) for p in named)
    ]


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key; did you mean {close[0]}?"
    return f"unknown key; the keys here are {', '.join(known)}"


def _members(tp: Any) -> tuple[Any, ...]:
    if get_origin(tp) is Union or isinstance(tp, types.UnionType):
        return tuple(a for a in get_args(tp) if a is not type(None))
    return (tp,)


def _struct_in(tp: Any) -> type[msgspec.Struct] | None:
    for member in _members(tp):
        if isinstance(member, type) and issubclass(member, msgspec.Struct):
            return member
    return None


def _expected(tp: Any) -> str:
    return " or ".join(_describe_type(m) for m in _members(tp))


def _describe_type(tp: Any) -> str:
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if get_origin(tp) is dict or (isinstance(tp, type) and issubclass(tp, msgspec.Struct)):
        return "a table"
    if get_origin(tp) in (list, tuple):
        return "an array"
    return str(tp)


def _kind(value: Any) -> str:
    """The TOML kind of a decoded value, never the value itself (it may be a secret)."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, datetime.date | datetime.time):
        return "a date or time"
    return type(value).__name__
