"""How the runtime's processes end with the process that started them and leave nothing behind.

Three pieces, used by the launcher, the rank pool and every process they start:

- ``python_command(module, *arguments)``: ``python -P -m module ...``. ``-P`` keeps the current
  directory off ``sys.path``, so a child imports only the installed lockstep (a
  ``./lockstep/__init__.py`` where the user stands is never run), as the parent does.
- ``child_environment(environment)`` (in the parent) and ``die_with_parent()`` (first thing in
  the child): on Linux the child asks the kernel, with ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, to
  be killed when its parent dies, and exits at once if the parent named in the environment is
  already gone (the parent may die between the fork and the ``prctl``). The signal follows the
  parent *thread* that started the child, so start children from a thread that outlives them.
- ``guardian()``: one small process per lockstep process (``python -m lockstep.lifetime``,
  in its own session, so a terminal's Ctrl-C or a ``kill`` of the parent's group spares it)
  that holds the read end of a pipe from its parent. The parent registers the process groups it
  starts and the temporary directories it makes (``protect``) and forgets them when it has
  cleaned up itself (``release``). When the pipe reaches end of file (the parent exited, however
  it died: SIGKILL included) the guardian kills every group still registered, waits for them to
  go, removes every directory still registered (unless ``LOCKSTEP_KEEP_RUN_DIR`` is set) and exits.
- ``temporary_directory(prefix)``: every temporary directory a command makes (a run's, a rank
  pool's, a fuzzing session's, Hypothesis's storage, each ABC prover's), under the run root
  (``LOCKSTEP_RUN_ROOT``, else the temporary directory), registered with the guardian while it
  exists: a command killed with SIGKILL leaves none behind once its guardian notices.
- The next run cleans up after a guardian that was killed too: ``protect`` writes the owner
  (process id and start time) into ``OWNER_FILE`` of each directory, and starting a guardian
  removes the ``lockstep-*`` directories of the run root (``LOCKSTEP_RUN_ROOT``, else the
  temporary directory) whose owner is gone (``remove_abandoned``). A directory with no owner file
  is left alone.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

PARENT_ENVIRONMENT = "LOCKSTEP_PARENT_PID"
KEEP_ENVIRONMENT = "LOCKSTEP_KEEP_RUN_DIR"
PR_SET_PDEATHSIG = 1
GROUP_EXIT_SECONDS = 10.0
OWNER_FILE = ".lockstep-owner"
# every temporary directory a lockstep command makes (``temporary_directory``): what ``remove_abandoned`` may take
PREFIXES = (
    "lockstep-run-",
    "lockstep-pool-",
    "lockstep-fuzz-runtime-",
    "lockstep-hypothesis-",
    "lockstep-abc-",
    "lockstep-vllm-source-",  # vllm check --vllm-source: the user's files over the installed vLLM
)


def python_command(module: str, *arguments: str) -> list[str]:
    """The command line that runs ``module`` with this Python, the current directory off ``sys.path``."""
    return [sys.executable, "-P", "-m", module, *arguments]


def child_environment(environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environment`` (default: this process's) naming this process as the child's parent."""
    result = dict(os.environ if environment is None else environment)
    result[PARENT_ENVIRONMENT] = str(os.getpid())
    return result


def die_with_parent() -> None:
    """Be killed when the parent dies (Linux); exit now if the parent named in the environment is gone."""
    expected = os.environ.get(PARENT_ENVIRONMENT)
    if expected is None or not expected.isdigit():
        return
    if sys.platform.startswith("linux"):
        try:
            library = ctypes.CDLL(None, use_errno=True)
            library.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the guardian still ends the process group
            pass
    if os.getppid() != int(expected):
        os._exit(1)


