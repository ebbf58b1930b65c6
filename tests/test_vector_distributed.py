"""Tests for lockstep.checkers.vector.distributed: the search partitioned across gloo processes
gives exactly the one-process counts, verdicts and counterexample lengths."""

from __future__ import annotations

import json

import pytest
from test_vector import summary

from lockstep.checkers import check
from lockstep.cli import main
from lockstep.models import get_protocol


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize(("protocol", "variant", "name"), [("dp-pause", "pre-fix", "seed"), ("async-placeholders", "post-fix", "all-operations")])
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
