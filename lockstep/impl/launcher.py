"""The launcher: spawn a run's processes, watch them, diagnose a hang, kill everything, report.

``launch(config)`` (what ``lockstep run`` does) starts ``ranks`` rank processes on 127.0.0.1
(``start_ranks``), as torchrun would (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK),
all in one new process group; rank 0 starts the coordinator and client processes, which join
that group. Every listener is bound to 127.0.0.1: the launcher binds the rendezvous store's
socket itself and hands it to rank 0 (``STORE_FD_ENVIRONMENT``), and gloo is told to use the
loopback interface (``GLOO_SOCKET_IFNAME=lo``) unless the environment names another. Every
process is started with ``lockstep.lifetime``'s ``python -P`` (nothing imported from the
current directory) and dies with its parent; the process group and the run directory are
registered with this process's guardian, which removes them if this process is killed.
It then polls every process's status board (see ``lockstep.impl.runtime``):

- **hang**: a rank has been blocked in the same collective or receive for ``timeout`` seconds
  (or a rank's collective raised its group's timeout). The diagnosis names what every rank and
  helper waits in, with group and per-group sequence number: ``rank 0 in
  all_reduce(worker_world)#1; rank 1 in all_reduce(worker_dp)#1``. Exit code 1.
- **completed**: every rank exited 0 (they exit once the client shut them down). Exit code 0.
- **runtime error**: a rank failed otherwise (exited with a failure status); the tail of its
  log is kept. Exit code 3.
- **process crashed**: a process of the run died without finishing: a rank killed by a signal
  (the OOM killer, a ``kill``; this wins over a hang and over another rank's failure, which may
  follow from it), or a helper (coordinator, client, engine) gone while its status board says it
  was still at work. The ranks still waiting for it are not hung: the run failed. Exit code 4.
- **inconclusive**: no verdict within ``deadline`` seconds (a run that steps forever). Exit 3.
- **scripted choices diverged**: a process could not take a choice of ``--choices``
  (``ChoiceDivergence``, which its choice source writes to the run directory before raising it:
  ``choices.read_divergence``); the run is stopped at once, as a runtime error whose message names
  the file and line, with the divergence in ``Outcome.diverged`` (``lockstep run``: exit 2).

Every outcome but completion kills the whole process group with SIGKILL before returning.
Under torchrun there is no launcher: rank 0 runs ``Watchdog`` in a thread, which prints the
same diagnosis, kills the coordinator and client, and ends rank 0 (torchrun ends the others).
Imports no torch.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lockstep.impl.choices import ChoiceDivergence, read_choices, read_divergence
from lockstep.impl.flight_recorder import flight_recorder_environment, request_dumps
from lockstep.impl.runtime import AUTHKEY_ENVIRONMENT, RunConfig, read_statuses
from lockstep.lifetime import child_environment, guardian, python_command
from lockstep.loopback import LOOPBACK, loopback_environment, loopback_store

COMPLETED, HANG, ERROR, INCONCLUSIVE = "completed", "hang diagnosed", "runtime error", "inconclusive"
CRASHED = "process crashed"
EXIT_CODES = {COMPLETED: 0, HANG: 1, ERROR: 3, INCONCLUSIVE: 3, CRASHED: 4}
BLOCKED = ("collective", "receive", "timed_out")
STORE_FD_ENVIRONMENT = "LOCKSTEP_STORE_FD"  # rank 0's inherited socket for the rendezvous store
STORE_ENVIRONMENT = "LOCKSTEP_STORE"  # set: the ranks build their own store (not torchrun's env://)


@dataclass
class Outcome:
    """What a run came to, with its figures."""

    outcome: str
    message: str
    seconds: float
    steps: int
    events: int
    waits: dict[str, str] = field(default_factory=dict)
    trace_dir: str | None = None
    choices: list[dict[str, Any]] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)  # every process of the run, by actor
    step_seconds: float = 0.0  # the ranks' mean wall time per engine step (forward, and sync on the boundary)
    trace_seconds: float = 0.0  # time all processes spent writing trace lines
    diverged: ChoiceDivergence | None = None  # the scripted choice the run could not take (an ERROR)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "message": self.message,
            "seconds": round(self.seconds, 3),
            "steps": self.steps,
            "events": self.events,
            "waits": self.waits,
            "trace_dir": self.trace_dir,
            "choices": self.choices,
            "pids": self.pids,
            "step_seconds": self.step_seconds,
            "trace_seconds": self.trace_seconds,
        }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def _order(actor: str) -> tuple[int, int, str]:
    kind, _, number = actor.partition(":")
    return (0, int(number), "") if kind == "rank" and number.isdigit() else (1, 0, actor)


def waits_of(statuses: dict[str, dict[str, Any]]) -> dict[str, str]:
    """What each process is blocked in, by actor (ranks first)."""
    return {
        actor: str(statuses[actor]["what"])
        for actor in sorted(statuses, key=_order)
        if statuses[actor]["state"] in BLOCKED and statuses[actor].get("what")
    }


def describe_waits(waits: dict[str, str]) -> str:
    return "; ".join(f"{actor.replace(':', ' ')} in {what}" for actor, what in waits.items())


def hang_diagnosis(run_dir: str | Path) -> str:
    """The line that says what every process waits in, from the run's statuses (torchrun runs,
    where no launcher watches: rank 0's watchdog, or a rank whose collective timed out first)."""
    return f"lockstep: hang diagnosed: {describe_waits(waits_of(read_statuses(run_dir)))}\n"


