"""Shared by the runtime tests: a recorded trace file's lines, each checked against the JSON Schema;
running ``lockstep`` in a subprocess, making a counterexample and reproducing it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema

from lockstep.traces import schema


def validate_lines(path: Path, allow_cut_last_line: bool = False) -> list[dict[str, Any]]:
    """The events of ``path`` after its header, every line valid under the schema and the events
    numbered 0, 1, 2, ...; a last line cut short is allowed only with ``allow_cut_last_line``."""
    definitions = schema()
    header_schema = {**definitions, "$ref": "#/$defs/header"}
    event_schema = {**definitions, "$ref": "#/$defs/event"}
    lines = path.read_bytes().decode("utf-8").split("\n")
    if lines[-1] != "":
        assert allow_cut_last_line, f"{path} ends in a cut line"
    events = []
    for number, line in enumerate(lines[:-1]):
        value = json.loads(line)
        jsonschema.validate(value, header_schema if number == 0 else event_schema)
        if number:
            assert value["index"] == number - 1
            events.append(value)
    return events


def header_of(path: Path) -> dict[str, Any]:
    """The header line of ``path``."""
    with open(path, encoding="utf-8") as file:
        header: dict[str, Any] = json.loads(file.readline())
    return header


def lockstep_cli(*arguments: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``lockstep ARGUMENTS`` in a subprocess, from ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "lockstep", *arguments], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def counterexample(tmp_path: Path, protocol: str, *check: str) -> Path:
    """The counterexample ``lockstep check PROTOCOL CHECK...`` writes (the check must find a violation)."""
    path = tmp_path / "counterexample.jsonl"
    completed = lockstep_cli("check", protocol, *check, "--trace-out", str(path), cwd=tmp_path)
    assert completed.returncode == 1 and path.is_file(), completed.stderr
    return path


def reproduce(tmp_path: Path, path: Path, *extra: str, timeout: float = 3) -> tuple[int, dict[str, Any], str]:
    """``lockstep reproduce PATH --json`` into ``tmp_path/run``: exit code, JSON result, stderr."""
    completed = lockstep_cli(
        "reproduce",
        str(path),
        "--hang-timeout",
        str(timeout),
        "--trace-dir",
        str(tmp_path / "run"),
        "--json",
        *extra,
        cwd=tmp_path,
    )
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.returncode, json.loads(completed.stdout) if completed.stdout.strip() else {}, completed.stderr
