"""A `--model-file` written wrongly: a model error naming the file, the line and the problem, exit 2.

Each case takes docs/adding-a-protocol.md's example model, changes one thing, and runs the command
the way a user would (``lockstep.cli.main``): the exit code is 2, stderr names the model file (and,
where Python gives it, the line of the construct that is wrong) and the problem, never a traceback;
with ``--json`` stdout is one error object of kind "model" with the file and line filled in. The
definition errors are caught when the ``Protocol`` is constructed, so ``list`` (which runs no
search) already reports them.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from test_docs import example_source

from lockstep.checkers.result import Verdict
from lockstep.cli import main
from lockstep.spec.protocol import InstanceSpec, ParameterSpec, Protocol, VariantSpec
from lockstep.spec.terms import DefinitionError

ERROR_SCHEMA = Path(__file__).resolve().parent.parent / "lockstep" / "schemas" / "error.schema.json"
SEED_LINE = 'InstanceSpec("seed", "two ranks, budgets 1 and 2", {}, {PRE_FIX: "violated", POST_FIX: "holds"}),'


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


def changed_model(tmp_path: Path, old: str, new: str, name: str = "early_stop.py") -> Path:
    """The documented example with ``old`` replaced by ``new`` (once), written to ``tmp_path / name``."""
    source = example_source()
    assert old in source, old
    file = tmp_path / name
    file.write_text(source.replace(old, new, 1))
    return file


def line_of(file: Path, text: str) -> int:
    """The number of the first line of ``file`` containing ``text``."""
    return next(number for number, line in enumerate(file.read_text().splitlines(), 1) if text in line)


def error_object(out: str) -> dict[str, object]:
    """The one JSON error object on stdout, checked against error.schema.json."""
    assert out.count("\n") == 1, out
    error = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(ERROR_SCHEMA.read_text())).validate(error)
    assert isinstance(error, dict)
    return error


@pytest.mark.parametrize("command", [["check"], ["graph", "--format", "dot"], ["fuzz", "--examples", "1"]])
def test_build_returning_no_machine_is_a_model_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    file = changed_model(tmp_path, "    return machine\n", "    return 42  # type: ignore[return-value]\n")
    code, out, err = run(capsys, *command, "--model-file", str(file))
    assert code == 2 and "Traceback" not in err and "internal error" not in err
    assert f"{file}:{line_of(file, 'def build(')}: build() of protocol early-stop" in err
    assert "returned int 42, not a Machine" in err
    if command[0] == "graph":  # graph has no --json
        return
    code, out, _ = run(capsys, *command, "--model-file", str(file), "--json")
    error = error_object(out)
    assert code == 2 and error["kind"] == "model" and error["file"] == str(file)
    assert error["line"] == line_of(file, "def build(")


def test_an_empty_protocol_name_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = changed_model(tmp_path, 'name="early-stop"', 'name=""')
    code, out, err = run(capsys, "check", "--model-file", str(file), "--variant", "pre-fix")
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"{file}:{line_of(file, 'PROTOCOL = Protocol(')}: " in err
    assert "a protocol's name must be a non-empty string, not str ''" in err


# (old, new, the line the error points at, the problem) for each definition error.
DEFINITION_ERRORS = {
    "instance-out-of-range": (
        '{}, {PRE_FIX: "violated"',
        '{"ranks": 99}, {PRE_FIX: "violated"',
        "PROTOCOL = Protocol(",
        "instance seed: parameter ranks must be at least 2 and at most 4, got 99",
    ),
    "instance-unknown-parameter": (
        '{}, {PRE_FIX: "violated"',
        '{"zzz": 1}, {PRE_FIX: "violated"',
        "PROTOCOL = Protocol(",
        "instance seed: no parameter 'zzz'; parameters: ranks, budget",
    ),
    "minimum-above-maximum": (
        "minimum=2, maximum=4",
        "minimum=5, maximum=4",
        'ParameterSpec("ranks"',
        "parameter ranks: the minimum 5 is larger than the maximum 4",
    ),
    "default-out-of-range": (
        'ParameterSpec("ranks", 2, "data-parallel ranks", minimum=2, maximum=4)',
        'ParameterSpec("ranks", 5, "data-parallel ranks", minimum=2, maximum=4)',
        'ParameterSpec("ranks"',
        "parameter ranks: the default must be at least 2 and at most 4, got 5",
    ),
    "string-default": (
        'ParameterSpec("budget", 1,',
        'ParameterSpec("budget", "1",',
        'ParameterSpec("budget"',
        "parameter budget: the default must be an integer, not str '1'",
    ),
    "unknown-verdict": (
        'POST_FIX: "holds"',
        'POST_FIX: "maybe"',
        'InstanceSpec("seed"',
        "instance seed: the verdict pinned for variant 'post-fix' must be one of holds, holds-within-bound, "
        "violated, inconclusive; got 'maybe'",
    ),
    "pin-for-unknown-variant": (
        'POST_FIX: "holds"',
        '"mutant": "holds"',
        "PROTOCOL = Protocol(",
        "instance seed: pins a verdict for no variant 'mutant'; variants: pre-fix, post-fix",
    ),
    "duplicate-instance": (
        SEED_LINE,
        SEED_LINE + '\n        InstanceSpec("seed", "the same name again"),',
        "PROTOCOL = Protocol(",
        "protocol early-stop: two instances are named 'seed'",
    ),
    "duplicate-variant": (
        '"example v2"),',
        '"example v2"),\n        VariantSpec(POST_FIX, "the same name again", "example v3"),',
        "PROTOCOL = Protocol(",
        "protocol early-stop: two variants are named 'post-fix'",
    ),
}


@pytest.mark.parametrize("case", sorted(DEFINITION_ERRORS))
def test_a_protocol_defined_wrongly_is_a_model_error_at_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    old, new, construct, problem = DEFINITION_ERRORS[case]
    file = changed_model(tmp_path, old, new)
    line = line_of(file, construct)
    code, out, err = run(capsys, "list", "--model-file", str(file))
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"lockstep: model error: {file}:{line}: loading the model failed: " in err and problem in err
    code, out, _ = run(capsys, "check", "--model-file", str(file), "--json")
    error = error_object(out)
    assert code == 2 and error["kind"] == "model" and error["file"] == str(file) and error["line"] == line
    assert problem in str(error["error"])


@pytest.mark.parametrize(("value", "described"), [("42", "an int"), ("None", "None")])
def test_protocol_of_the_wrong_type_says_what_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str, described: str
) -> None:
    file = changed_model(tmp_path, "PROTOCOL = Protocol(", f"PROTOCOL = {value}\nOTHER = Protocol(")
    code, out, err = run(capsys, "check", "--model-file", str(file))
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"{file}: PROTOCOL is {described}, not a lockstep.spec.protocol.Protocol" in err
    assert "defines no PROTOCOL" not in err


def test_a_directory_is_not_a_model_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    directory = tmp_path / "models"
    directory.mkdir()
    code, out, err = run(capsys, "check", "--model-file", str(directory))
    assert code == 2 and out == "" and f"{directory}: is a directory, not a Python file" in err
    assert "no such model file" not in err


@pytest.mark.parametrize(
    ("source", "line", "problem"),
    [
        ("import os\n\ndef broken(:\n", 3, "loading the model failed: SyntaxError"),
        ("VALUE = 1\nraise RuntimeError('boom')\n", 2, "loading the model failed: RuntimeError: boom"),
        ("x = 1\n", None, "defines no PROTOCOL"),
    ],
)
def test_a_model_file_that_does_not_load_is_a_model_error_in_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, source: str, line: int | None, problem: str
) -> None:
    file = tmp_path / "bad.py"
    file.write_text(source)
    for command in (["check"], ["fuzz"], ["list"]):
        code, out, err = run(capsys, *command, "--model-file", str(file), "--json")
        error = error_object(out)
        assert code == 2 and error["exit_code"] == 2 and "Traceback" not in err, command
        assert error["kind"] == "model" and error["file"] == str(file) and error["line"] == line, (command, error)
        assert problem in str(error["error"]) and str(file) in str(error["error"])


def test_a_missing_model_file_stays_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "check", "--model-file", str(tmp_path / "absent.py"), "--json")
    error = error_object(out)
    assert code == 2 and error["kind"] == "usage" and error["file"] is None


def test_the_pinnable_verdicts_are_the_checkers_verdicts() -> None:
    from lockstep.spec.protocol import VERDICTS

    assert VERDICTS == tuple(verdict.value for verdict in Verdict)


def test_the_definition_checks_hold_outside_model_files_too() -> None:
    """The same rules apply to a Protocol constructed in code (built-in models, entry points)."""

    def build(variant: str, parameters: object) -> object:
        raise AssertionError("never called")

    ranks = ParameterSpec("ranks", 2, "ranks", minimum=2, maximum=4)
    variants = (VariantSpec("pre-fix", "", ""), VariantSpec("post-fix", "", ""))
    seed = InstanceSpec("seed", "", {}, {"pre-fix": "violated"})
    fine = Protocol("p", "", "", variants, (ranks,), (seed,), build)  # type: ignore[arg-type]
    assert fine.instance("pre-fix").expected == "violated"
    with pytest.raises(DefinitionError, match="default_instance 'seed' is none of its instances: other"):
        Protocol("p", "", "", variants, (ranks,), (InstanceSpec("other", ""),), build)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="rank_parameter 'size' is none of its parameters: ranks"):
        Protocol("p", "", "", variants, (ranks,), (seed,), build, rank_parameter="size")  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="parameter ranks: the maximum must be an integer, not float 4.5"):
        ParameterSpec("ranks", 2, "ranks", minimum=2, maximum=4.5)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="an instance's name must be a non-empty string"):
        InstanceSpec("", "")


def test_a_definition_error_in_build_names_the_model_file_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    declare = "    state = declare(machine, parameters)\n"
    file = changed_model(tmp_path, declare, declare + "    declare(machine, parameters)  # declares phase twice\n")
    line = line_of(file, "phase=machine.variable(")
    code, out, err = run(capsys, "check", "--model-file", str(file), "--json")
    error = error_object(out)
    assert code == 2 and "Traceback" not in err
    assert f"{file}:{line}: machine early-stop/post-fix already has a variable named 'phase'" in err
    assert error["kind"] == "model" and error["file"] == str(file) and error["line"] == line
