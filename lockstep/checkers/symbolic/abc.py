"""ABC's ``pdr`` as an external prover: finding the binary, running it, reading its answer.

The ``yosys-abc`` binary comes with the ``pyosys`` wheel (``pip install lockstep[proofs]``); it is
found next to that package (without importing it) or on ``PATH``. Each property is one run, a
subprocess with its own temporary directory (``lockstep.lifetime.temporary_directory``; it
and the process are removed by the guardian if lockstep is killed): ``read_aiger``, ``pdr -T`` with the time limit,
``-n -c`` (generalisation with ``down`` and counterexamples to generalisation, Hassan, Bradley and
Somenzi, FMCAD 2013; docs/performance.md has its measurements against ABC's default),
``-v`` (its progress: an unknown answer says the frame reached and the clauses of each frame, the
measure of how far from a proof it was), ``-d`` (dump the inductive invariant as a PLA of blocked
cubes over the latches), and
``write_cex -a`` (the counterexample as AIGER witness lines). The limit is CPU time: ``RLIMIT_CPU``
stops the process once it has used its seconds (``budget.cpu_limited``), so a loaded machine gives
ABC the same work, only later; ``pdr -T`` (wall time) is set far beyond it, to ``WALL_FACTOR``
times the limit or the caller's wall deadline (a command's ``--timeout``), and the process is
killed ``GRACE`` seconds after that. Nothing ABC says is believed here: ``pdr`` decodes and
re-checks it (``circuit``, ``invariants.verify``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lockstep.checkers.symbolic.budget import KILL_AFTER, cpu_limited
from lockstep.lifetime import guardian, temporary_directory

GRACE = 5.0  # seconds past ``pdr -T`` before the process is killed
WALL_FACTOR = 20.0  # ``pdr -T`` (wall seconds) is this many times the CPU limit, unless a deadline is nearer
PROGRESS = re.compile(r"^\s*(\d+) :((?: \d+)+)", re.MULTILINE)  # ``pdr -v``: frame : clauses per frame


@dataclass
class AbcAnswer:
    """ABC's answer for one property: "safe", "unsafe" or "unknown", and what came with it."""

    answer: str
    seconds: float  # CPU seconds of the ABC process(es)
    cubes: list[str] = field(default_factory=list)  # safe: the blocked cubes, one char per column
    columns: list[int] = field(default_factory=list)  # the latch (position) of each column
    frames: list[str] = field(default_factory=list)  # unsafe: input values per frame
    reason: str = ""


INSTALL_HINT = "pip install 'lockstep[proofs]'"  # the extra that brings yosys-abc (the pyosys wheel)
NOT_INSTALLED = f"ABC's pdr is not installed ({INSTALL_HINT} brings yosys-abc)"


def binary() -> str | None:
    """The path of ``yosys-abc``, or None if it is not installed."""
    spec = importlib.util.find_spec("pyosys")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / "yosys-abc"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return shutil.which("yosys-abc")


def prove(program: str, aiger: bytes, limit: float, *, engine: str = "pdr", wall: float | None = None) -> AbcAnswer:
    """Run ``pdr`` on one single-output circuit for at most ``limit`` seconds of CPU (and ``wall``
    seconds of wall time where given); ``engine="bmc3"`` runs ABC's bounded model checker instead
    (it only finds counterexamples and witnesses). ``pdr -n -c`` can stop on an internal assertion
    of ABC (seen on the largest shipped model): then ``pdr`` with ABC's default generalisation has the
    CPU time left."""
    if engine != "pdr":
        return _run(program, aiger, "bmc3", limit, wall)
    answer = _run(program, aiger, "pdr -v -n -c", limit, wall, invariant=True)
    left = limit - answer.seconds
    if answer.answer == "unknown" and "Assertion" in answer.reason and left >= 1:
        retry = _run(program, aiger, "pdr -v", left, wall, invariant=True)
        retry.seconds += answer.seconds
        retry.reason = f"{retry.reason} (after pdr -n -c stopped: {answer.reason})" if retry.reason else ""
        return retry
    return answer


