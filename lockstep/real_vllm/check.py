"""``lockstep vllm check``: run a real vLLM through a scenario, record every actor, replay against its release's model.

``run_check(protocol, scenario, trace_dir, ...)`` is the whole check, in the Python where vLLM is installed:

1. **Release**: ``releases.detect()`` reads the installed ``vllm.__version__`` and maps it to the model
   variant and recording of that release (refused, a usage error, for one no recording covers);
   ``release_variant`` gives the protocol's variant (the others: their model's release table, through the
   recorder ``driver.RECORDERS`` names).
2. **Run**: the driver (``python -P -m lockstep.real_vllm.driver``) runs in a session of its own with
   lockstep's settings in its environment (``settings.environment``), the scenario's model bounds in
   ``LOCKSTEP_TRACE_PARAMETERS``, ``LOCKSTEP_TRACE_DIR`` and the protocol (``LOCKSTEP_VLLM_PROTOCOL``) set:
   every vLLM process records itself (dp-pause: the client ``client.jsonl``, each engine core
   ``rank-N.jsonl``, the coordinator unrecorded, as the headers say; pp-broadcast: the engine core
   ``engine.jsonl``, each PP worker ``rank-N.jsonl``; computed-tokens: ``scheduler.jsonl``; async-placeholders:
   ``scheduler.jsonl`` and ``runner.jsonl``, both from the one process that holds the engine). Its output
   goes to ``vllm.log`` in the trace folder, its progress to ``driver-status.json``. When the run passes its
   deadline (``timeout``) the whole process group is killed (vLLM's engines bind loopback ports and
   ``/dev/shm``: nothing may be left behind), and the group is registered with lockstep's guardian, which
   kills it if this process dies first.
3. **Judge**: the recording is merged and replayed against the release's variant (or ``variant``) with
   the recorder's profile (``recorder_profile``: the recorder module's ``PROFILE``; computed-tokens: the one of
   the scenario's scheduling),
   every actor expected (``expected_actors``), through the one replay path
   (``lockstep.checkers.conformance.judgement.replay_traces``) with the goal observer ``lockstep test-runtime``
   uses (``lockstep.checkers.conformance.goals.RuntimeGoals``): which of the model's coverage goals the real run
   reached.

The verdict (``CheckResult.verdict``, exit code): ``refused`` (2: the driver found another release or a
missing patch target); ``inconclusive`` (3) when a recorder stopped (its ``*.error.json`` beside the
trace: the actors' files then end at different points, so no verdict on the whole run is sound, whatever
the replay of the prefix says); ``diverges`` or ``violated`` (1: the event, the model's candidate states,
the property); ``crashed`` (4: the driver was killed by a signal); ``inconclusive`` (3: the run failed in
vLLM or hung past the deadline, or the replay lacks evidence); ``conforms`` (0). Nothing here prints:
``lockstep.cli.vllm`` renders.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockstep import record
from lockstep.real_vllm import settings
from lockstep.real_vllm.releases import Release
from lockstep.real_vllm.scenarios import RANKS
from lockstep.traces.output import write_atomically

PROTOCOLS = ("dp-pause", "pp-broadcast", "computed-tokens", "async-placeholders")  # checked on a real vLLM
DEFAULT_TIMEOUT = 900.0  # seconds the real run may take (start-up included: 1-3 min on 2 cores)
POLL_SECONDS = 0.5
MODEL_DIRECTORY = Path(__file__).resolve().parent / "models" / "dense-moe-flag"
MODEL_DIRECTORIES = {  # by protocol
    "dp-pause": MODEL_DIRECTORY,
    "pp-broadcast": MODEL_DIRECTORY.parent / "dense",
    "computed-tokens": MODEL_DIRECTORY.parent / "dense",
    "async-placeholders": MODEL_DIRECTORY.parent / "dense",
}
STATUS_FILE, SPEC_FILE, LOG_FILE = "driver-status.json", "driver-spec.json", "vllm.log"
COMPLETED, REFUSED, FAILED, TIMEOUT, CRASHED = "completed", "refused", "failed", "timeout", "crashed"
EXIT_CODES = {"conforms": 0, "diverges": 1, "violated": 1, "refused": 2, "inconclusive": 3, "crashed": 4}


class UnknownProtocol(ValueError):
    """A protocol ``lockstep vllm check`` has no real-engine check for (the message names those it has)."""


@dataclass
class Run:
    """How the real run went: ``outcome`` (completed, refused, failed, timeout, crashed), the driver's
    exit status, how long it took, the last phase it reached, a message, and the client's timeline."""

    outcome: str
    exit_status: int | None
    seconds: float
    phase: str
    message: str = ""
    timeline: dict[str, Any] | None = None
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "exit_status": self.exit_status,
            "seconds": round(self.seconds, 3),
            "phase": self.phase,
            "message": self.message,
            "timeline": self.timeline,
            "log": self.log,
        }