def _start_time(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (None: no such process, or no /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return None


def owner_of_this_process() -> str:
    return f"{os.getpid()} {_start_time(os.getpid()) or '?'}"


def remove_abandoned(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the ``lockstep-*`` directories under ``root`` whose owner process is gone; their paths."""
    folder = Path(root if root is not None else run_root() or tempfile.gettempdir())
    removed: list[str] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(PREFIXES):
            continue
        try:
            pid_text, _, started = (entry / OWNER_FILE).read_text(encoding="utf-8").strip().partition(" ")
        except OSError:
            continue  # not ours to judge: no owner recorded
        if not pid_text.isdigit() or started == "?":
            continue
        if _start_time(int(pid_text)) != started:  # the owner exited (or its pid now names another process)
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


class Guardian:
    """The parent's end of the pipe to its guardian process (see the module doc)."""

    def __init__(self) -> None:
        remove_abandoned()
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            python_command("lockstep.lifetime"),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert self._process.stdin is not None
        self._pipe: IO[bytes] = self._process.stdin

    def _send(self, line: str) -> None:
        with self._lock:
            try:
                self._pipe.write(line.encode("utf-8") + b"\n")
                self._pipe.flush()
            except (BrokenPipeError, ValueError):  # the guardian is gone: the parent cleans up alone
                pass

    def protect(self, *, directory: str | os.PathLike[str] | None = None, group: int | None = None) -> None:
        """Kill ``group`` / remove ``directory`` if this process dies before ``release``."""
        if directory is not None:
            try:
                (Path(directory) / OWNER_FILE).write_text(owner_of_this_process(), encoding="utf-8")
            except OSError:
                pass
            self._send("+directory " + str(Path(directory).resolve()))
        if group:
            self._send(f"+group {int(group)}")

    def release(self, *, directory: str | os.PathLike[str] | None = None, group: int | None = None) -> None:
        """This process has cleaned ``group`` / ``directory`` up itself."""
        if directory is not None:
            self._send("-directory " + str(Path(directory).resolve()))
        if group:
            self._send(f"-group {int(group)}")


_guardians: dict[int, Guardian] = {}  # by process id: a forked child starts its own


def guardian() -> Guardian:
    """This process's guardian, started on first use."""
    found = _guardians.get(os.getpid())
    if found is None:
        found = _guardians[os.getpid()] = Guardian()
    return found


def run_root() -> str | None:
    """Where the temporary directories go: ``LOCKSTEP_RUN_ROOT``, else None (the system's temporary directory)."""
    return os.environ.get("LOCKSTEP_RUN_ROOT") or None


@contextmanager
def temporary_directory(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A fresh directory (``prefix`` one of ``PREFIXES``) under the run root for the block, removed
    at its end, and by the guardian if this process dies first; ``keep`` (or ``LOCKSTEP_KEEP_RUN_DIR``)
    leaves it in place and unregistered."""
    assert prefix in PREFIXES, prefix  # remove_abandoned must know it
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=run_root()))
    keep = keep or bool(os.environ.get(KEEP_ENVIRONMENT))
    if not keep:
        guardian().protect(directory=folder)
    try:
        yield folder
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
            guardian().release(directory=folder)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_up(groups: set[int], directories: set[str], keep: bool) -> None:
    """Kill ``groups``, wait for them to go, then remove ``directories`` (unless ``keep``)."""
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + GROUP_EXIT_SECONDS
    while time.monotonic() < deadline and any(_group_alive(group) for group in groups):
        time.sleep(0.05)
    if keep:
        return
    for directory in directories:
        for _ in range(3):  # a dying process may still create a file in it
            shutil.rmtree(directory, ignore_errors=True)
            if not os.path.exists(directory):
                break
            time.sleep(0.1)


def guard(pipe: IO[bytes]) -> None:
    """The guardian process: follow the registrations on ``pipe``; at end of file, clean up."""
    groups: set[int] = set()
    directories: set[str] = set()
    for raw in pipe:
        command, _, value = raw.decode("utf-8", errors="replace").rstrip("\n").partition(" ")
        if command == "+group" and value.isdigit():
            groups.add(int(value))
        elif command == "-group" and value.isdigit():
            groups.discard(int(value))
        elif command == "+directory" and value:
            directories.add(value)
        elif command == "-directory":
            directories.discard(value)
    clean_up(groups, directories, keep=bool(os.environ.get(KEEP_ENVIRONMENT)))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    guard(sys.stdin.buffer)
