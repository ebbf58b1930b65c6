"""Number options shared by every ``lockstep`` command: click parameter types with one wording.

Every number must be finite: ``nan`` and ``inf`` are refused (``--timeout nan`` is not "no limit");
click's own ``FloatRange`` lets ``nan`` through, since every comparison with it is false.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    ParamType = click.ParamType[Any]  # generic in the stubs of newer click; a plain class before
else:
    ParamType = click.ParamType


class Positive(ParamType):
    """A number of ``kind`` (int or float) above zero."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "integer" if kind is int else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default
        try:
            number = self.kind(value)
        except ValueError:
            self.fail(f"{value!r} is not {'an integer' if self.kind is int else 'a number'}", param, ctx)
        if not math.isfinite(number):
            self.fail(f"must be a finite number, got {value}", param, ctx)
        if number <= 0:
            self.fail(f"must be positive, got {value}", param, ctx)
        return number


class NonNegative(ParamType):
    """An integer, zero or more."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            number = int(value)
        except ValueError:
            self.fail(f"{value!r} is not an integer", param, ctx)
        if number < 0:
            self.fail(f"must not be negative, got {value}", param, ctx)
        return number


POSITIVE_INTEGER = Positive(int)
POSITIVE_NUMBER = Positive(float)
NON_NEGATIVE = NonNegative()
