"""Number arguments shared by every ``lockstep`` subcommand: argparse types with one wording.

Every number must be finite: ``nan`` and ``inf`` are refused (``--timeout nan`` is not "no limit").
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive(kind: type) -> Callable[[str], object]:
    """An argparse type: a number of ``kind`` (int or float) above zero."""

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def non_negative(text: str) -> int:
    """An argparse type: an integer, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value