def hung(statuses: dict[str, dict[str, Any]], ranks: int, timeout: float, now: float) -> bool:
    """A rank blocked in one collective or receive for ``timeout`` seconds, or timed out in one."""
    for rank in range(ranks):
        status = statuses.get(f"rank:{rank}")
        if status is None:
            continue
        if status["state"] == "timed_out":
            return True
        if status["state"] in BLOCKED and now - float(status["since"]) >= timeout:
            return True
    return False


def _process_state(pid: int) -> str | None:
    """The kernel's one-letter state of process ``pid`` (``Z``: exited, not yet reaped), None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"
        return "?"  # no /proc: alive as far as can be told
    return text.rsplit(")", 1)[-1].split()[0]


def crashed_helpers(statuses: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The helper processes (not ranks) that died while their status board says they were at work,
    by actor, with what they were doing ("while in receive(...)")."""
    dead: dict[str, str] = {}
    for actor in sorted(statuses, key=_order):
        status = statuses[actor]
        if actor.startswith("rank:") or status.get("state") in ("done", "failed"):
            continue
        pid = status.get("pid")
        if isinstance(pid, int) and _process_state(pid) in (None, "Z", "X"):
            what = status.get("what")
            dead[actor] = f"while in {what}" if what else f"while {status.get('state')}"
    return dead


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _totals(statuses: dict[str, dict[str, Any]]) -> tuple[int, int]:
    steps = sum(int(status.get("steps", 0)) for status in statuses.values())
    events = sum(int(status.get("events", 0)) for status in statuses.values())
    return steps, events


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _choices(run_dir: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((run_dir / "choices").glob("*.choices")):
        found.extend(choice.to_json() for choice in read_choices(path))
    return found


def launch(config: RunConfig, deadline: float = 120.0, keep_run_dir: bool = False) -> Outcome:
    """Run ``config`` to an outcome; every process it started is gone when this returns."""
    run_dir = Path(tempfile.mkdtemp(prefix="lockstep-run-", dir=os.environ.get("LOCKSTEP_RUN_ROOT")))
    config.run_dir, config.monitored = str(run_dir), True
    config_path = run_dir / "config.json"
    config.write(config_path)
    (run_dir / "logs").mkdir()
    keep = bool(keep_run_dir or os.environ.get("LOCKSTEP_KEEP_RUN_DIR"))
    if not keep:
        guardian().protect(directory=run_dir)
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    started = time.monotonic()
    group = 0
    try:
        extra = flight_recorder_environment(config, os.environ)
        processes, logs, group = start_ranks(["--config", str(config_path)], config.ranks, run_dir / "logs", extra)
        outcome = watch_run(
            config, run_dir, lambda: [process.poll() for process in processes], started, deadline, run_dir / "logs"
        )
    finally:
        if group:
            _kill_group(group)
        for process in processes:
            process.wait()
        for log in logs:
            log.close()
        if group:
            guardian().release(group=group)
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)
            guardian().release(directory=run_dir)
    return outcome


