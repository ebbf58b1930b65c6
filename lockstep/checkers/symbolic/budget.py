"""CPU-time budgets for the provers: what a proof attempt may spend, counted in CPU seconds.

A wall-clock limit gives a prover less work on a loaded machine, so the same command proved a
property on an idle machine and not on a busy one (``check --all --proofs`` under load: 9 of 34
pinned proofs were ABC timeouts). The portfolio therefore splits its time in CPU seconds:

- ``cpu_seconds()``: this process's CPU time (every thread) plus that of its finished children
  (``os.times``): ABC's runs are children, waited for before their CPU is read.
- ``process_cpu_seconds(pid)``: the CPU time of a live child (BMC beside the provers), from
  ``/proc``; None where it cannot be read.
- ``cpu_limited(seconds)``: ``preexec_fn`` for a subprocess (``yosys-abc``): ``RLIMIT_CPU`` makes
  the kernel stop it once it has used ``seconds`` of CPU (SIGXCPU, then SIGKILL a second later),
  and no core file is written.
- ``z3_cpu_limit(seconds)``: a watchdog thread that interrupts Z3 (every solver of the main
  context) once this process has spent ``seconds`` of CPU since the block began; Z3's own
  ``timeout`` counts wall time.

A command's ``--timeout`` stays what it says, wall time: the engines stop at its deadline whatever
CPU budget is left.
"""

from __future__ import annotations

import math
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import z3

POLL_SECONDS = 0.05  # how often the Z3 watchdog reads the CPU clock
KILL_AFTER = 1  # seconds of CPU past the soft limit (SIGXCPU) before the hard one (SIGKILL)


def cpu_seconds() -> float:
    """This process's CPU seconds and those of its children that have been waited for."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def process_cpu_seconds(pid: int) -> float | None:
    """The CPU seconds (user and system) a live process has used so far; None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as status:
            fields = status.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:  # fields 14 and 15 of stat(5), counted from the state (field 3) here
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


def cpu_limited(seconds: float) -> Callable[[], None]:
    """A ``preexec_fn`` that limits the child to ``seconds`` of CPU (whole seconds, at least 1)."""
    soft = max(1, math.ceil(seconds))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + KILL_AFTER))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return limit


@dataclass
class Watchdog:
    """Whether a ``z3_cpu_limit`` block ran out of CPU (then Z3 was interrupted)."""

    fired: bool = False


@contextmanager
def z3_cpu_limit(seconds: float | None) -> Iterator[Watchdog]:
    """Interrupt Z3 once this process has spent ``seconds`` of CPU in the block (None: no limit).
    Z3 answers ``unknown`` to an interrupted check, as to a timeout."""
    watchdog = Watchdog()
    if seconds is None:
        yield watchdog
        return
    started = cpu_seconds()
    finished = threading.Event()
    context = z3.main_ctx()

    def watch() -> None:
        while not finished.wait(POLL_SECONDS):
            if cpu_seconds() - started >= seconds:
                watchdog.fired = True
                context.interrupt()
                return

    thread = threading.Thread(target=watch, name="lockstep-z3-cpu-limit", daemon=True)
    thread.start()
    try:
        yield watchdog
    finally:
        finished.set()
        thread.join()
