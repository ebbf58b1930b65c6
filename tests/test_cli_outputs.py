"""The CLI's outputs and the options that choose a model, checked before work starts.

A ``--trace-out`` or ``-o`` that cannot be written (a directory, a file where a folder should be)
or that would replace a file that is not a trace is refused with exit 2 before a check runs; the
message names the path the user gave, never a temporary file. ``show``/``export`` refuse a
variant, instance, parameter or profile the trace's protocol does not have (a typo is the user's
bad input, not a reason to draw without a highlight), and ``graph`` refuses a protocol name that
contradicts its ``--model-file``, as ``check`` and ``fuzz`` do. A negative ``--seed`` is refused by
``run``, ``reproduce`` and ``test-runtime``, and ``test-runtime --backend nccl`` on a machine without
CUDA is refused before the model is searched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lockstep.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    code = main(list(arguments))
    return code, " ".join(capsys.readouterr().err.split())


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("counterexample") / "pre-fix.jsonl"
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--trace-out", str(path)]) == 1
    return path


def test_a_trace_out_that_cannot_be_written_is_refused_before_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], counterexample: Path
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "precious.txt").write_text("not a trace\n")
    for command in (["check"], ["fuzz", "--examples", "5"]):
        for target, message in (
            ("folder", "folder is a directory; name a file"),
            (f"{counterexample}/x.jsonl", f"{counterexample} is a file, not a directory"),
            ("precious.txt", "precious.txt exists and is not a lockstep trace"),
        ):
            path = target if target.startswith("/") else str(tmp_path / target)
            code, err = run(capsys, *command, "pp-broadcast", "--variant", "pre-fix", "--trace-out", path)
            assert code == 2 and "--trace-out" in err and message in err, err
    assert (tmp_path / "precious.txt").read_text() == "not a trace\n"
    replaced = tmp_path / "again.jsonl"  # a trace is replaced, and a missing folder is made
    replaced.write_text(counterexample.read_text())
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--trace-out", str(replaced)]) == 1
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--trace-out", str(tmp_path / "a" / "b.jsonl")]) == 1
    assert (tmp_path / "a" / "b.jsonl").is_file()


def test_an_output_path_error_names_the_path_given_not_a_temporary_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], counterexample: Path
) -> None:
    (tmp_path / "folder").mkdir()
    for command in (
        ["graph", "pp-broadcast", "--format", "dot", "-o"],
        ["export", str(counterexample), "--format", "dot", "-o"],
        ["trace", "merge", str(counterexample), "-o"],
    ):
        code, err = run(capsys, *command, str(tmp_path / "folder"))
        assert code == 2 and "folder is a directory; name a file" in err and "partial" not in err, (command, err)
        code, err = run(capsys, *command, f"{counterexample}/x")
        assert code == 2 and "is a file, not a directory" in err, (command, err)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--variant", "nosuch"], "has no variant 'nosuch'"),
        (["--instance", "nosuch"], "has no instance 'nosuch'"),
        (["--set", "zzz=1"], "has no parameter 'zzz'"),
        (["--profile", "nosuch"], "no recorder profile 'nosuch'"),
    ],
)
def test_show_and_export_refuse_a_model_option_the_protocol_does_not_have(
    capsys: pytest.CaptureFixture[str], counterexample: Path, option: list[str], message: str
) -> None:
    for command in (
        ["show"],
        ["show", "--no-replay"],
        ["export", "--format", "perfetto"],
        ["export", "--format", "dot"],
    ):
        code, err = run(capsys, *command, str(counterexample), *option)
        assert code == 2 and message in err, (command, err)
    code, _ = run(capsys, "show", str(counterexample), "--variant", "post-fix")  # a real one still draws
    assert code == 0


def test_graph_refuses_a_protocol_its_model_file_does_not_define(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "adding-a-protocol.md").read_text(), re.S)[0]
    model = tmp_path / "early_stop.py"
    model.write_text(source)
    code, err = run(capsys, "graph", "pp-broadcast", "--format", "dot", "--model-file", str(model))
    assert code == 2 and "defines protocol 'early-stop', not 'pp-broadcast'" in err, err
    code, err = run(capsys, "graph", "--format", "dot")
    assert code == 2 and "name a protocol" in err


def test_a_parameter_set_two_ways_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "check", "pp-broadcast", "--ranks", "2", "--set", "ranks=3")
    assert code == 2 and "--ranks 2 and --set ranks=3 disagree" in err
    code, err = run(capsys, "check", "pp-broadcast", "--set", "ranks=2", "--set", "ranks=3")
    assert code == 2 and "--set ranks is given twice (2 and 3)" in err
    assert main(["check", "pp-broadcast", "--ranks", "2", "--set", "ranks=2"]) == 0  # the same value twice is fine


def test_a_trace_error_in_json_names_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], counterexample: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(counterexample.read_text().splitlines()[0] + '\n{"index": "x"}\n')
    code = main(["replay", "--json", str(bad)])
    payload = json.loads(capsys.readouterr().out)
    assert code == 2 and payload["file"] == str(bad) and payload["line"] == 2 and payload["kind"] == "usage"


def test_unrecording_one_rank_says_only_a_kind_or_actions_can_be(
    capsys: pytest.CaptureFixture[str], counterexample: Path
) -> None:
    code, err = run(capsys, "replay", "--unrecorded", "rank:1", str(counterexample))
    assert code == 2 and "one rank alone cannot be left unrecorded" in err and "(rank:*)" in err


def test_an_empty_file_may_be_the_trace_out(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--trace-out", str(empty)]) == 1
    assert empty.read_text().startswith('{"format":"lockstep-trace"')


def test_a_pipe_as_the_trace_out_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    import os
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(pipe.read_bytes()))
    reader.start()
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--trace-out", str(pipe)]) == 1
    reader.join(timeout=60)
    assert read and read[0].startswith(b'{"format":"lockstep-trace"') and pipe.is_fifo()


def test_fuzz_refuses_a_runtime_option_without_impl(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "fuzz", "pp-broadcast", "--hang-timeout", "3")
    assert code == 2 and "--hang-timeout is for --impl" in err


@pytest.mark.parametrize(
    "command",
    [("run", "pp-broadcast"), ("reproduce", "COUNTEREXAMPLE"), ("test-runtime", "pp-broadcast")],
)
def test_a_negative_seed_is_refused(
    capsys: pytest.CaptureFixture[str], counterexample: Path, command: tuple[str, str]
) -> None:
    """Seeds are numbers of 0 or more in every command (``fuzz --seed`` refused a negative one already)."""
    name, target = command
    arguments = [name, str(counterexample) if target == "COUNTEREXAMPLE" else target, "--seed", "-5"]
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--seed" in err and ("at least 0" in err or "must not be negative" in err), err


def test_test_runtime_refuses_nccl_without_cuda_before_searching_the_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA devices")
    code = main(["test-runtime", "pp-broadcast", "--backend", "nccl", "--trace-dir", str(tmp_path / "runs")])
    captured = capsys.readouterr()
    assert code == 2
    assert "--backend nccl needs 2 CUDA devices, found 0" in " ".join(captured.err.split())
    assert "searching the model" not in captured.out + captured.err
