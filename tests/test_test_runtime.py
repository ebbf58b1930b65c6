"""``lockstep test-runtime``: a real run of a few goal paths (every goal accounted for, the runtime
reaching the goals its paths pass through) and the usage errors it refuses before running anything
(a message naming the problem, exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockstep.cli import main


def test_goal_paths_run_for_real_and_the_runtime_reaches_their_goals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["test-runtime", "async-placeholders", "--hang-timeout", "60", "--trace-dir", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 0 and result["verdict"] == "consistent", captured.err
    goals = result["goals"]
    assert result["summary"]["model_reached"] == sum(goal["model"] for goal in goals) > 0
    for goal in goals:
        assert goal["model"] == (goal["path"] is not None) == (goal["depth"] is not None), goal
    on_paths = [goal for goal in goals if goal["path"] is not None]
    assert all(goal["runtime"] for goal in on_paths), [goal["label"] for goal in on_paths if not goal["runtime"]]
    assert {goal["kind"] for goal in on_paths} >= {"action", "guard", "decision", "witness"}
    for run in result["runs"]:
        assert run["outcome"] == "completed" and run["replay"]["verdict"] == "conforms"
        assert Path(run["file"]).is_file() and any(Path(run["trace_dir"]).glob("*.jsonl"))
    assert "path 1/" in captured.err  # progress on stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["no-such-protocol"], "no-such-protocol"),
        (["dp-pause", "--variant", "no-such-variant"], "no-such-variant"),
        (["dp-pause", "--variant", "ignore-wave-while-paused"], "runtime runs pre-fix, post-fix"),
        (["dp-pause", "--instance", "no-such-instance"], "no-such-instance"),
    ],
)
def test_usage_errors_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, arguments: list[str], message: str
) -> None:
    code = main(["test-runtime", *arguments, "--trace-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_trace_dir_that_holds_files_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "old.jsonl").write_text("{}\n")
    code = main(["test-runtime", "computed-tokens", "--trace-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "is not empty" in err, err
