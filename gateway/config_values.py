"""Typed values out of parsed TOML tables, each failure one `ConfigError` naming the key.

Invariant: what these return has the type asked for (a bool is never a number, a float
is finite, an integer is within TOML's 64 bits, a list of strings holds only strings, a
table is a dict); anything else is a `ConfigError` whose message says where in the file
(`models[0].timeout_s`).
"""
from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from agents_trace.config import toml_int_problem, unknown_key_problem
from gateway.access_log import looks_like_key


class ConfigError(ValueError):
    """The config file is invalid; the message says where."""


TYPE_NAMES = {str: "a string", list: "a list", int: "an integer", float: "a number", bool: "true or false",
              dict: "a table"}


def reject_unknown_keys(table: dict, known: Collection[str], where: str, what: str = "key") -> None:
    """A `ConfigError` for the first key of `table` not in `known` (`unknown_key_problem`:
    it names the nearest known key)."""
    problem = unknown_key_problem(table, known, where, what)
    if problem:
        raise ConfigError(problem)


def take(table: dict, key: str, kinds: type | tuple[type, ...], where: str, default: Any = None):
    value = table.get(key, default)
    if value is not None and not isinstance(value, kinds):
        wanted = " or ".join(dict.fromkeys(TYPE_NAMES.get(kind, kind.__name__)
                                           for kind in (kinds if isinstance(kinds, tuple) else (kinds,))))
        raise ConfigError(f"{where}.{key} must be {wanted}, not {value!r}")
    if isinstance(value, bool) and kinds in (int, float, (int, float)):   # a bool is an int to Python
        raise ConfigError(f"{where}.{key} must be {'an integer' if kinds is int else 'a number'}, "
                          f"not {'true' if value else 'false'}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}.{key} must be a finite number, not {value!r}")
    problem = toml_int_problem(value, f"{where}.{key}")   # tomllib lets it by
    if problem:
        raise ConfigError(problem)
    return value


def check_toml_ints(value: Any, where: str) -> None:
    """A ConfigError naming the first integer in `value` (a table or list, walked
    whole) past TOML's 64 bits: tomllib loads them, for a table `take` does not read
    key by key (`[models.engine]`)."""
    problem = toml_int_problem(value, where)
    if problem:
        raise ConfigError(problem)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        check_toml_ints(item, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]")


def take_list(table: dict, key: str, where: str) -> list:
    """A list of strings, where one string alone stands for a list of one."""
    value = take(table, key, (list, str), where, [])
    values = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(item, str) for item in values):
        raise ConfigError(f"{where}.{key} must be a string or a list of strings, not {value!r}")
    return values


def table_at(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table, not {value!r}")
    return value


def tables_at(data: dict, key: str) -> list[dict]:
    """The [[key]] array of tables."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ConfigError(f"{key} must be an array of tables ([[{key}]]), not {value!r}")
    return [table_at(item, f"{key}[{index}]") for index, item in enumerate(value)]


def positive(value: float | int | None, what: str) -> Any:
    """`value` unless it is a number that is not > 0 (NaN included); None passes."""
    if value is not None and not value > 0:
        raise ConfigError(f"{what} must be > 0, not {value!r}")
    return value


KEY_IN_PLACE_OF_NAME = {   # a setting naming environment variables -> what it takes
    "api_key_env": "api_key_env takes the names of environment variables holding keys",
    "api_base_env": "api_base_env takes the name of an environment variable holding the endpoint"}


def key_setting(table: dict, key: str, where: str, *, is_list: bool = True) -> Any:
    """`take_list` (or, not `is_list`, `take` of a string) of a setting naming keys or the
    variables holding them or an endpoint (`api_key_sha256`, KEY_IN_PLACE_OF_NAME's), but
    that a message about a wrong value never shows the value when something in it looks
    like a key (`looks_like_key`: a key pasted where its digest or its variable's name goes;
    QA199 F6, QA203 F6), and that a variable's name that looks like a key is refused
    without showing it."""
    try:
        value = take_list(table, key, where) if is_list else take(table, key, str, where)
    except ConfigError as exc:
        if not looks_like_key(str(exc)):
            raise
        shape = "a string or a list of strings" if is_list else "a string"
        raise ConfigError(f"{where}.{key} must be {shape} (its value is not shown: "
                          "an entry looks like an API key)") from None
    if key in KEY_IN_PLACE_OF_NAME and any(looks_like_key(name) for name in (value if is_list else [value or ""])):
        raise ConfigError(f"{where}.{key}: an entry looks like an API key itself (not shown): "
                          f"{KEY_IN_PLACE_OF_NAME[key]}")
    return value
