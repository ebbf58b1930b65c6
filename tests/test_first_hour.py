"""A first hour that goes as the README says: check --all reports each check as it finishes and a
heartbeat while one runs, Ctrl-C keeps what finished, engines' traces never overwrite each other,
and ``list`` takes a protocol."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from lockstep.cli import check as check_command

LOCKSTEP = Path(sys.executable).parent / "lockstep"


def test_check_all_prints_a_line_per_check_as_it_finishes(tmp_path: Path) -> None:
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "--all", "async-placeholders"], capture_output=True, text=True, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stderr
    lines = [line for line in completed.stderr.splitlines() if " of " in line and ": async-placeholders " in line]
    assert lines and lines[0].startswith("1 of ") and all("as pinned" in line for line in lines)
    total = int(lines[0].split(" of ")[1].split(":")[0])
    assert len(lines) == total


def test_the_heartbeat_says_what_runs_on_any_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_command, "PROGRESS_SECONDS", 0.05)
    stream = io.StringIO()
    console = Console(file=stream, width=200)
    with check_command._Heartbeat(console) as heartbeat:
        heartbeat.now("checking something long (3 of 9)")
        deadline = time.monotonic() + 60
        while "checking something long (3 of 9):" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "… checking something long (3 of 9):" in stream.getvalue()


def test_ctrl_c_on_check_all_shows_what_finished(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [str(LOCKSTEP), "check", "--all", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # the first check's line: then interrupt the second
        seen.append(line)
        if line.startswith("1 of "):
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    err = "".join(seen) + err
    assert process.returncode == 3, err
    assert "lockstep: interrupted (Ctrl-C) after" in err and "Traceback" not in err
    payload = json.loads(out)
    assert payload["stopped"] == "interrupted" and payload["as_pinned"] is False and len(payload["checks"]) >= 1


def test_traces_of_different_engines_do_not_overwrite_each_other(tmp_path: Path) -> None:
    base = [str(LOCKSTEP), "check", "pp-broadcast", "--variant", "pre-fix"]
    subprocess.run(base, capture_output=True, cwd=tmp_path, check=False)
    subprocess.run([*base, "--engine", "bmc", "--depth", "12"], capture_output=True, cwd=tmp_path, check=False)
    names = sorted(path.name for path in (tmp_path / "lockstep-out").iterdir())
    assert names == ["pp-broadcast-pre-fix-seed-bmc.jsonl", "pp-broadcast-pre-fix-seed.jsonl"]


def test_list_takes_a_protocol(tmp_path: Path) -> None:
    completed = subprocess.run([str(LOCKSTEP), "list", "dp-pause", "--json"], capture_output=True, text=True)
    assert completed.returncode == 0 and [p["name"] for p in json.loads(completed.stdout)["protocols"]] == ["dp-pause"]
    unknown = subprocess.run([str(LOCKSTEP), "list", "nope"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown protocol 'nope'" in unknown.stderr


def test_progress_says_distinct_and_generated_states_frontier_and_memory(tmp_path: Path) -> None:
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "dp-pause", "--ranks", "3", "--engine", "bfs", "--max-states", "60000"]
        + ["--progress-interval", "0.2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert completed.returncode == 3, completed.stderr  # stopped at --max-states
    lines = [line for line in completed.stderr.splitlines() if line.startswith("checking dp-pause")]
    assert lines, completed.stderr
    assert all(" distinct states of " in line and ", frontier " in line and " MiB" in line for line in lines)