@dataclass
class CheckResult:
    """The check's result: the release, scenario, run, the replay's verdict and the goals reached."""

    protocol: str
    release: Release
    variant: str
    scenario: Any  # a dp-pause ``Scenario`` or a pp-broadcast ``pipeline.PipelineScenario``
    trace_dir: Path
    run: Run
    replay: dict[str, Any] | None = None  # ReplayVerdict.to_json(), or None when nothing could be replayed
    replay_error: str | None = None
    goals: list[dict[str, Any]] = field(default_factory=list)  # every model goal: kind, label, reached
    recorder_failures: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = "inconclusive"
    reason: str = ""
    model: Any = None  # the Protocol that judges the recording (``--model-file``); None: the built-in one

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def goals_reached(self) -> list[dict[str, Any]]:
        return [goal for goal in self.goals if goal["reached"]]

    def to_json(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "release": self.release.version,
            "variant": self.variant,
            "scenario": self.scenario.to_json(),
            "trace_dir": str(self.trace_dir.resolve()),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "run": self.run.to_json(),
            "replay": self.replay,
            "replay_error": self.replay_error,
            "recorder_failures": self.recorder_failures,
            "goals": {
                "total": len(self.goals),
                "reached": len(self.goals_reached()),
                "labels": [goal["label"] for goal in self.goals_reached()],
                "by_kind": _by_kind(self.goals),
            },
        }