def start_ranks(
    arguments: list[str], ranks: int, logs: Path, extra_environment: dict[str, str] | None = None
) -> tuple[list[subprocess.Popen[bytes]], list[IO[bytes]], int]:
    """Start ``python -P -m lockstep.impl.rank ARGUMENTS`` for every rank in one new process group
    registered with the guardian; each rank's output goes to ``logs/rank-<r>.log``. Returns the
    processes, their open log files and the group (on an error, what started is killed)."""
    environment = child_environment()
    environment.update(extra_environment or {})
    store = loopback_store()
    environment.update(loopback_environment(environment))
    environment.update(MASTER_PORT=str(store.getsockname()[1]), WORLD_SIZE=str(ranks))
    environment[STORE_ENVIRONMENT] = "1"
    environment[AUTHKEY_ENVIRONMENT] = secrets.token_hex(16)
    root = str(Path(__file__).resolve().parents[2])
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [root, environment.get("PYTHONPATH")]))
    processes: list[subprocess.Popen[bytes]] = []
    files: list[IO[bytes]] = []
    group = 0
    try:
        for rank in range(ranks):
            environment.update(RANK=str(rank), LOCAL_RANK=str(rank))
            environment.pop(STORE_FD_ENVIRONMENT, None)
            inherited: tuple[int, ...] = ()
            if rank == 0:
                environment[STORE_FD_ENVIRONMENT] = str(store.fileno())
                inherited = (store.fileno(),)
            log = open(logs / f"rank-{rank}.log", "wb")  # noqa: SIM115 - the caller closes it
            files.append(log)
            process = subprocess.Popen(
                python_command("lockstep.impl.rank", *arguments),
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=group,
                pass_fds=inherited,
            )
            if not group:
                group = process.pid
                guardian().protect(group=group)
            processes.append(process)
    except BaseException:
        if group:
            _kill_group(group)
            guardian().release(group=group)
        for process in processes:
            process.wait()
        for opened in files:
            opened.close()
        raise
    finally:
        store.close()
    return processes, files, group


def _kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _killed(codes: list[int | None]) -> int | None:
    """The first rank killed by a signal (a negative exit status), or None."""
    return next((rank for rank, code in enumerate(codes) if code is not None and code < 0), None)


def killed_message(rank: int, codes: list[int | None], logs: Path) -> str:
    """What a crashed run's message says of the killed ``rank``: the signal and its log's tail."""
    code = codes[rank]
    assert code is not None
    return f"rank {rank} was killed by {_signal_name(-code)}:\n{_tail(logs / f'rank-{rank}.log')}".rstrip()


