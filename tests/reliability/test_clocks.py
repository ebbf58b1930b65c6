"""One clock per command, and honest outcomes for killed processes and bad settings (issue 38).

Every case drives the real ``lockstep`` console script as a subprocess (the runtime's ranks are
real torch.distributed gloo processes on the CPU):

- ``--timeout`` is the command's one clock: a model whose ``build()`` never returns, and
  test-runtime's goal search, stop with "stopped: timeout" and exit 3;
- a rank killed by SIGKILL (as the OOM killer does; here by the dp-pause runtime's own
  instrumentation hook, ``LOCKSTEP_INSTRUMENT``, in rank 1 at the start of every run) is exit 4
  in run, fuzz --impl, test-runtime and reproduce, never a protocol verdict;
- a ``--set`` value the model does not take is refused before any process starts;
- ``-`` with standard input closed is a usage error;
- a trace folder another run writes is refused, naming the folder and the holder's pid;
- commands killed with SIGKILL (or SIGTERM) leave no temporary directory once their guardian
  notices;
- ``--max-memory`` holds for bfs-vec: the process's peak resident size stays under the limit;
- an I/O error names its file.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.peak_memory import measured

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
LOCKSTEP = Path(sys.executable).parent / "lockstep"  # the console script
COUNTEREXAMPLE = ROOT / "tests" / "fixtures" / "traces" / "dp-pause-pre-fix-seed.jsonl"
MODEL_DOC = ROOT / "docs" / "adding-a-protocol.md"
CEILING = 120.0  # seconds: the most any condition below may take on a loaded machine
KILL_RANK_ONE = '''
import os
import signal


def kill_rank_one(role):
    """The dp-pause engine of rank 1 dies by SIGKILL, as one killed by the OOM killer."""
    if role == "engine" and os.environ.get("RANK") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
'''


def wait_for(condition: Callable[[], bool], what: str, seconds: float = CEILING) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


def lockstep(
    *arguments: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = CEILING
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOCKSTEP), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def endless_build_model(tmp_path: Path) -> Path:
    """The tutorial's model file with a ``build()`` that never returns."""
    source = re.findall(r"```python\n(.*?)```", MODEL_DOC.read_text(), re.S)[0]
    signature = "def build(variant: str, parameters: Mapping[str, int]) -> Machine:\n"
    assert signature in source
    path = tmp_path / "endless_build.py"
    path.write_text(source.replace(signature, signature + "    while True:\n        pass\n", 1))
    return path


# ------------------------------------------------------------------------------------- the clock
def test_timeout_covers_a_models_build(tmp_path: Path) -> None:
    model = endless_build_model(tmp_path)
    completed = lockstep("check", "--model-file", str(model), "--timeout", "2", "--json", timeout=60)
    payload = json.loads(completed.stdout)
    assert completed.returncode == 3 and payload["exit_code"] == 3 and payload["kind"] == "inconclusive", completed
    assert "stopped: timeout" in payload["error"] and "building the model" in payload["error"]
    assert "Traceback" not in completed.stderr


def test_timeout_covers_test_runtimes_goal_search(tmp_path: Path) -> None:
    """dp-pause post-fix's goal search alone takes tens of seconds: the clock stops it."""
    completed = lockstep(
        "test-runtime", "dp-pause", "--timeout", "2", "--trace-dir", str(tmp_path / "runs"), "--json", timeout=60
    )
    payload = json.loads(completed.stdout)
    assert completed.returncode == 3 and payload["exit_code"] == 3, completed.stderr
    assert payload["stopped"] == "timeout" and payload["model"]["complete"] is False and payload["runs"] == []


# --------------------------------------------------------------------------- a killed process
def killing_environment(tmp_path: Path) -> dict[str, str]:
    """The environment in which rank 1 of every dp-pause run is killed by SIGKILL."""
    (tmp_path / "killing.py").write_text(KILL_RANK_ONE)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, LOCKSTEP_INSTRUMENT="killing:kill_rank_one")


