"""BMC in its own process beside the provers: the pdr portfolio's search for counterexamples.

The provers (Houdini, ABC's ``pdr``, Spacer) settle a property by proving it; a violation deeper
than the first BMC phase would never be found by them quickly (docs/performance.md measures
it). So BMC keeps
unrolling, depth after depth, in a process of its own (``fork``: the machine is not sent, the
child has it) while the provers run in this one. After every depth the child reports how far each
property is checked and the properties a path decided (a violation or a witness, each already
replayed through ``evaluate`` by ``BoundedModelChecker``); ``BackgroundBmc`` reads the reports
when asked. Its CPU time is read from ``/proc`` (``budget.process_cpu_seconds``), so its budget is
CPU seconds, like the provers'.

The child is its own process group, registered with the guardian and killed with SIGKILL by its
parent death signal (``lockstep.lifetime``), so it never outlives the command; it ignores
the terminal's Ctrl-C (its parent stops it). ``stop`` kills it and waits for it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from lockstep.checkers.result import PropertyResult
from lockstep.checkers.symbolic.bmc import BoundedModelChecker, TranslationBug
from lockstep.checkers.symbolic.budget import process_cpu_seconds
from lockstep.lifetime import PARENT_ENVIRONMENT, die_with_parent, guardian
from lockstep.spec.machine import Machine

POLL_SECONDS = 0.2  # how long ``wait`` blocks on the child's reports between checks


@dataclass
class Progress:
    """What BMC has shown so far: the deepest depth fully checked, steps per property, paths."""

    depth: int = -1
    checked: dict[int, int] = field(default_factory=dict)  # position -> steps it holds for
    decided: dict[int, PropertyResult] = field(default_factory=dict)  # position -> violation / witness
    cpu: float = 0.0
    finished: bool = False  # the child ended (its depth limit, its wall limit, or all decided)
    stopped: str | None = None  # why it ended short of its depth limit ("timeout")


class BackgroundBmc:
    """BMC of ``machine``'s properties ``only`` up to ``max_depth`` in a child process (see the module doc)."""

    def __init__(self, machine: Machine, only: frozenset[int], max_depth: int, deadline: float | None) -> None:
        self.machine = machine
        self.only = only
        self.max_depth = max_depth
        self.deadline = deadline  # time.monotonic() at which the child stops (a command's --timeout)
        self.progress = Progress()
        self._process: Any = None
        self._reports: Connection | None = None

    def start(self) -> None:
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        process = context.Process(
            target=_search,
            args=(self.machine, self.only, self.max_depth, timeout, sender, os.getpid()),
            name="lockstep-bmc",
            daemon=True,
        )
        process.start()
        sender.close()
        pid = process.pid
        assert pid is not None
        try:
            os.setpgid(pid, pid)  # (the child does it too: whichever runs first)
        except OSError:
            pass
        guardian().protect(group=pid)
        self._process, self._reports = process, receiver

    def update(self, wait: float = 0.0) -> Progress:
        """Read every report the child has sent (waiting up to ``wait`` seconds for the first)."""
        reports = self._reports
        while reports is not None and reports.poll(wait):
            wait = 0.0
            try:
                kind, *payload = reports.recv()
            except (EOFError, OSError):
                self.progress.finished = True
                self._reports = reports = None
                break
            if kind == "bug":
                raise TranslationBug(payload[0])
            if kind == "error":
                raise RuntimeError(f"BMC beside the provers failed: {payload[0]}")
            depth, checked, decided, cpu = payload[:4]
            self.progress.depth = max(self.progress.depth, depth)
            self.progress.checked.update(checked)
            self.progress.decided.update(decided)
            self.progress.cpu = max(self.progress.cpu, cpu)
            if kind == "done":
                self.progress.finished, self.progress.stopped = True, payload[4]
        return self.progress

    def cpu(self) -> float:
        """The CPU seconds the child has used."""
        measured = None if self._process is None else process_cpu_seconds(self._process.pid)
        return max(self.progress.cpu, measured or 0.0)

    def wait(self, enough: Callable[[Progress], bool], *, cpu: float | None, deadline: float | None) -> Progress:
        """Let BMC run until ``enough`` says so, it ends, it has used ``cpu`` seconds of CPU, or
        ``deadline`` (``time.monotonic()``) passes."""
        while True:
            progress = self.update(POLL_SECONDS)
            if enough(progress) or progress.finished:
                return progress
            if cpu is not None and self.cpu() >= cpu:
                return progress
            if deadline is not None and time.monotonic() >= deadline:
                return progress

    def stop(self) -> None:
        """Kill the child (if it still runs) and wait for it."""
        process = self._process
        if process is None:
            return
        self.progress.cpu = self.cpu()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            process.kill()
        process.join()
        guardian().release(group=process.pid)
        if self._reports is not None:
            self._reports.close()
        self._process = self._reports = None


def _search(
    machine: Machine, only: frozenset[int], max_depth: int, timeout: float | None, reports: Connection, parent: int
) -> None:
    """The child: BMC depth after depth, a report after each (see the module doc)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    os.environ[PARENT_ENVIRONMENT] = str(parent)
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        checker = BoundedModelChecker(
            machine, max_depth, only=only, solver="cadical", timeout=timeout, spot_check=False
        )
        sent: set[int] = set()

        def report(kind: str, depth: int, *extra: object) -> None:
            decided = {}
            for position in checker.outcomes:
                found = checker.decided(position)
                if position not in sent and found is not None:
                    decided[position] = found
            sent.update(decided)
            checked = {position: steps for position in only if (steps := checker.steps_checked(position)) is not None}
            reports.send((kind, depth, checked, decided, time.process_time(), *extra))

        checker.on_depth = lambda depth: report("depth", depth)
        result = checker.run()
        report("done", result.stats.depth, result.stopped)
    except TranslationBug as error:
        reports.send(("bug", str(error)))
    except BaseException as error:  # noqa: BLE001 - whatever it is, the parent says it
        reports.send(("error", f"{type(error).__name__}: {error}"))
    finally:
        reports.close()
