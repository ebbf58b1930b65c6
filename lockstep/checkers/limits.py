"""Resource limits of a check: states, depth, memory and wall-clock time.

A limit never turns into "holds": the engine stops cleanly and its result is inconclusive
(exit 3), unless a violation was already found, which wins.

- ``Limits`` and ``LimitWatch``: what an engine polls. The time limit counts from
  ``Limits.started``, the command's clock (``lockstep.clock``; ``Limits.on(clock)``), so a model's
  build and whatever ran before the search count too; None: from the engine's own start.
- ``MemoryForecast``: the vectorised engines' guard against ``--max-memory``: before each chunk
  of a level it adds to the resident size what the chunk is expected to allocate (its
  transitions times the bytes a transition took so far, measured as the peak resident growth of
  each chunk), so the search stops before the limit is passed rather than after.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from lockstep.clock import Clock


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


def peak_resident_bytes() -> int | None:
    """This process's peak resident set size since the last ``reset_peak`` (Linux ``VmHWM``), or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):  # pragma: no cover - non-Linux
        pass
    return None


_peak_before_resets = 0  # the highest VmHWM read before a reset_peak cleared it


def reset_peak() -> bool:
    """Start a new peak resident measurement (Linux: ``5`` to ``/proc/self/clear_refs``); whether it
    could. The peak so far is kept first (``process_peak_bytes``): once cleared, the kernel forgets
    it, and so does the process's ``ru_maxrss``."""
    global _peak_before_resets
    _peak_before_resets = max(_peak_before_resets, peak_resident_bytes() or 0)
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")
        return True
    except OSError:  # pragma: no cover - an older kernel or a restricted /proc
        return False


def process_peak_bytes() -> int | None:
    """This process's peak resident size since it started, across ``reset_peak``'s clears (None
    where ``/proc`` has no ``VmHWM``)."""
    current = peak_resident_bytes()
    if current is None:
        return None
    return max(current, _peak_before_resets)


# ------------------------------------------------------------------------------------ the limits
@dataclass(frozen=True)
class Limits:
    max_states: int | None = None
    max_depth: int | None = None
    max_memory_bytes: int | None = None  # None: 75% of physical memory
    timeout_seconds: float | None = None
    started: float | None = None  # the command clock's start (monotonic); None: the engine's start

    def memory_cap(self) -> int:
        return self.max_memory_bytes if self.max_memory_bytes is not None else int(total_memory_bytes() * 0.75)

    @classmethod
    def on(
        cls,
        clock: Clock,
        max_states: int | None = None,
        max_depth: int | None = None,
        max_memory_bytes: int | None = None,
    ) -> Limits:
        """The limits of a search that runs on the command's ``clock``."""
        return cls(max_states, max_depth, max_memory_bytes, clock.timeout, clock.started)

    def seconds_left(self) -> float | None:
        """What is left of the timeout now (engines that take a number of seconds), or None."""
        if self.timeout_seconds is None:
            return None
        if self.started is None:
            return self.timeout_seconds
        return max(0.0, self.timeout_seconds - (time.monotonic() - self.started))


class LimitWatch:
    """Answers, when asked, which limit (if any) the running search has exceeded."""

    def __init__(self, limits: Limits, started: float) -> None:
        self.limits = limits
        self.started = started if limits.started is None else limits.started
        self.memory_cap = limits.memory_cap()
        self._checks = 0

    def exceeded(self, states: int, every: int = 8) -> str | None:
        """The limit passed, if any; resident memory is read on every ``every``-th call (a search
        that calls this for each chunk of thousands of states passes 1)."""
        limits = self.limits
        if limits.max_states is not None and states >= limits.max_states:
            return "max-states"
        if limits.timeout_seconds is not None and time.monotonic() - self.started >= limits.timeout_seconds:
            return "timeout"
        self._checks += 1
        if self._checks % every == 0 and resident_memory_bytes() >= self.memory_cap:
            return "max-memory"
        return None


class MemoryForecast:
    """What the next chunk of a vectorised search will add to the resident size (see the module doc).

    ``rows(wanted, branching)``, before a chunk of ``wanted`` frontier states that take ``branching``
    transitions each: how many of them fit under ``cap`` (all of them, fewer, or 0: stop). Fewer is
    refused below ``MINIMUM`` rows (a chunk that small costs more in calls than it explores).
    ``fits(allocation)`` asks the same of one array about to be made (the level's next frontier).
    ``after(transitions)`` records what the chunk took: its peak resident growth (Linux's
    ``VmHWM``, reset before the chunk; elsewhere the growth after it) per transition. The estimate
    starts at ``prior`` bytes per transition and only rises: the highest rate of any chunk of at
    least ``SAMPLE`` transitions (a smaller chunk's growth is mostly the allocator's first pages).
    A chunk's growth understates what it allocates when it reuses pages an earlier chunk freed, so
    a lower rate never replaces a higher one. ``MARGIN`` goes on top, and ``UNMEASURED`` instead
    for a chunk expected to take more than ``REACH`` times the transitions of the largest chunk
    measured (its rate is a guess until then). The chunks plan to stay under the cap less
    ``RESERVE``, which is kept for allocations no chunk's forecast sees."""

    MARGIN = 1.25
    UNMEASURED = 2.0
    RESERVE = 0.1  # of the cap, kept for what no chunk's forecast sees (numpy temporaries, the allocator's slack)
    REACH = 4
    SAMPLE = 4096
    MINIMUM = 1024

    def __init__(self, cap: int, prior: float) -> None:
        self.cap = int(cap * (1 - self.RESERVE))  # what the chunks plan to stay under
        self.per_transition = prior
        self._largest = 0  # transitions of the chunk the rate was measured on
        self._resident = 0
        self._peaks = False

    def rows(self, wanted: int, branching: float) -> int:
        self._resident = resident_memory_bytes()
        transitions = max(1.0, branching)
        margin = self.UNMEASURED if wanted * transitions > self.REACH * max(self._largest, self.SAMPLE) else self.MARGIN
        per_row = margin * self.per_transition * transitions
        room = self.cap - self._resident
        fit = wanted if per_row * wanted < room else max(0, int(room / per_row))
        if fit < min(wanted, self.MINIMUM):
            return 0
        self._peaks = reset_peak()
        return fit

    def fits(self, allocation: int) -> bool:
        """Whether ``allocation`` more bytes (an array about to be made) stay under ``cap``."""
        return resident_memory_bytes() + allocation < self.cap

    def after(self, transitions: int) -> None:
        if transitions < self.SAMPLE:
            return
        peak = peak_resident_bytes() if self._peaks else None
        grown = (peak if peak is not None else resident_memory_bytes()) - self._resident
        self.per_transition = max(self.per_transition, grown / transitions)
        self._largest = max(self._largest, transitions)
