"""``lockstep check --workers N`` (issue 38, "Trust"): its processes listen on the loopback interface
only, and Ctrl-C, SIGTERM and a lost worker end it with an honest exit code, no traceback and no
process left behind.

Each test starts the real command (``check dp-pause --workers 2 --ranks 4``, the default engine, gloo
on the CPU: millions of states, so it is still searching when the test acts) in a session of its
own, waits for a condition (a worker process exists, or every rank listens), acts on it
with a real signal, and reads the exit code, stdout, stderr and /proc.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CEILING_SECONDS = 120.0  # the longest a condition may take on a loaded machine
COMMAND = ["check", "dp-pause", "--workers", "2", "--ranks", "4"]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes and sockets in /proc")


@dataclass
class Check:
    """A running ``lockstep check --workers 2``, its output going to files."""

    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def finish(self) -> tuple[int, str, str]:
        code = self.process.wait(timeout=CEILING_SECONDS)
        return code, self.stdout.read_text(encoding="utf-8"), self.stderr.read_text(encoding="utf-8")


def start(folder: Path, *extra: str) -> Check:
    stdout, stderr = folder / "stdout.txt", folder / "stderr.txt"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockstep", *COMMAND, *extra],
            stdout=out,
            stderr=err,
            cwd=folder,
            start_new_session=True,  # its own process group, as a terminal's foreground job has
        )
    return Check(process, stdout, stderr)


Starter = Callable[..., Check]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Starter]:
    """Start checks; whatever a test leaves running is killed with its whole process group."""
    started: list[Check] = []

    def begin(*extra: str) -> Check:
        started.append(start(tmp_path, *extra))
        return started[-1]

    yield begin
    for check in started:
        try:
            os.killpg(check.process.pid, signal.SIGKILL)  # the group outlives its leader if a worker does
        except ProcessLookupError:
            pass
        check.process.wait()


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name: state, parent, group, session..."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def processes() -> dict[int, list[str]]:
    """Every process's stat fields (``_stat``), by id."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = fields
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (children, their children...)."""
    parents = {pid: int(fields[1]) for pid, fields in processes().items()}
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def workers(root: int) -> list[int]:
    """The search processes ``root`` started (multiprocessing's spawned children, not its resource tracker)."""
    found = []
    for pid in descendants(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command and alive(pid):
            found.append(pid)
    return sorted(found)


def wait_for(check: Check, condition: Callable[[], Any], what: str) -> Any:
    """``condition()``'s first true value, while the check runs (a generous ceiling, never a fixed sleep)."""
    deadline = time.monotonic() + CEILING_SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if check.process.poll() is not None:
            pytest.fail(f"the check ended ({check.process.returncode}) before {what}: {check.stderr.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"no {what} within {CEILING_SECONDS:.0f} s")


def listening(pids: list[int]) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) of the TCP sockets ``pids`` listen on."""
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        inodes |= {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    addresses = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text(encoding="utf-8").splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addresses.append(fields[1].rsplit(":", 1)[0])
    return addresses


def searching(check: Check) -> list[int]:
    """Once every rank has joined the process group (the rendezvous store and each rank's gloo
    listener are listening: 3 sockets), the addresses they listen on."""

    def listeners() -> list[str] | None:
        found = listening([check.process.pid, *descendants(check.process.pid)])
        return found if len(found) >= 3 else None

    return list(wait_for(check, listeners, "the store's and gloo's listening sockets"))


def assert_nothing_left(check: Check) -> None:
    """No process of the check's session remains (workers, their children, multiprocessing's tracker)."""
    session = str(check.process.pid)

    def members() -> list[int]:
        return [pid for pid, fields in processes().items() if fields[3] == session and fields[0] not in ("Z", "X")]

    deadline = time.monotonic() + CEILING_SECONDS
    while members() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not members(), "processes left behind"


def loopback(address: str) -> bool:
    """127.0.0.0/8, ::1 or ::ffff:127.x.y.z, from /proc/net/tcp's hex (little-endian words)."""
    if len(address) == 8:
        return address.endswith("7F")
    words = [address[index : index + 8] for index in range(0, 32, 8)]
    if words == ["00000000", "00000000", "00000000", "01000000"]:
        return True
    return words[:3] == ["00000000", "00000000", "FFFF0000"] and words[3].endswith("7F")


def test_the_processes_listen_on_the_loopback_interface_only(running: Starter) -> None:
    check = running()
    addresses = searching(check)
    assert all(loopback(address) for address in addresses), addresses


def interrupted_result(code: int, out: str, err: str) -> None:
    assert code == 3, err
    payload = json.loads(out)
    assert payload["stopped"] == "interrupted" and payload["verdict"] == "inconclusive", payload
    assert payload["stats"]["states"] > 0
    assert "Traceback" not in err, err


def test_ctrl_c_in_a_terminal_while_the_workers_start_gives_the_partial_result(running: Starter) -> None:
    """A terminal's Ctrl-C reaches the whole process group: the parent and every worker, here as
    soon as the first worker exists (it may still be starting)."""
    check = running("--json")
    wait_for(check, lambda: workers(check.process.pid), "a worker")
    os.killpg(check.process.pid, signal.SIGINT)
    interrupted_result(*check.finish())
    assert_nothing_left(check)


def test_ctrl_c_to_the_parent_alone_gives_the_partial_result(running: Starter) -> None:
    check = running("--json")
    searching(check)
    check.process.send_signal(signal.SIGINT)
    interrupted_result(*check.finish())
    assert_nothing_left(check)


def test_a_second_ctrl_c_stops_at_once_with_a_partial_result(running: Starter) -> None:
    """The first Ctrl-C stops the search at the end of its level; with a worker that cannot finish
    it (stopped with SIGSTOP), another Ctrl-C ends the check anyway, and the stopped worker too."""
    check = running("--json")
    searching(check)
    stopped = workers(check.process.pid)[-1]
    os.kill(stopped, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + CEILING_SECONDS
        while check.process.poll() is None and time.monotonic() < deadline:  # Ctrl-C until it gives up
            check.process.send_signal(signal.SIGINT)
            time.sleep(0.5)
        code, out, err = check.finish()
    finally:
        if alive(stopped):
            os.kill(stopped, signal.SIGCONT)
    assert code == 3 and "Traceback" not in err, err
    payload = json.loads(out)
    assert payload["stopped"] == "interrupted" and payload["verdict"] == "inconclusive", payload
    assert_nothing_left(check)


def test_sigterm_ends_the_check_with_143(running: Starter) -> None:
    check = running()
    searching(check)
    check.process.send_signal(signal.SIGTERM)
    code, _, err = check.finish()
    assert code == 143 and "terminated (SIGTERM)" in err, err
    assert "Traceback" not in err, err
    assert_nothing_left(check)


def test_a_lost_worker_ends_the_check_with_4_naming_it(running: Starter) -> None:
    check = running("--json")
    searching(check)
    lost = workers(check.process.pid)[-1]
    os.kill(lost, signal.SIGKILL)
    code, out, err = check.finish()
    assert code == 4, err
    assert f"(pid {lost}) was killed by SIGKILL" in err and "Traceback" not in err, err
    payload = json.loads(out)
    assert payload["kind"] == "crashed" and payload["exit_code"] == 4 and "worker" in payload["error"], payload
    assert_nothing_left(check)
