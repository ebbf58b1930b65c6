"""The runtime under torchrun: only ranks are started by torchrun; rank 0 starts the rest.

``torchrun --nproc-per-node 2 -m lockstep.impl.rank PROTOCOL ...`` joins the ranks through
torchrun's environment (env://), rank 0 makes the run directory and starts the protocol's helper
processes; the traces it records follow the model. Pre-fix dp-pause hangs there too, and the
watchdog on rank 0 says what each rank waits in. No run directory is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from lockstep.impl.launcher import free_port
from lockstep.testing import replay_traces

ROOT = Path(__file__).resolve().parent.parent


def torchrun(runs: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """torchrun with the run directory made under ``runs`` (TMPDIR too, where it went before); it
    must be gone soon after the run."""
    runs.mkdir()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        "-m",
        "lockstep.impl.rank",
        *arguments,
    ]
    completed = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ, LOCKSTEP_RUN_ROOT=str(runs), TMPDIR=str(runs)),
    )
    deadline = time.monotonic() + 30
    while (
        any(runs.glob("lockstep-*")) and time.monotonic() < deadline
    ):  # rank 0's guardian removes it once rank 0 ended
        time.sleep(0.05)
    assert not any(runs.glob("lockstep-*")), list(runs.iterdir())
    return completed


def test_post_fix_dp_pause_under_torchrun_completes_and_conforms(tmp_path: Path) -> None:
    completed = torchrun(tmp_path / "runs", "dp-pause", "--hang-timeout", "10", "--trace-dir", str(tmp_path))
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert {path.name for path in tmp_path.glob("*.jsonl")} == {
        "rank-0.jsonl",
        "rank-1.jsonl",
        "client.jsonl",
        "coordinator.jsonl",
    }
    assert replay_traces(tmp_path, profile="runtime")["verdict"] == "conforms"


def test_pre_fix_dp_pause_under_torchrun_hangs_and_says_where(tmp_path: Path) -> None:
    completed = torchrun(
        tmp_path / "runs", "dp-pause", "--variant", "pre-fix", "--hang-timeout", "3", "--trace-dir", str(tmp_path)
    )
    assert completed.returncode != 0
    assert "worker_dp" in completed.stderr and "worker_world" in completed.stderr, completed.stderr[-2000:]
    assert replay_traces(tmp_path, profile="runtime")["verdict"] == "violated"
