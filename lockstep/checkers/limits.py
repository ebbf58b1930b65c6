"""Resource limits of a check: states, depth, memory and wall-clock time.

A limit never turns into "holds": the engine stops cleanly and its result is inconclusive
(exit 3), unless a violation was already found, which wins.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


def total_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 1024**3


def resident_memory_bytes() -> int:
    """This process's resident set size (Linux /proc; falls back to the peak from getrusage)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # pragma: no cover - non-Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass(frozen=True)
class Limits:
    max_states: int | None = None
    max_depth: int | None = None
    max_memory_bytes: int | None = None  # None: 75% of physical memory
    timeout_seconds: float | None = None

    def memory_cap(self) -> int:
        return self.max_memory_bytes if self.max_memory_bytes is not None else int(total_memory_bytes() * 0.75)


class LimitWatch:
    """Answers, when asked, which limit (if any) the running search has exceeded."""

    def __init__(self, limits: Limits, started: float) -> None:
        self.limits = limits
        self.started = started
        self.memory_cap = limits.memory_cap()
        self._checks = 0

    def exceeded(self, states: int) -> str | None:
        limits = self.limits
        if limits.max_states is not None and states >= limits.max_states:
            return "max-states"
        if limits.timeout_seconds is not None and time.monotonic() - self.started >= limits.timeout_seconds:
            return "timeout"
        self._checks += 1
        if self._checks % 8 == 0 and resident_memory_bytes() >= self.memory_cap:
            return "max-memory"
        return None
