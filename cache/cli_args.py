"""Argument types for command-line flags (`python -m cache.sim`, the predictor's timing,
the benchmark scripts).

Each type turns a flag's text into its value or raises argparse.ArgumentTypeError, so a
bad value (0 repeats, a negative length, `abc`, an unknown policy) is a usage error that
names the flag (one line, exit status 2) before any model is loaded or any run starts.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers >= 1 (`256,1024`), each once, in the order given."""
    return tuple(dict.fromkeys(_list_of(text, positive_int, "integers, each at least 1")))


def ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers (`0,1,2`: seeds), each once, in the order given
    (a seed given twice would count one run twice in a median)."""
    return tuple(dict.fromkeys(_list_of(text, integer, "integers")))


def names_from(known: Iterable[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """The type of a flag taking a comma-separated list of names out of `known` (each a
    `what`: "policy"), each once, in the order given."""
    choices = tuple(known)

    def names(text: str) -> tuple[str, ...]:
        given = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
        unknown = [name for name in given if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0]!r}; each must be one of "
                                             f"{', '.join(choices)}")
        return given

    return names


def _list_of(text: str, item: Callable[[str], int], what: str) -> list[int]:
    try:
        return [item(part.strip()) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be comma-separated {what}, got {text!r}") from None


def integer(text: str) -> int:
    """An integer."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def finite_float(text: str) -> float:
    """A finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value
