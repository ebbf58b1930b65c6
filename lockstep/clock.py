"""One command's wall clock: what ``--timeout`` bounds, from the command's start to its end.

``Clock(timeout)`` is started once per command (``lockstep.cli.invocation.clock``); every phase
reads what is left from it: a model's ``build()``, a goal search, the engines (``Limits.on``), the
runtime's runs (their deadline), the replay of their traces. So ``--timeout 5`` bounds the whole
command, never one phase at a time. A phase that cannot stop itself with a partial result runs
under ``Clock.alarm``: SIGALRM when the clock has run out (and a short grace has passed, which a
phase that does return uses to end, so that the next one reports the stop with what it has)
raises ``TimeoutReached`` in it, which the command reports as "stopped: timeout" (exit 3).
Imports nothing beyond the standard library: the CLI starts the clock before it imports a command.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

TIMEOUT = "timeout"  # the ``stopped`` of whatever the clock stopped


class TimeoutReached(BaseException):
    """The command's ``--timeout`` ran out in a phase that has no partial result to give (a model's
    ``build()``, a replay). A ``BaseException``, as Ctrl-C is: a model's ``except Exception`` does
    not swallow it."""

    def __init__(self, timeout: float, phase: str) -> None:
        super().__init__(timeout, phase)
        self.timeout, self.phase = timeout, phase

    def __str__(self) -> str:
        return f"stopped: timeout (--timeout {self.timeout:g} s ran out while {self.phase})"


@dataclass(frozen=True)
class Clock:
    """One command's wall clock: ``timeout`` seconds (None: no limit) from ``started`` (monotonic)."""

    timeout: float | None = None
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float | None:
        """Seconds left (never below 0), or None without a limit."""
        if self.timeout is None:
            return None
        return max(0.0, self.timeout - (time.monotonic() - self.started))

    def expired(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def grace(self) -> float:
        """How long past the deadline ``alarm`` waits: a short phase (a built-in model's build) ends
        within it, and the phase after it, which reads this clock itself, reports the stop with
        what it has (a search's partial result)."""
        return 2.0 + 0.1 * (self.timeout or 0.0)

    def within(self, seconds: float) -> float:
        """``seconds``, or what is left of the clock if that is less."""
        left = self.left()
        return seconds if left is None else min(seconds, left)

    @contextmanager
    def alarm(self, phase: str) -> Iterator[None]:
        """Run the block with SIGALRM set for what is left and ``grace()`` more: ``TimeoutReached(phase)``
        is raised in it then. For a phase that may never return and does not read the clock itself
        (a model file's ``build()``, a replay); an engine's search reads it (``Limits.on``) and stops
        with its partial result instead, never interrupted inside a solver. Only the main thread can
        take the signal: elsewhere the block runs unbounded. An alarm set outside is put back
        afterwards."""
        left = self.left()
        if left is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        left += self.grace()
        timeout = float(self.timeout or 0)

        def expire(number: int, frame: FrameType | None) -> None:
            raise TimeoutReached(timeout, phase)

        previous_handler: Any = signal.signal(signal.SIGALRM, expire)
        previous_delay, _ = signal.setitimer(signal.ITIMER_REAL, left)
        entered = time.monotonic()
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)
            if previous_delay > 0:  # an outer alarm: what was left of it
                signal.setitimer(signal.ITIMER_REAL, max(0.001, previous_delay - (time.monotonic() - entered)))