def _run(
    program: str, aiger: bytes, command: str, limit: float, wall: float | None, *, invariant: bool = False
) -> AbcAnswer:
    """One ``yosys-abc`` process: ``read_aiger``, ``command`` with its wall limit (``-T``) and, with
    ``invariant``, the invariant dump, then ``write_cex``; its answer, with the CPU seconds it used."""
    cpu = max(1, int(limit))
    ceiling = max(1, int(cpu * WALL_FACTOR if wall is None else min(cpu * WALL_FACTOR, wall)))
    dump = " -d -I invariant.pla" if invariant else ""
    with temporary_directory("lockstep-abc-") as directory:
        (directory / "circuit.aig").write_bytes(aiger)
        script = f"read_aiger circuit.aig; {command} -T {ceiling}{dump}; write_cex -a witness.txt"
        before = _children_cpu()
        try:
            output, code = _answer(program, script, directory, cpu, ceiling + GRACE)
        except subprocess.TimeoutExpired:
            spent = _children_cpu() - before
            return AbcAnswer("unknown", spent, reason=f"ABC outlived its {ceiling} s of wall time and was killed")
        elapsed = _children_cpu() - before
        if code == -signal.SIGXCPU or (code == -signal.SIGKILL and elapsed >= cpu - KILL_AFTER):
            return AbcAnswer(
                "unknown", elapsed, reason=f"ABC used its {cpu} s of CPU and was stopped{progress(output)}"
            )
        if "Property proved" in output:
            pla = directory / "invariant.pla"
            if not pla.is_file():
                return AbcAnswer("unknown", elapsed, reason="ABC proved it but wrote no invariant")
            cubes, columns = _pla(pla.read_text())
            if columns is None:
                return AbcAnswer("unknown", elapsed, reason="ABC's invariant does not name its latches")
            return AbcAnswer("safe", elapsed, cubes, columns)
        if "was asserted in frame" in output:
            witness = directory / "witness.txt"
            if not witness.is_file():
                return AbcAnswer("unknown", elapsed, reason="ABC found a counterexample but wrote none")
            return AbcAnswer("unsafe", elapsed, frames=_witness(witness.read_text()))
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        marks = ("Assertion", "Reached", "UNDECIDED", "No output")
        last = [line for line in lines if any(mark in line for mark in marks)][:1] or lines[-1:]
        return AbcAnswer("unknown", elapsed, reason=f"ABC: {last[0] if last else 'no answer'}{progress(output)}")


def _children_cpu() -> float:
    """CPU seconds of this process's children that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _answer(program: str, script: str, directory: Path, cpu: int, seconds: float) -> tuple[str, int]:
    """ABC's output (stdout, then stderr) for ``script`` run in ``directory``, and its exit status;
    the process may use ``cpu`` seconds of CPU (``RLIMIT_CPU``) and lives at most ``seconds`` of wall
    time. It is in its own group, registered with the guardian (``lockstep.lifetime``): it is
    killed if lockstep is, rather than left computing until its limit."""
    with subprocess.Popen(
        [program, "-c", script],
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
        preexec_fn=cpu_limited(cpu),  # noqa: PLW1509 - only setrlimit, no locks taken
    ) as process:
        guardian().protect(group=process.pid)
        try:
            stdout, stderr = process.communicate(timeout=seconds)
        except BaseException:  # its limit passed, Ctrl-C, SIGTERM: it goes now
            process.kill()
            process.communicate()
            raise
        finally:
            guardian().release(group=process.pid)
    return stdout + stderr, process.returncode


def progress(output: str) -> str:
    """``pdr -v``'s last progress line as "; frame N, clauses per frame a b c" (empty if none)."""
    found = PROGRESS.findall(output)
    if not found:
        return ""
    frame, clauses = found[-1]
    return f"; frame {frame}, clauses per frame{clauses}"


def _pla(text: str) -> tuple[list[str], list[int] | None]:
    """The cubes of ABC's invariant PLA, and the latch of each column (from ``.ilb r<k>``)."""
    cubes: list[str] = []
    columns: list[int] | None = None
    for line in text.splitlines():
        if line.startswith(".ilb"):
            names = line.split()[1:]
            if not all(name.startswith("r") and name[1:].isdigit() for name in names):
                return cubes, None
            columns = [int(name[1:]) for name in names]
        elif line and line[0] in "01-":
            cubes.append(line.split()[0])
    if columns is None and cubes and set(cubes[0]) <= {"-"}:
        columns = []
    if columns is not None and any(len(cube) != len(columns) for cube in cubes):
        return cubes, None
    return cubes, columns


def _witness(text: str) -> list[str]:
    """The input lines of an AIGER witness (the first line is the initial latch values)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(("#", "c"))]
    lines = [line for line in lines if line not in (".", "1", "b0") or set(line) <= {"0", "1"}]
    return lines[1:]