@pytest.mark.parametrize(
    ("command", "outcome"),
    [
        (["run", "dp-pause"], ("outcome", "process crashed")),
        (["fuzz", "dp-pause", "--impl", "--examples", "2", "--seed", "1"], ("outcome", "crashed")),
        (["test-runtime", "dp-pause", "--variant", "pre-fix", "--instance", "seed"], ("verdict", "crashed")),
        (["reproduce", str(COUNTEREXAMPLE)], ("verdict", "crashed")),
    ],
    ids=["run", "fuzz-impl", "test-runtime", "reproduce"],
)
def test_a_killed_rank_is_exit_4_never_a_verdict(tmp_path: Path, command: list[str], outcome: tuple[str, str]) -> None:
    traces = [] if command[0] in ("fuzz", "run") else ["--trace-dir", str(tmp_path / "traces")]
    completed = lockstep(
        *command, "--hang-timeout", "60", *traces, "--json", env=killing_environment(tmp_path), cwd=tmp_path
    )
    payload = json.loads(completed.stdout)
    key, value = outcome
    assert completed.returncode == 4 and payload["exit_code"] == 4, (completed.returncode, completed.stderr)
    assert payload[key] == value, payload
    assert "rank 1 was killed by SIGKILL" in completed.stdout  # the run's message, in the JSON


# ------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize("command", [["run", "pp-broadcast"], ["fuzz", "pp-broadcast", "--impl"]], ids=["run", "fuzz"])
def test_a_setting_the_model_does_not_take_is_refused_before_any_process(tmp_path: Path, command: list[str]) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    completed = lockstep(*command, "--set", "decodes=32", env=dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs)))
    assert completed.returncode == 2, completed.stderr
    message = " ".join(completed.stderr.split())
    assert "--set decodes=32" in message and "0..3" in message and "Traceback" not in message, message
    assert not any(runs.iterdir())  # no run directory: no process was started


def test_closed_stdin_is_a_usage_error() -> None:
    completed = subprocess.run(
        ["sh", "-c", f"exec '{LOCKSTEP}' replay - <&-"], capture_output=True, text=True, timeout=CEILING
    )
    assert completed.returncode == 2, completed.stderr
    assert "standard input is closed" in completed.stderr and "Traceback" not in completed.stderr