def _by_kind(goals: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for goal in goals:
        entry = counts.setdefault(goal["kind"], {"total": 0, "reached": 0})
        entry["total"] += 1
        entry["reached"] += bool(goal["reached"])
    return counts


def check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise UnknownProtocol(
            f"lockstep vllm check has no real-engine check of {protocol!r}; it checks: {', '.join(PROTOCOLS)}"
        )


def release_variant(protocol: str, release: Release) -> str:
    """The model variant of ``protocol`` that ``release`` stands for (``UnsupportedRelease`` where none does)."""
    if protocol == "dp-pause":
        return release.variant
    return str(_recorder(protocol).release_variant(release.version))


def recorder_profile(protocol: str, scenario: Any = None) -> Any:
    """The ``RecorderProfile`` of ``protocol``'s recorder (computed-tokens and pp-broadcast: the one of
    ``scenario``'s scheduling, synchronous or async)."""
    if protocol in ("computed-tokens", "pp-broadcast") and scenario is not None:
        return _recorder(protocol).profile_of(bool(scenario.asynchronous))
    return _recorder(protocol).PROFILE


def _recorder(protocol: str) -> Any:
    """The module that records ``protocol`` (``driver.RECORDERS``)."""
    import importlib

    from lockstep.real_vllm.driver import RECORDERS

    return importlib.import_module(RECORDERS[protocol])


def expected_actors(protocol: str) -> list[str]:
    """Every actor a recording of ``protocol`` has: the client and each DP engine core, the PP engine and
    each stage, the scheduler (and the runner)."""
    if protocol == "pp-broadcast":
        from lockstep.real_vllm.pipeline import STAGES

        return ["engine", *(f"rank:{rank}" for rank in range(STAGES))]
    if protocol == "computed-tokens":
        return ["scheduler"]
    if protocol == "async-placeholders":
        return ["scheduler", "runner"]
    return ["client", *(f"rank:{rank}" for rank in range(RANKS))]


def _read_status(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the driver's process group (vLLM's engines and coordinator with it), reap the driver, and wait
    until no process of the group is left running (a killed one may stay a zombie of another parent)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    deadline = time.monotonic() + 30
    while _group_running(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _group_running(group: int) -> bool:
    """Whether a process of ``group`` is alive and not a zombie (read from /proc; False where there is none)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] not in ("Z", "X"):
            return True
    return False


def run_driver(
    release: Release,
    scenario: Any,
    trace_dir: Path,
    timeout: float,
    parameters: dict[str, int] | None = None,
    protocol: str = "dp-pause",
    python_path: Path | None = None,
) -> Run:
    """Run the scenario on the installed vLLM, recording into ``trace_dir`` with the model bounds
    ``parameters`` (default: the scenario's); ``python_path`` goes first on every process's
    ``PYTHONPATH`` (``--vllm-source``: ``source_overlay``). Every process it started is gone when this
    returns (see the module doc)."""
    from lockstep.instrumentation.vllm_dp_pause import PARAMETERS_ENVIRONMENT
    from lockstep.lifetime import child_environment, guardian, python_command
    from lockstep.real_vllm.driver import PROTOCOL_ENVIRONMENT

    status_path, spec_path, log_path = trace_dir / STATUS_FILE, trace_dir / SPEC_FILE, trace_dir / LOG_FILE
    spec = {
        "protocol": protocol,
        "scenario": scenario.to_json(),
        "model": str(MODEL_DIRECTORIES[protocol]),
        "version": release.version,
        "status": str(status_path),
    }
    write_atomically(spec_path, lambda file: file.write(json.dumps(spec, indent=1) + "\n"))
    environment = settings.environment(child_environment())
    environment[record.TRACE_DIRECTORY_ENVIRONMENT] = str(trace_dir.resolve())
    environment[PROTOCOL_ENVIRONMENT] = protocol
    environment[PARAMETERS_ENVIRONMENT] = json.dumps(scenario.model_parameters() if parameters is None else parameters)
    if python_path is not None:
        environment["PYTHONPATH"] = os.pathsep.join([str(python_path), *filter(None, [environment.get("PYTHONPATH")])])
    started = time.monotonic()
    with open(log_path, "xb") as log:  # a new file in the claimed folder: a link planted there is refused
        process = subprocess.Popen(
            python_command("lockstep.real_vllm.driver", str(spec_path)),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )
        group = process.pid
        guardian().protect(group=group)
        try:
            exit_status = _wait(process, started + timeout)
        finally:
            _kill_group(process)  # what vLLM left running (a hung engine, an orphaned coordinator)
            guardian().release(group=group)
    seconds = time.monotonic() - started
    status = _read_status(status_path)
    phase = str(status.get("phase", "starting the driver"))
    if exit_status is None:
        return Run(
            TIMEOUT, None, seconds, phase, f"no end within {timeout:.0f} s (stopped while {phase})", log=str(log_path)
        )
    if exit_status < 0:
        name = signal.Signals(-exit_status).name if -exit_status in signal.valid_signals() else str(-exit_status)
        return Run(
            CRASHED, exit_status, seconds, phase, f"the driver was killed by {name} while {phase}", log=str(log_path)
        )
    outcome = str(status.get("outcome") or (COMPLETED if exit_status == 0 else FAILED))
    message = str(status.get("error", "")) or ("" if exit_status == 0 else f"the driver exited with {exit_status}")
    return Run(outcome, exit_status, seconds, phase, message, status.get("timeline"), str(log_path))


def _wait(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    """The driver's exit status, or None when ``deadline`` (monotonic) passed first."""
    while True:
        status = process.poll()
        if status is not None:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_SECONDS)


def judge(result: CheckResult) -> None:
    """Replay ``result``'s recording against its variant with the goal observer; fill in the replay, goals
    and failures (``verdict`` is set by ``decide``)."""
    from lockstep.checkers.conformance.goals import RuntimeGoals, model_goals
    from lockstep.checkers.conformance.judgement import replay_traces
    from lockstep.spec.protocol import UsageError
    from lockstep.traces.reader import TraceInputError

    result.recorder_failures = [dict(failure) for failure in record.read_failures(result.trace_dir)]
    if not any(result.trace_dir.glob("*.jsonl")):
        result.replay_error = "the run recorded nothing (no trace file)"
        return
    observer = RuntimeGoals()
    try:
        verdict = replay_traces(
            result.trace_dir,
            protocol=result.protocol if result.model is None else result.model,
            variant=result.variant,
            profile=recorder_profile(result.protocol, result.scenario),
            expected_actors=expected_actors(result.protocol),
            observe=observer.observe,
        )
    except (TraceInputError, UsageError, OSError) as error:
        result.replay_error = str(error)
        return
    result.replay = verdict.to_json()
    catalogue = model_goals(verdict.instance.machine())
    result.goals = [{"kind": goal.kind, "label": goal.label, "reached": observer.reaches(goal)} for goal in catalogue]
    listed = {goal.label for goal in catalogue}
    result.goals += [  # the bounded-response monitors' levels the run reached (not in the catalogue)
        {"kind": "monitor", "label": label, "reached": True} for label in sorted(observer.reached - listed)
    ]


def decide(result: CheckResult) -> None:
    """The verdict and its reason from the run, the replay and the recorder failures (see the module doc)."""
    run, replay = result.run, result.replay or {}
    replayed = replay.get("verdict")
    if run.outcome == REFUSED:
        result.verdict, result.reason = "refused", run.message
    elif result.recorder_failures:  # the actors' files stop at different points: no verdict on the whole
        failure = result.recorder_failures[0]
        result.verdict = "inconclusive"
        result.reason = (
            f"the recorder of {failure.get('actor', '?')} stopped: {failure.get('error', '?')} "
            f"(the replay of what was recorded: {replayed or result.replay_error})"
        )
    elif replayed in ("diverges", "violated"):
        result.verdict = str(replayed)
        result.reason = str(
            (replay.get("explanation") or {}).get("reason") or replay.get("property") or "the recording left the model"
        )
    elif run.outcome == CRASHED:
        result.verdict, result.reason = "crashed", run.message
    elif run.outcome != COMPLETED:
        result.verdict, result.reason = "inconclusive", f"the real run {run.outcome}: {run.message}"
    elif result.replay_error is not None:
        result.verdict, result.reason = "inconclusive", result.replay_error
    elif replayed == "conforms":
        result.verdict, result.reason = "conforms", ""
    else:
        result.verdict = "inconclusive"
        result.reason = str((replay.get("explanation") or {}).get("detail") or "the replay was inconclusive")


def run_check(
    protocol: str,
    release: Release,
    scenario: Any,
    trace_dir: Path,
    *,
    variant: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    python_path: Path | None = None,
    model: Any = None,
) -> CheckResult:
    """Run ``scenario`` on the installed vLLM (``release``; ``python_path``: a ``source_overlay`` over it),
    recording into ``trace_dir`` (an empty folder this process holds), and judge the recording against
    ``variant`` (default: the release's) of ``model`` (a Protocol named ``protocol``; default: the built-in one)."""
    check_protocol(protocol)
    run = run_driver(release, scenario, trace_dir, timeout, protocol=protocol, python_path=python_path)
    result = CheckResult(protocol, release, variant or release_variant(protocol, release), scenario, trace_dir, run)
    result.model = model
    if run.outcome != REFUSED:
        judge(result)
    decide(result)
    return result


__all__ = [
    "DEFAULT_TIMEOUT",
    "MODEL_DIRECTORY",
    "PROTOCOLS",
    "CheckResult",
    "Run",
    "UnknownProtocol",
    "check_protocol",
    "decide",
    "expected_actors",
    "judge",
    "recorder_profile",
    "release_variant",
    "run_check",
    "run_driver",
]
