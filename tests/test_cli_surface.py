"""The command's surface: a progress line in logs (no terminal), ``--version``, ``python -m
lockstep``, and options that are never abbreviated."""

from __future__ import annotations

import subprocess
import sys

import pytest

import lockstep
import lockstep.cli.check
from lockstep.cli import main


def test_without_a_terminal_check_prints_progress_lines(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lockstep.cli.check, "PROGRESS_SECONDS", 0.0)  # a line at every progress report (4 a second)
    code = main(["check", "dp-pause", "--ranks", "3", "--max-states", "60000"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 3
    assert "checking dp-pause post-fix seed: " in err and " distinct states of " in err and ", depth " in err, err[:600]
    assert " s elapsed" in err and " MiB" in err, err[:600]


def test_version_and_python_dash_m() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep", "--version"], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0 and completed.stdout.strip() == f"lockstep {lockstep.__version__}"
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep", "check", "dp-pause", "--set", "max_wave=0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2 and "max_wave" in completed.stderr


@pytest.mark.parametrize(
    ("arguments", "meant"),
    [
        (["check", "dp-pause", "--max-st", "5"], "--max-states"),
        (["run", "dp-pause", "--time", "5"], "--timeout"),
        (["fuzz", "dp-pause", "--exam", "5"], "--examples"),
        (["trace", "merge", "x.jsonl", "--out", "y.jsonl"], "--output"),
    ],
)
def test_abbreviated_options_are_refused(capsys: pytest.CaptureFixture[str], arguments: list[str], meant: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"lockstep: error: No such option '{arguments[-2]}'" in err and f"'{meant}'" in err  # with a suggestion
    assert "Traceback" not in err


def test_main_leaves_the_callers_sigterm_handling_as_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    import signal

    before = signal.getsignal(signal.SIGTERM)
    assert main(["check", "dp-pause", "--max-states", "10"]) == 3
    assert signal.getsignal(signal.SIGTERM) is before
