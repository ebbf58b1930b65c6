"""``lockstep run --choices FILE``: bad input is a message naming the file and line, never a traceback.

The whole file is read before anything starts: a line that is not a UTF-8 JSON object with string
``actor``, ``point`` and ``chosen``, an actor the run does not have, a ``chosen`` outside the
line's own options or an index (``#k``) anywhere but point ``*`` exits 2 with ``FILE:LINE:
problem``, and nothing is started. Choices that parse but that the run cannot take (an option
not offered, another point, a message channel that does not exist) stop the run at once and exit
2 with the line of the choice; with ``--json`` the error object carries the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lockstep.cli import main
from lockstep.impl.choices import (
    Choice,
    ChoiceDivergence,
    ChoicesInputError,
    ScriptedChoices,
    read_divergence,
    read_script,
)
from lockstep.impl.protocols import runtime_protocol

PLACEMENT = {"actor": "client", "point": "placement", "options": ["0", "1"], "chosen": "0"}
ORDER = {"actor": "client", "point": "order:PAUSE", "options": ["0", "1"], "chosen": "1"}
ARRIVAL = {"actor": "rank:0", "point": "arrival", "options": ["client"], "chosen": "client"}


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(["run", *arguments])
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


def script(folder: Path, name: str, *lines: bytes | dict[str, Any]) -> Path:
    path = folder / name
    path.write_bytes(b"".join(line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n" for line in lines))
    return path


MALFORMED = [
    ("no-actor", {"point": "placement", "chosen": "0"}, "missing field 'actor'"),
    ("truncated", b'{"actor": \n', "malformed JSON at column 11"),
    ("array", b"[1,2]\n", "expected a JSON object with actor, point and chosen, got an array"),
    ("null", b"null\n", "expected a JSON object with actor, point and chosen, got null"),
    ("blank", b"\n", "blank line"),
    ("binary", b"\x00\x01\x02garbage\xff\n", "binary data (a NUL byte)"),
    ("not-utf-8", b'{"actor": "client\xe9"}\n', "not UTF-8 text (byte 18)"),
    (
        "cut-last-line",
        b'{"actor": "client", "po',
        "malformed JSON at column 21: Unterminated string (the final line is cut short",
    ),
    ("number-actor", {"actor": 1, "point": "placement", "chosen": "0"}, "'actor' must be a non-empty string, got 1"),
    ("options", {**PLACEMENT, "options": "01"}, "'options' must be a list of strings"),
    ("unknown-field", {**PLACEMENT, "chosen_": "1"}, "unknown field 'chosen_'"),
    ("unknown-actor", {**PLACEMENT, "actor": "nobody"}, "unknown actor 'nobody'"),
    ("absent-rank", {**ARRIVAL, "actor": "rank:2"}, "unknown actor 'rank:2'"),
    ("not-an-option", {**PLACEMENT, "chosen": "7"}, "chosen '7' is not one of the line's options (0, 1)"),
    ("index-elsewhere", {**PLACEMENT, "options": [], "chosen": "#x"}, "'#x' is an index ('#k')"),
    ("bad-index", {"actor": "client", "point": "*", "chosen": "#x"}, "at point '*' the choice is an index"),
]


@pytest.mark.parametrize(("name", "line", "problem"), MALFORMED, ids=[case[0] for case in MALFORMED])
def test_a_malformed_choices_file_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, line: bytes | dict[str, Any], problem: str
) -> None:
    last = isinstance(line, bytes) and not line.endswith(b"\n")  # a final line cut short
    path = script(tmp_path, f"{name}.jsonl", PLACEMENT, line, *([] if last else [ORDER]))
    trace_dir = tmp_path / "traces"
    code, _, err = run(capsys, "dp-pause", "--choices", str(path), "--trace-dir", str(trace_dir))
    assert code == 2, err
    assert f"lockstep: error: {path}:2: {problem}" in err, err
    assert "Traceback" not in err
    assert not trace_dir.exists()  # refused before the run started


def test_the_json_error_names_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script(tmp_path, "bad.jsonl", PLACEMENT, ORDER, b"null\n")
    code, out, err = run(capsys, "dp-pause", "--choices", str(path), "--json")
    error = json.loads(out)
    assert code == 2 and error["exit_code"] == 2 and error["kind"] == "usage", err
    assert (error["file"], error["line"]) == (str(path), 3)
    assert error["error"].startswith(f"{path}:3: expected a JSON object")


def test_good_lines_pass_as_written(tmp_path: Path) -> None:
    """Integers for options, a last line without a newline, and CRLF line ends are read as meant."""
    path = script(
        tmp_path,
        "good.jsonl",
        b'{"actor": "client", "point": "placement", "options": [0, 1], "chosen": 1}\r\n',
        {"actor": "rank:1", "point": "*", "chosen": "#3"},
        b'{"actor": "client", "point": "order:PAUSE", "chosen": "0"}',
    )
    actors = runtime_protocol("dp-pause").actors_that_choose(2)
    assert read_script(path, actors) == [
        Choice("client", "placement", ("0", "1"), "1"),
        Choice("rank:1", "*", (), "#3"),
        Choice("client", "order:PAUSE", (), "0"),
    ]
    assert [choice.line for choice in read_script(path)] == [1, 2, 3]
    assert read_script(script(tmp_path, "empty.jsonl")) == []


DIVERGING = [
    ("not-offered", 1, {**PLACEMENT, "options": [], "chosen": "7"}, "scripted choice #1 is '7' at placement"),
    ("other-point", 1, {**PLACEMENT, "point": "order:PAUSE"}, "but the run asks placement among 0, 1"),
    ("no-such-channel", 2, {**ARRIVAL, "options": [], "chosen": "bogus"}, "offers arrival only among client"),
]


@pytest.mark.parametrize(("name", "line", "choice", "problem"), DIVERGING, ids=[case[0] for case in DIVERGING])
def test_choices_that_do_not_fit_the_run_stop_it_with_their_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, line: int, choice: dict[str, Any], problem: str
) -> None:
    lines = [choice, ORDER] if line == 1 else [PLACEMENT, choice]
    path = script(tmp_path, f"{name}.jsonl", *lines)
    code, out, err = run(capsys, "dp-pause", "--choices", str(path), "--hang-timeout", "60", "--json")
    assert code == 2, err
    assert f"lockstep: error: {path}:{line}: " in err and problem in err and "does not fit --choices" in err, err
    assert "Traceback" not in err and "died" not in err
    error = json.loads(out)
    assert (error["file"], error["line"], error["exit_code"]) == (str(path), line, 2)


def test_a_divergence_is_written_for_the_launcher_and_an_index_never_raises_value_error(tmp_path: Path) -> None:
    log = tmp_path / "client.choices"
    scripted = ScriptedChoices([Choice("client", "*", (), "#x", line=4)], log=log, source="script.jsonl")
    with pytest.raises(ChoiceDivergence) as raised:
        scripted.choose("client", "placement", ["0", "1"])
    assert str(raised.value).startswith("script.jsonl:4: client: scripted choice #1 is '#x' at *")
    found = read_divergence(tmp_path)
    assert found is not None and (found.path, found.line, found.problem) == ("script.jsonl", 4, raised.value.problem)
    assert read_divergence(tmp_path / "none") is None
    with pytest.raises(ChoicesInputError) as refused:
        read_script(tmp_path / "missing.jsonl")
    assert str(refused.value).startswith(f"{tmp_path / 'missing.jsonl'}:0: cannot read")


def test_recorded_choices_pass_the_actor_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``actors_that_choose`` names every actor a run's choices come from: cudagraph-pp's engine here
    (the other protocols' recorded choices go back through ``--choices`` in their own tests)."""
    protocol = "cudagraph-pp"
    code, out, err = run(capsys, protocol, "--json", "--hang-timeout", "60")
    assert code == 0, err
    choices = json.loads(out)["choices"]
    path = script(tmp_path, "recorded.jsonl", *choices)
    known = runtime_protocol(protocol)
    assert [choice.to_json() for choice in read_script(path, known.actors_that_choose(known.default_ranks))] == choices