def watch_run(
    config: RunConfig, run_dir: Path, codes: Callable[[], list[int | None]], started: float, deadline: float, logs: Path
) -> Outcome:
    """Watch one run to its outcome. ``codes()`` gives each rank's exit status for this run (None:
    still running); ``logs`` holds ``rank-<r>.log`` (the tail of a failed rank's log is kept)."""

    def finish(
        outcome: str,
        message: str,
        statuses: dict[str, dict[str, Any]],
        waits: dict[str, str] | None = None,
        diverged: ChoiceDivergence | None = None,
    ) -> Outcome:
        steps, events = _totals(statuses)
        pids = {actor: int(status["pid"]) for actor, status in statuses.items()}
        nanoseconds = sum(int(status.get("step_ns", 0)) for status in statuses.values())
        return Outcome(
            outcome,
            message,
            time.monotonic() - started,
            steps,
            events,
            waits or {},
            config.trace_dir,
            _choices(run_dir),
            pids,
            nanoseconds / 1e9 / steps if steps else 0.0,
            sum(int(status.get("trace_ns", 0)) for status in statuses.values()) / 1e9,
            diverged,
        )

    while True:
        time.sleep(0.05)
        now = time.time()
        statuses = read_statuses(run_dir)
        dead = crashed_helpers(statuses)  # before the ranks' codes: a helper dies after its rank
        current = codes()
        diverged = None if config.choices is None else read_divergence(run_dir / "choices")  # written first
        if diverged is not None:
            message = f"the run does not fit its scripted choices (ChoiceDivergence): {diverged}"
            return finish(ERROR, message, statuses, waits_of(statuses), diverged)
        killed = _killed(current)
        if killed is not None:  # a rank killed by a signal (the OOM killer, a kill): whatever the others wait in
            return finish(CRASHED, killed_message(killed, current, logs), statuses)
        if hung(statuses, config.ranks, config.timeout, now):
            waits = waits_of(statuses)
            request_dumps(config)  # with --flight-recorder: every rank dumps before it is killed
            return finish(HANG, describe_waits(waits), statuses, waits)
        failed = [rank for rank, code in enumerate(current) if code not in (None, 0)]
        if failed:
            time.sleep(0.2)  # let the other ranks' statuses settle
            statuses = read_statuses(run_dir)
            current = codes()  # a rank that failed because a peer was killed: the peer's death shows by now
            killed = _killed(current)
            if killed is not None:
                return finish(CRASHED, killed_message(killed, current, logs), statuses)
            if hung(statuses, config.ranks, 0.9 * config.timeout, time.time()):  # e.g. the NCCL watchdog's abort
                waits = waits_of(statuses)
                request_dumps(config)
                return finish(HANG, describe_waits(waits), statuses, waits)
            rank = failed[0]
            tail = _tail(logs / f"rank-{rank}.log")
            return finish(ERROR, f"rank {rank} exited with status {current[rank]}:\n{tail}", statuses)
        if dead:  # a helper died on its own (a rank that died is reported above): not a hang
            waits = {actor: what for actor, what in waits_of(statuses).items() if actor not in dead}
            message = "; ".join(
                f"{actor.replace(':', ' ')} (pid {statuses[actor]['pid']}) died {why}" for actor, why in dead.items()
            )
            return finish(CRASHED, message + (f"; {describe_waits(waits)}" if waits else ""), statuses, waits)
        if all(code == 0 for code in current):
            return finish(COMPLETED, "every rank finished", statuses)
        if time.monotonic() - started > deadline:
            waits = waits_of(statuses)
            return finish(
                INCONCLUSIVE, f"no outcome within {deadline:.0f} s; " + describe_waits(waits), statuses, waits
            )


class Watchdog(threading.Thread):
    """Hang detection under torchrun (no launcher): rank 0 watches the statuses itself."""

    def __init__(self, config: RunConfig) -> None:
        super().__init__(name="lockstep-watchdog", daemon=True)
        self.config = config

    def run(self) -> None:
        while True:
            time.sleep(0.1)
            statuses = read_statuses(self.config.run_dir)
            if hung(statuses, self.config.ranks, self.config.timeout, time.time()):
                sys.stderr.write(hang_diagnosis(self.config.run_dir))
                sys.stderr.flush()
                request_dumps(self.config)
                for actor in ("coordinator", "client"):
                    pid = statuses.get(actor, {}).get("pid")
                    if isinstance(pid, int):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                os._exit(1)