# ---------------------------------------------------------------------------------- trace folder
def test_a_second_run_into_a_held_trace_folder_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    runs, folder = tmp_path / "runs", tmp_path / "traces"
    runs.mkdir()
    environment = dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs))
    first = subprocess.Popen(  # pre-fix issue-36594 hangs: it holds the folder until it is killed
        [str(LOCKSTEP), "run", "dp-pause", "--variant", "pre-fix", "--hang-timeout", "120", "--trace-dir", str(folder)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: first.poll() is not None or any(folder.glob("*.jsonl")), "the first run writes its traces")
        assert first.poll() is None, "the first run ended before the second started"
        second = lockstep("run", "dp-pause", "--trace-dir", str(folder), env=environment)
        message = " ".join(second.stderr.split())
        assert second.returncode == 2 and str(folder) in message and f"pid {first.pid}" in message, message
        assert first.poll() is None  # the holder runs on, its traces unmixed
    finally:
        first.kill()
        first.wait()


# ----------------------------------------------------------------------------- temporary folders
def leftovers(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if entry.name.startswith("lockstep-"))


def busy(temporary: Path, pattern: str) -> bool:
    """Whether the command is at work: something matching ``pattern`` is under ``temporary``."""
    return any(True for _ in temporary.glob(pattern))


FUZZ_IMPL = ["fuzz", "dp-pause", "--impl", "--variant", "pre-fix", "--hang-timeout", "120"]


@pytest.mark.parametrize(
    ("command", "number", "pattern"),
    [
        (FUZZ_IMPL, signal.SIGKILL, "lockstep-fuzz-runtime-*/example-*/trace/rank-1.jsonl"),
        (FUZZ_IMPL, signal.SIGTERM, "lockstep-fuzz-runtime-*/example-*/trace/rank-1.jsonl"),
        (["fuzz", "dp-pause", "--instance", "large", "--examples", "100000"], signal.SIGKILL, "lockstep-hypothesis-*"),
        (["check", "dp-pause", "--engine", "pdr", "--solver-timeout", "120"], signal.SIGKILL, "lockstep-abc-*/*.aig"),
    ],
    ids=["fuzz-impl-SIGKILL", "fuzz-impl-SIGTERM", "fuzz-SIGKILL", "pdr-SIGKILL"],
)
def test_a_killed_command_leaves_no_temporary_folder(
    tmp_path: Path, command: list[str], number: int, pattern: str
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen(
        [str(LOCKSTEP), *command],
        env=dict(os.environ, TMPDIR=str(temporary)),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: process.poll() is not None or busy(temporary, pattern), f"{pattern} appears")
        assert process.poll() is None, "the command ended before it was killed"
        process.send_signal(number)
        process.wait(timeout=CEILING)
    finally:
        if process.poll() is None:
            process.kill()
    wait_for(lambda: not leftovers(temporary), f"no lockstep-* folder left in {temporary}")


# ------------------------------------------------------------------------------------- memory
def test_a_launcher_measures_its_child_not_its_own_parent() -> None:
    """``measured``: a child of this (large) pytest process that allocates nothing reads its own
    small peak, not this process's."""
    _, peak, _, _ = measured([sys.executable, "-c", "pass"], timeout=CEILING)
    assert peak < 64 * 1024**2, f"{peak / 2**20:.0f} MiB for an empty interpreter"


def test_max_memory_holds_for_bfs_vec(tmp_path: Path) -> None:
    """dp-pause large takes gigabytes; the search stops before its resident size passes 0.4 GiB."""
    limit = 0.4
    command = [str(LOCKSTEP), "check", "dp-pause", "--instance", "large", "--engine", "bfs-vec"]
    code, peak, output, _ = measured([*command, "--max-memory", str(limit), "--json"], timeout=CEILING)
    payload = json.loads(output)
    assert code == 3 and payload["stopped"] == "max-memory", payload
    assert peak < limit * 1024**3, f"peak resident {peak / 2**20:.0f} MiB above --max-memory {limit} GiB"
    # the forecast clears the kernel's high-water mark before each chunk (so ru_maxrss may miss a
    # peak before a clear); the peak lockstep kept across the clears is under the limit too
    kept = payload["stats"]["peak_memory_bytes"]
    assert 0 < kept < limit * 1024**3, f"peak kept across clears {kept / 2**20:.0f} MiB above --max-memory {limit} GiB"


# ------------------------------------------------------------------------------------ I/O errors
def test_a_full_stdout_is_named() -> None:
    """``--json`` into ``/dev/full`` (ENOSPC): one message naming stdout, no traceback."""
    with open("/dev/full", "w") as full:
        completed = subprocess.run(
            [str(LOCKSTEP), "check", "computed-tokens", "--json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=CEILING,
        )
    assert completed.returncode == 2, completed.stderr
    assert "<stdout>: No space left on device" in completed.stderr and "Traceback" not in completed.stderr


def small_files() -> None:
    """In the child: files may grow to 2 KiB (larger writes fail with EFBIG; Python ignores SIGXFSZ)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def test_a_trace_write_the_system_refuses_names_the_trace_file(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    completed = subprocess.run(
        [str(LOCKSTEP), "run", "dp-pause", "--hang-timeout", "30", "--trace-dir", str(folder), "--json"],
        capture_output=True,
        text=True,
        timeout=CEILING,
        preexec_fn=small_files,
    )
    payload = json.loads(completed.stdout)
    assert completed.returncode == 3 and payload["outcome"] == "runtime error", completed.stderr
    assert re.search(rf"File too large: '{re.escape(str(folder))}/rank-\d\.jsonl'", payload["message"]), payload
