"""Inputs from outside are data with limits, and outputs never destroy what was there.

Traces nested too deeply or holding lone surrogate escapes are bad input (exit 2, file and line)
in every command that reads them; non-finite numbers are refused; an input that is not a regular
file (``-``, ``/dev/stdin``, a FIFO) is read once; ``export -o`` never overwrites an input nor
truncates an existing output when it fails; ``--trace-out`` never overwrites the model file;
names from a model go into output file names sanitised; a counterexample's header parameters
are checked against the model's bounds before anything runs; a model whose code raises (or calls
``sys.exit``) while it runs is exit 5 with its file and line (with ``--json``, one JSON object);
``--timeout`` also stops a model file whose import does not end (exit 3); Ctrl-C in commands that read traces is a
message and exit 3.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lockstep.cli import main
from lockstep.traces.output import safe_name

ROOT = Path(__file__).resolve().parent.parent
LOCKSTEP = Path(sys.executable).parent / "lockstep"
HEADER = {
    "format": "lockstep-trace",
    "version": 1,
    "protocol": "dp-pause",
    "variant": "post-fix",
    "instance": "seed",
    "parameters": {},
    "source": {"kind": "runtime"},
}
DOC = ROOT / "docs" / "adding-a-protocol.md"


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


def trace_with(tmp_path: Path, name: str, event_line: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(HEADER) + "\n" + event_line + "\n")
    return path


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("counterexample")
    path = folder / "pre-fix.jsonl"
    assert main(["check", "dp-pause", "--variant", "pre-fix", "--trace-out", str(path)]) == 1
    return path


COMMANDS = [
    ("replay",),
    ("trace", "merge", "-o", "{out}"),
    ("show",),
    ("export", "--format", "dot"),
    ("export", "--format", "graphml"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_deeply_nested_json_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    depth = 100_000
    path = trace_with(
        tmp_path,
        "deep.jsonl",
        '{"index":0,"actor":"rank:0","action":"x","args":{"a":' + "[" * depth + "]" * depth + "}}",
    )
    arguments = [part.format(out=tmp_path / "out.jsonl") for part in command]
    code, _, err = (
        run(capsys, *arguments[:2], str(path), *arguments[2:])
        if command[0] == "trace"
        else run(capsys, *arguments, str(path))
    )
    assert code == 2 and "deep.jsonl:2: JSON nested too deeply" in err, err
    moderate = trace_with(
        tmp_path,
        "moderate.jsonl",
        '{"index":0,"actor":"rank:0","action":"x","args":{"a":' + "[" * 200 + "]" * 200 + "}}",
    )
    code, _, err = (
        run(capsys, *arguments[:2], str(moderate), *arguments[2:])
        if command[0] == "trace"
        else run(capsys, *arguments, str(moderate))
    )
    assert code == 2 and "moderate.jsonl:2: JSON nested too deeply" in err, err


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_a_lone_surrogate_is_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = trace_with(tmp_path, "surrogate.jsonl", '{"index":0,"actor":"rank:0","action":"x","args":{"a":"\\ud800"}}')
    arguments = [part.format(out=tmp_path / "out.jsonl") for part in command]
    code, _, err = (
        run(capsys, *arguments[:2], str(path), *arguments[2:])
        if command[0] == "trace"
        else run(capsys, *arguments, str(path))
    )
    assert code == 2 and "surrogate.jsonl:2:" in err and "surrogate" in err.split("surrogate.jsonl:2:")[1], err


def test_a_failed_export_leaves_an_existing_output_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = trace_with(tmp_path, "surrogate.jsonl", '{"index":0,"actor":"rank:0","action":"x","args":{"a":"\\ud800"}}')
    output = tmp_path / "graph.xml"
    output.write_text("kept\n")
    code, _, _ = run(capsys, "export", str(path), "--format", "graphml", "-o", str(output))
    assert code == 2 and output.read_text() == "kept\n"
    assert {file.name for file in tmp_path.iterdir()} == {"surrogate.jsonl", "graph.xml"}  # no temporary file left


def test_export_refuses_to_overwrite_its_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, counterexample: Path
) -> None:
    copy = tmp_path / "trace.jsonl"
    copy.write_bytes(counterexample.read_bytes())
    code, _, err = run(capsys, "export", str(copy), "--format", "dot", "-o", str(copy))
    assert code == 2 and "would overwrite the input" in err
    assert copy.read_bytes() == counterexample.read_bytes()
    code, _, _ = run(capsys, "export", str(copy), "--format", "dot", "-o", str(tmp_path / "trace.dot"))
    assert code == 0 and (tmp_path / "trace.dot").read_text().startswith("digraph")


def test_trace_out_never_overwrites_the_model_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tmp_path / "early_stop.py"
    model.write_text(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0])
    before = model.read_text()
    code, _, err = run(capsys, "check", "--model-file", str(model), "--variant", "pre-fix", "--trace-out", str(model))
    assert code == 2 and "would overwrite the input" in err and model.read_text() == before  # refused before the check


def test_names_from_a_model_stay_inside_the_output_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    model = tmp_path / "escaping.py"
    model.write_text(source.replace('"early-stop"', '"../../escaped"'))
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    code, _, _ = run(capsys, "check", "--model-file", str(model), "--variant", "pre-fix")
    assert code == 1
    written = [path.relative_to(tmp_path) for path in tmp_path.rglob("*.jsonl")]
    assert written == [Path("a/b/lockstep-out/-.-..-escaped-pre-fix-seed.jsonl")], written
    assert safe_name("a/b", "..") == "a-b-.." and not safe_name("..", "x").startswith(".")


@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused(capsys: pytest.CaptureFixture[str], text: str) -> None:
    for arguments in (
        ["check", "dp-pause", f"--max-memory={text}"],
        ["check", "dp-pause", f"--timeout={text}"],
        ["run", "dp-pause", f"--timeout={text}"],
        ["run", "dp-pause", f"--hang-timeout={text}"],
        ["reproduce", "x.jsonl", f"--timeout={text}"],
        ["reproduce", "x.jsonl", f"--hang-timeout={text}"],
    ):
        with pytest.raises(SystemExit) as stopped:
            main(arguments)
        assert stopped.value.code == 2
        assert "finite" in capsys.readouterr().err


def test_stdin_and_pipes_are_read_once(tmp_path: Path, counterexample: Path) -> None:
    data = counterexample.read_bytes()
    for arguments in (["replay", "-"], ["replay", "/dev/stdin"]):
        completed = subprocess.run([str(LOCKSTEP), *arguments], input=data, capture_output=True, timeout=120)
        assert completed.returncode == 1 and b"violated" in completed.stderr, (arguments, completed.stderr)
    completed = subprocess.run(
        ["bash", "-c", f'"{LOCKSTEP}" trace merge <(cat "{counterexample}") -o "{tmp_path / "m.jsonl"}"'],
        capture_output=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "m.jsonl").read_bytes() == data
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(data))
    writer.start()
    completed = subprocess.run([str(LOCKSTEP), "show", str(fifo)], capture_output=True, timeout=60)
    writer.join()
    assert completed.returncode == 0 and b"quiescent_during_rpc is violated" in completed.stdout, completed.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("trace", "merge", "{fifo}", "-o", "{out}"),
        ("show", "{fifo}"),
        ("export", "{fifo}", "--format", "perfetto"),
        ("replay", "{fifo}"),
    ],
    ids=lambda command: command[0],
)
def test_ctrl_c_while_reading_stops_cleanly(tmp_path: Path, command: tuple[str, ...]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    arguments = [part.format(fifo=fifo, out=tmp_path / "out.jsonl") for part in command]
    process = subprocess.Popen([str(LOCKSTEP), *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with open(fifo, "w") as writer:  # returns once the command opened the FIFO: it is reading
            writer.write(json.dumps(HEADER) + "\n")
            writer.flush()
            time.sleep(1.0)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 3 and "interrupted" in err and "Traceback" not in err, (process.returncode, err)
    assert not (tmp_path / "out.jsonl").exists()


def test_reproduce_checks_the_header_parameters_before_running(
    tmp_path: Path, counterexample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, *events = counterexample.read_text().splitlines()
    for value, expected in (
        (9, "ranks=9 is out of the model's bounds (2 to 8)"),
        ([2], "ranks must be an integer, got [2]"),
        (10**9, "ranks=1000000000 is out of the model's bounds"),
        (True, "ranks must be an integer"),
    ):
        edited = json.loads(header)
        edited["parameters"]["ranks"] = value
        path = tmp_path / "edited.jsonl"
        path.write_text("\n".join([json.dumps(edited), *events]) + "\n")
        started = time.monotonic()
        code, _, err = run(capsys, "reproduce", str(path), "--trace-dir", str(tmp_path / f"run-{value}"))
        assert code == 2 and f"edited.jsonl:1: header parameter {expected}" in err, err
        assert not (tmp_path / f"run-{value}").exists()  # nothing started
        assert time.monotonic() - started < 60


def test_reproduce_refuses_a_counterexample_that_is_no_path_of_its_model(
    tmp_path: Path, counterexample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    header, *events = counterexample.read_text().splitlines()
    swapped = [json.loads(line) for line in events]
    swapped[1], swapped[2] = swapped[2], swapped[1]  # rank 0 handles the request before it arrives
    for position, event in enumerate(swapped):
        event["index"] = position
    unknown = [json.loads(line) for line in events]
    unknown[2]["action"] = "frobnicate"
    for name, edited, expected in (
        ("swapped", swapped, "swapped.jsonl:3: event 1 (rank:0 handle_add) is not a step of the model"),
        ("unknown", unknown, "unknown.jsonl:4: unknown action 'frobnicate'"),
    ):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join([header, *(json.dumps(event) for event in edited)]) + "\n")
        code, _, err = run(capsys, "reproduce", str(path), "--trace-dir", str(tmp_path / f"run-{name}"))
        assert code == 2 and expected in err and "Traceback" not in err, err
        assert not (tmp_path / f"run-{name}").exists()  # nothing started


def _model(tmp_path: Path, name: str, insert: str, at_import: bool = False) -> Path:
    source = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    if at_import:  # right after the __future__ import, which must come first
        future = "from __future__ import annotations\n"
        source = source.replace(future, future + insert, 1) if future in source else insert + source
    else:
        signature = "def build(variant: str, parameters: Mapping[str, int]) -> Machine:\n"
        assert signature in source
        source = source.replace(signature, signature + insert, 1)
    path = tmp_path / name
    path.write_text(source)
    return path


def test_a_model_whose_code_raises_is_exit_5_with_file_and_line(tmp_path: Path) -> None:
    model = _model(tmp_path, "raising.py", "    raise RuntimeError('boom')\n")
    line = model.read_text().splitlines().index("    raise RuntimeError('boom')") + 1
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "--model-file", str(model)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 5 and f"raising.py:{line}: model error: RuntimeError: boom" in completed.stderr
    assert "Traceback" not in completed.stderr and completed.stdout == ""
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "--model-file", str(model), "--json"], capture_output=True, text=True, timeout=120
    )
    payload = json.loads(completed.stdout)
    assert completed.returncode == 5 and payload["exit_code"] == 5 and payload["line"] == line
    assert "RuntimeError: boom" in payload["error"] and payload["kind"] == "model"


def test_a_model_calling_sys_exit_is_not_a_silent_success(tmp_path: Path) -> None:
    model = _model(tmp_path, "exiting.py", "    import sys\n    sys.exit(0)\n")
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "--model-file", str(model)], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 5 and "model error: the code called sys.exit(0)" in completed.stderr
    model = _model(tmp_path, "exiting_at_import.py", "import sys\nsys.exit(0)\n", at_import=True)
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "--model-file", str(model)], capture_output=True, text=True, timeout=120
    )
    assert (
        completed.returncode == 2
        and "exiting_at_import.py:5: loading the model failed: SystemExit: 0" in completed.stderr
    )


def test_timeout_covers_importing_the_model_file(tmp_path: Path) -> None:
    model = tmp_path / "endless.py"
    model.write_text("while True:\n    pass\n")
    completed = subprocess.run(
        [str(LOCKSTEP), "check", "--model-file", str(model), "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 3 and "importing the model took longer than --timeout 2 s" in completed.stderr


def test_a_reader_that_closes_stdout_stops_the_command_quietly(tmp_path: Path) -> None:
    from test_trace_streaming import HEADER, runtime_events

    trace = tmp_path / "long.jsonl"  # 20,000 events: every command below writes far more than a pipe holds
    with trace.open("w", encoding="utf-8") as out:
        out.write(json.dumps(HEADER) + "\n")
        out.writelines(json.dumps(event) + "\n" for event in runtime_events(20_000))
    for command in (
        ["show", str(trace)],
        ["export", str(trace), "--format", "dot"],
        ["export", str(trace), "--format", "perfetto"],
        ["graph", "pp-broadcast", "--format", "dot"],  # one write of 723 KB (cut short, it exited 0)
    ):
        # `lockstep ... | head -c 1`: the reader is gone after one byte
        shown = subprocess.Popen(
            [str(LOCKSTEP), *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path
        )
        assert shown.stdout is not None and shown.stderr is not None
        assert shown.stdout.read(1)
        shown.stdout.close()
        error = shown.stderr.read().decode()
        assert shown.wait(timeout=120) == 141, (command, error)
        assert error == "", (command, error)
