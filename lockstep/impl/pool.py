"""A pool of long-lived rank processes that run one protocol run after another. Imports no torch.

Starting rank processes (Python, torch, the default group) costs seconds; runtime-against-model
fuzzing runs many short runs. ``RankPool(protocol, ranks, backend, timeout)`` starts the ranks
once, as ``python -m lockstep.impl.rank --pool DIR`` (torchrun-style environment, one process
group, started by ``launcher.start_ranks``: they die with this process, and its guardian
removes the pool's directory if this process is killed), and ``run(config)`` hands them one
run at a time:

- the pool writes the run's ``config.json`` into a fresh run directory and then, atomically,
  ``DIR/<n>.json`` naming it; every rank waits for that file, runs the protocol's ``run_rank``
  with fresh protocol state (new named groups, recorder, status board, choice source; rank 0
  starts the run's helper processes), releases the run's groups and writes ``DIR/<n>.rank-<r>``
  with its exit status;
- the pool watches the run as ``launch`` does (``launcher.watch_run``): a run is completed
  when every rank reported 0, hung when a rank is blocked in one collective or receive for the
  timeout, failed when a rank reported otherwise or died.

With ``flight_recorder=True`` the pool's groups wait three times the hang timeout (as
``lockstep run --flight-recorder``'s do), and every run whose config has the flight recorder on
and a trace directory gets a dumper in each rank (``lockstep.impl.flight_recorder``): on a hang
``watch_run`` asks for the dumps and each rank writes its own beside its trace before the pool
kills it.

A run that did not complete leaves the processes unusable (a rank may be stuck in a collective):
the pool kills the whole process group and starts afresh for the next run. ``close`` stops the
ranks (``DIR/<n>.json`` holding ``{"stop": true}``) and kills what is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from lockstep.impl.launcher import COMPLETED, ERROR, Outcome, start_ranks, watch_run
from lockstep.impl.runtime import RunConfig
from lockstep.lifetime import guardian

START_TIMEOUT = 120.0


class RankPool:
    """Long-lived rank processes for runs of one protocol, rank count, backend and hang timeout."""

    def __init__(
        self, protocol: str, ranks: int, backend: str = "gloo", timeout: float = 10.0, flight_recorder: bool = False
    ) -> None:
        self.protocol, self.ranks, self.backend, self.timeout = protocol, ranks, backend, timeout
        self.flight_recorder = flight_recorder
        self.directory: Path | None = None
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []
        self.group = 0
        self.number = 0
        self.started = 0  # pools started (1 + restarts after runs that did not complete)

    # ------------------------------------------------------------------------------ lifetime
    def _start(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="lockstep-pool-", dir=os.environ.get("LOCKSTEP_RUN_ROOT")))
        (self.directory / "logs").mkdir()
        base = RunConfig(
            protocol=self.protocol,
            ranks=self.ranks,
            backend=self.backend,
            timeout=self.timeout,
            monitored=True,
            flight_recorder=self.flight_recorder,
        )
        base.write(self.directory / "pool.json")
        if not os.environ.get("LOCKSTEP_KEEP_RUN_DIR"):
            guardian().protect(directory=self.directory)
        self.number = 0
        self.processes, self.logs, self.group = start_ranks(
            ["--pool", str(self.directory)], self.ranks, self.directory / "logs"
        )
        self.started += 1

    def _stop(self, kill: bool) -> None:
        if self.directory is not None and not kill:
            self._hand({"stop": True})
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and any(process.poll() is None for process in self.processes):
                time.sleep(0.02)
        if self.group:
            try:
                os.killpg(self.group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for process in self.processes:
            process.wait()
        for log in self.logs:
            log.close()
        if self.group:
            guardian().release(group=self.group)
        if self.directory is not None and not os.environ.get("LOCKSTEP_KEEP_RUN_DIR"):
            shutil.rmtree(self.directory, ignore_errors=True)
            guardian().release(directory=self.directory)
        self.processes, self.logs, self.group, self.directory = [], [], 0, None

    def close(self, kill: bool = False) -> None:
        """Stop the ranks (``kill``: at once, not asked to stop first: the session is being stopped);
        everything the pool started is gone when this returns."""
        self._stop(kill=kill)

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exception: object) -> None:
        self._stop(kill=exception[0] is not None)

    # -------------------------------------------------------------------------------- runs
    def _hand(self, request: dict[str, object]) -> Path:
        assert self.directory is not None
        self.number += 1
        pointer = self.directory / f"{self.number}.json"
        temporary = self.directory / f".{self.number}.json"
        temporary.write_text(json.dumps(request), encoding="utf-8")
        os.replace(temporary, pointer)
        return pointer

    def run(self, config: RunConfig, deadline: float | None = None) -> Outcome:
        """Run ``config`` (its protocol, ranks, backend and timeout must be the pool's) to an outcome."""
        if (config.protocol, config.ranks, config.backend, config.timeout) != (
            self.protocol,
            self.ranks,
            self.backend,
            self.timeout,
        ):
            raise ValueError("a pool runs one protocol, rank count, backend and timeout")
        if self.directory is None:
            self._start()
        assert self.directory is not None
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=self.directory))
        config.run_dir, config.monitored = str(run_dir), True
        config.write(run_dir / "config.json")
        self._hand({"config": str(run_dir / "config.json")})
        reports = [self.directory / f"{self.number}.rank-{rank}" for rank in range(self.ranks)]
        started = time.monotonic()
        outcome = watch_run(
            config,
            run_dir,
            lambda: [_reported(path, process) for path, process in zip(reports, self.processes)],
            started,
            deadline or max(60.0, 6 * config.timeout),
            self.directory / "logs",
        )
        if outcome.outcome != COMPLETED:
            self._stop(kill=True)  # a rank may be stuck in a collective: the next run starts afresh
        return outcome

    @property
    def alive(self) -> bool:
        return bool(self.processes) and all(process.poll() is None for process in self.processes)


def _reported(path: Path, process: subprocess.Popen[bytes]) -> int | None:
    """A rank's exit status for the current run: its report, or the process's if it died."""
    if path.is_file():
        text = path.read_text(encoding="utf-8").strip()
        if text:
            return int(text)
    code = process.poll()
    return None if code is None else (code or 3)  # a rank that exited mid-run failed


__all__ = ["ERROR", "RankPool"]
