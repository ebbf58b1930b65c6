"""Tests for lockstep.checkers.vector.distributed: the search partitioned across gloo processes
gives exactly the one-process counts, verdicts and counterexample lengths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_vector import summary

from lockstep.checkers import check
from lockstep.cli import main
from lockstep.models import get_protocol


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize(
    ("protocol", "variant", "name"),
    [("dp-pause", "pre-fix", "seed"), ("async-placeholders", "post-fix", "all-operations")],
)
def test_partitioned_search_equals_one_process(protocol: str, variant: str, name: str, workers: int) -> None:
    instance = get_protocol(protocol).instance(variant, name)
    assert summary(check(instance, "bfs-vec", workers=workers)) == summary(check(instance, "bfs-vec"))


def test_partitioned_search_with_symmetry_the_torch_kernels_and_stop_at_first() -> None:
    instance = get_protocol("dp-pause").instance("pre-fix", overrides={"ranks": 3, "requests": 0})
    alone = check(instance, "bfs-vec", symmetry=True)
    assert summary(check(instance, "bfs-gpu", device="cpu", symmetry=True, workers=2)) == summary(alone)
    seed = get_protocol("dp-pause").instance("pre-fix", "seed")
    first = check(seed, "bfs-vec", stop_at_first=True, workers=2)
    full = check(seed, "bfs-vec")
    shortest = min(item.path.length for item in full.properties if item.verdict.value == "violated" and item.path)
    violated = [item for item in first.properties if item.verdict.value == "violated"]
    assert first.stopped == "first-violation" and violated
    assert all(item.path is not None and item.path.length == shortest for item in violated)


def test_the_cli_runs_a_partitioned_check(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "dp-pause", "--variant", "pre-fix", "--workers", "2", "--json", "--trace-out", "/dev/null"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 1 and payload["engine"] == "bfs-vec" and payload["stats"]["states"] == 33732


def test_torchrun_processes_join_one_partitioned_check(tmp_path: Path) -> None:
    """Under torchrun every process joins the job's group; rank 0 prints the one JSON object."""
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [
        str(torchrun),
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "lockstep",
        "check",
        "dp-pause",
        "--workers",
        "2",
        "--json",
    ]
    finished = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert finished.returncode == 0, finished.stderr[-2000:]
    objects = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert len(objects) == 1 and objects[0]["verdict"] == "holds" and objects[0]["stats"]["states"] == 48918
