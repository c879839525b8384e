"""Every number setting refuses nan, the infinities and negative values, each with one line
naming its key (issue 27, point 8). The settings are found by walking the configuration's
msgspec Structs, so a number setting added later is checked without touching this test."""

from __future__ import annotations

import math
import types
from collections.abc import Iterator
from typing import Any, Union, get_args, get_origin

import msgspec
import pytest

from cursor_byok.config import ConfigError, RawConfig, parse_config

# A configuration using every table, so every Struct's fields can be set: one entry per
# table of tables, named as below.
BASE: dict[str, Any] = {
    "server": {},
    "providers": {"p": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1"}},
    "models": {"m": {"provider": "p", "prices": {}}},
    "web_search": {"backends": ["b"], "backend": {"b": {"kind": "searxng", "url": "http://x"}}},
    "web_fetch": {},
    "image_generation": {"provider": "p", "model": "img"},
}
ENTRY = {"providers": "p", "models": "m", "backend": "b"}


def _members(tp: Any) -> tuple[Any, ...]:
    if get_origin(tp) is Union or isinstance(tp, types.UnionType):
        return tuple(a for a in get_args(tp) if a is not type(None))
    return (tp,)


def number_fields(
    cls: type[msgspec.Struct], path: tuple[str, ...] = (), within: tuple[type, ...] = ()
) -> Iterator[Any]:
    """(key path, int or float) of every number field reachable from `cls`.

    A type that holds itself (a model's `long_context` prices are `Prices`) is followed one
    level deep: its numbers are the same fields again, one table further in."""
    if within.count(cls) > 1:
        return
    within = (*within, cls)
    for f in msgspec.structs.fields(cls):
        here = (*path, f.encode_name)
        for member in _members(f.type):
            if isinstance(member, type) and issubclass(member, msgspec.Struct):
                yield from number_fields(member, here, within)
            elif get_origin(member) is dict:
                value = get_args(member)[1]
                if isinstance(value, type) and issubclass(value, msgspec.Struct):
                    yield from number_fields(value, (*here, ENTRY[f.encode_name]), within)
            elif member in (int, float):
                yield here, member


FIELDS = sorted(set(number_fields(RawConfig)), key=lambda f: f[0])


def toml_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return str(value)


def dump(data: dict[str, Any], prefix: str = "") -> str:
    """TOML for nested tables of scalars (enough for BASE)."""
    scalars = [f"{k} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    out = f"[{prefix}]\n" + "\n".join(scalars) + "\n" if prefix else "\n".join(scalars) + "\n"
    for k, v in data.items():
        if isinstance(v, dict):
            out += dump(v, f"{prefix}.{k}" if prefix else k)
    return out


def with_value(path: tuple[str, ...], value: Any) -> str:
    data = msgspec.json.decode(msgspec.json.encode(BASE))
    table = data
    for key in path[:-1]:
        table = table.setdefault(key, {})
    table[path[-1]] = value
    return dump(data)


def test_the_base_configuration_loads_and_the_walk_finds_the_settings() -> None:
    parse_config(dump(BASE), env={})
    keys = {".".join(p) for p, _ in FIELDS}
    # Not vacuous: the ones the issue named, and one of each table.
    assert {
        "models.m.prices.input",
        "models.m.prices.cache_write",
        "providers.p.read_timeout_s",
        "server.port",
        "models.m.temperature",
        "web_search.timeout_s",
        "web_fetch.convert_timeout_s",
        "image_generation.timeout_s",
    } <= keys
    assert len(FIELDS) >= 40, keys


def bad_values(kind: type) -> list[Any]:
    return [math.nan, math.inf, -math.inf, -1.5] if kind is float else [-1, math.nan, math.inf]


@pytest.mark.parametrize(
    ("path", "value"),
    [(p, v) for p, kind in FIELDS for v in bad_values(kind)],
    ids=lambda x: ".".join(x) if isinstance(x, tuple) else str(x),
)
def test_every_number_setting_refuses_nan_infinity_and_negatives(
    path: tuple[str, ...], value: Any
) -> None:
    key = ".".join(path)
    with pytest.raises(ConfigError) as info:
        parse_config(with_value(path, value), env={}, path="c.toml")
    problems = info.value.problems
    assert len(problems) == 1, problems  # one line, not one per model or a traceback
    assert problems[0].startswith((f"{key} ", f"{key}:")), problems
    assert "\n" not in problems[0]
    assert str(info.value) == f"c.toml: {problems[0]}"


def test_the_messages_say_what_is_wrong() -> None:
    text = with_value(("models", "m", "prices", "output"), math.nan)
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert info.value.problems == ("models.m.prices.output must be a finite number, got nan",)
    text = with_value(("providers", "p", "read_timeout_s"), -2.0)
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert info.value.problems == ("providers.p.read_timeout_s must not be negative, got -2",)


def test_zero_and_positive_numbers_still_load() -> None:
    text = with_value(("models", "m", "prices", "input"), 0.0)
    prices = parse_config(text, env={}).models["m"].prices
    assert prices is not None and prices.input == 0.0
    text = with_value(("providers", "p", "read_timeout_s"), 12.5)
    assert parse_config(text, env={}).providers["p"].read_timeout_s == 12.5
