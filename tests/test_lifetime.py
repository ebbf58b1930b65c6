"""The runtime's processes end with their parent and leave nothing behind (``lockstep.lifetime``).

``lockstep run`` and ``lockstep fuzz --impl`` are started as real subprocesses and killed with
SIGKILL (or SIGTERM) once their ranks are up; within a generous deadline no process they started
may remain, no listening socket those processes held may remain, and the run directories are
gone. While a run is up every listening socket of its processes is on the loopback interface.
Ctrl-C (SIGINT) stops ``run`` with a message and exit 3. Rank processes started from a directory
holding a ``lockstep`` package import the installed one.
A helper process that dies is a crashed run (exit 4), not a hang.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lockstep.impl.runtime import read_statuses

ROOT = Path(__file__).resolve().parent.parent
LOCKSTEP = Path(sys.executable).parent / "lockstep"  # the console script: its sys.path has no cwd
DEADLINE = 30.0
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return None


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (by parent links in /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= children
        frontier = children
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _address(hexadecimal: str) -> str:
    host, _ = hexadecimal.split(":")
    if len(host) == 8:
        return ".".join(str(int(host[index : index + 2], 16)) for index in (6, 4, 2, 0))
    words = [host[index : index + 8] for index in range(0, 32, 8)]
    raw = b"".join(bytes.fromhex(word)[::-1] for word in words)
    import ipaddress

    return str(ipaddress.IPv6Address(raw))


def listening(inodes: set[str]) -> dict[str, str]:
    """The listening TCP sockets among ``inodes``: inode -> local address."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                found[fields[9]] = _address(fields[1])
    return found


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds} s: {what}")


def ranks_up(runs: Path, ranks: int = 2) -> bool:
    """Every rank of a run under ``runs`` (a run directory or a pool's) reports a status."""
    for status in runs.rglob("status"):
        statuses = read_statuses(status.parent)
        if all(f"rank:{rank}" in statuses for rank in range(ranks)):
            return True
    return False


def kill_and_check(process: subprocess.Popen[bytes], runs: Path, number: int) -> None:
    """Kill ``process`` with signal ``number`` once its ranks are up; everything it started must go."""
    wait_for(lambda: process.poll() is not None or ranks_up(runs), 120, "the ranks are up")
    assert process.poll() is None, "the command ended before its ranks were up"
    time.sleep(0.5)  # the helpers (coordinator, client) start after the ranks
    children = descendants(process.pid)
    inodes = set().union(*(_socket_inodes(pid) for pid in children))
    sockets = listening(inodes)
    assert len(children) >= 2 and sockets, (children, sockets)  # the ranks (and more), their listeners
    process.send_signal(number)
    process.wait(timeout=60)
    wait_for(
        lambda: all(_state(pid) in (None, "Z") for pid in children), DEADLINE, f"the processes {sorted(children)} end"
    )
    wait_for(lambda: not listening(inodes), DEADLINE, "their listening sockets close")
    wait_for(lambda: not any(runs.iterdir()), DEADLINE, f"the run directories under {runs} are removed")
    assert all(address in LOOPBACK for address in sockets.values()), sockets  # nothing listened beyond loopback


@pytest.mark.parametrize(
    "number", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"]
)
def test_run_killed_leaves_no_process_port_or_directory(tmp_path: Path, number: int) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    process = subprocess.Popen(
        [str(LOCKSTEP), "run", "dp-pause", "--variant", "pre-fix", "--hang-timeout", "120"],
        cwd=tmp_path,
        env=dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        kill_and_check(process, runs, number)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stderr is not None
    err = process.stderr.read().decode()
    process.stderr.close()
    if number == signal.SIGTERM:  # stopped by its handler: a message and 128 + 15, no traceback
        assert process.returncode == 143 and "terminated" in err and "Traceback" not in err, (process.returncode, err)
    if number == signal.SIGINT:  # Ctrl-C: a message and exit 3 (inconclusive), as check and fuzz
        assert process.returncode == 3 and "interrupted" in err and "Traceback" not in err, (process.returncode, err)


def test_fuzz_impl_killed_leaves_no_pooled_rank(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    process = subprocess.Popen(
        [
            str(LOCKSTEP),
            "fuzz",
            "dp-pause",
            "--impl",
            "--variant",
            "pre-fix",
            "--hang-timeout",
            "120",
            "--examples",
            "3",
            "--seed",
            "1",
        ],
        cwd=tmp_path,
        env=dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        kill_and_check(process, runs, signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()


def test_ranks_do_not_import_from_the_current_directory(tmp_path: Path) -> None:
    marker = tmp_path / "imported-from-cwd"
    planted = tmp_path / "lockstep"
    planted.mkdir()
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('x')\n")
    completed = subprocess.run(
        [str(LOCKSTEP), "run", "dp-pause", "--hang-timeout", "10", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert not marker.exists(), "a process of the run imported ./lockstep"
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["outcome"] == "completed"


def test_a_killed_client_is_a_crash_not_a_hang(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    process = subprocess.Popen(
        [str(LOCKSTEP), "run", "dp-pause", "--variant", "pre-fix", "--hang-timeout", "120", "--json"],
        cwd=tmp_path,
        env=dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def client() -> dict[str, object] | None:
            for status in runs.rglob("status"):
                found = read_statuses(status.parent).get("client")
                if found is not None and found["state"] == "receive":
                    return found
            return None

        wait_for(lambda: process.poll() is not None or client() is not None, 120, "the client waits for replies")
        status = client()
        assert status is not None
        os.kill(int(str(status["pid"])), signal.SIGKILL)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    payload = json.loads(out)
    assert process.returncode == 4, err
    assert payload["outcome"] == "process crashed" and payload["exit_code"] == 4
    assert "client" in payload["message"] and "died" in payload["message"] and "client" not in payload["waits"]
    assert "process crashed" in err and "Traceback" not in err


def test_the_next_run_removes_directories_whose_owner_is_gone(tmp_path: Path) -> None:
    """What a guardian killed together with its parent (``kill -9`` of a whole session) left behind."""
    runs = tmp_path / "runs"
    runs.mkdir()
    finished = subprocess.Popen(["true"])
    finished.wait()
    started = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    owners = {
        "lockstep-run-abandoned": f"{finished.pid} 12345",
        "lockstep-pool-abandoned": f"{finished.pid} 1",
        "lockstep-run-alive": f"{os.getpid()} {started}",
    }
    for name, owner in owners.items():
        (runs / name / "status").mkdir(parents=True)
        (runs / name / ".lockstep-owner").write_text(owner)
    (runs / "lockstep-run-unowned").mkdir()
    completed = subprocess.run(
        [str(LOCKSTEP), "run", "dp-pause", "--hang-timeout", "10"],
        cwd=tmp_path,
        env=dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs)),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr
    assert sorted(path.name for path in runs.iterdir()) == ["lockstep-run-alive", "lockstep-run-unowned"]
