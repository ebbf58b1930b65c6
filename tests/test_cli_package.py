"""The command as a package on click: its entry points, a ``--help`` that imports nothing heavy,
shell completion of protocol, variant and instance names (through click's protocol and a real
bash), suggestions for misspelt commands, one meaning of ``--timeout``, and a wheel that ships
the JSON Schemas and ``py.typed``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from lockstep.cli import main
from lockstep.cli.root import COMMANDS
from lockstep.models import get_protocol

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HEAVY = ("torch", "z3", "hypothesis", "numpy", "networkx", "rich.table", "lockstep.checkers", "lockstep.impl.launcher")


def environment(**extra: str) -> dict[str, str]:
    """This checkout first on the path (a subprocess imports the code under test), ``BIN`` on PATH."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def test_the_command_is_a_package_with_one_entry_point() -> None:
    import lockstep.cli

    assert Path(lockstep.cli.__file__).parent == ROOT / "lockstep" / "cli"
    old = (
        "cli.py",
        "cli_failures.py",
        "cli_numbers.py",
        "export_cli.py",
        "fuzz_cli.py",
        "reproduce_cli.py",
        "runtime_cli.py",
        "trace_cli.py",
    )
    leftovers = [name for name in old if (ROOT / "lockstep" / name).exists()]
    assert not leftovers
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"lockstep": "lockstep.cli:main"}
    assert "click" in " ".join(project["project"]["dependencies"])
    assert "click" in (lockstep.cli.__doc__ or "") and "typer" in (lockstep.cli.__doc__ or "")  # the choice, and why


def test_constants_the_options_repeat_are_the_engines_own() -> None:
    from lockstep.checkers.fuzz import DEFAULT_EXAMPLES, DEFAULT_SHRINK_SECONDS, DEFAULT_STEPS
    from lockstep.cli import commands

    assert not hasattr(commands, "ENGINES")  # --engine's names are the registry's (lockstep.checkers.engines)
    assert (commands.DEFAULT_STEPS, commands.DEFAULT_EXAMPLES, commands.DEFAULT_SHRINK_SECONDS) == (
        DEFAULT_STEPS,
        DEFAULT_EXAMPLES,
        DEFAULT_SHRINK_SECONDS,
    )


@pytest.mark.parametrize("command", ["", *COMMANDS, "trace merge"])
def test_help_imports_nothing_heavy(command: str) -> None:
    """``--help`` of the group and of every command: no torch, z3, Hypothesis, numpy, rich tables or engines;
    no models either, except ``run`` (its options come from the runtime's registry)."""
    words = [*command.split(), "--help"]
    probe = (
        "import sys\nfrom lockstep.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as stop:\n"
        "    assert stop.code == 0, stop.code\nprint(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe, *words], capture_output=True, text=True, timeout=60, env=environment(), cwd=ROOT
    )
    assert completed.returncode == 0, completed.stderr
    assert "Usage: lockstep" in completed.stdout
    loaded = set(completed.stderr.split())
    heavy = [name for name in HEAVY if name in loaded]
    assert not heavy, f"lockstep {' '.join(words)} imported {heavy}"
    if command != "run":
        assert "lockstep.models" not in loaded and "lockstep.impl" not in loaded


@pytest.mark.parametrize("engine", ["auto", "bfs", "swarm"])
def test_a_check_imports_no_solver_or_device_library(engine: str) -> None:
    """``lockstep check`` with an explicit engine never imports z3, torch, triton or Hypothesis: they
    are the symbolic, GPU and fuzzing engines' (a warm check of a small model is under a second)."""
    probe = (
        "import sys\nfrom lockstep.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    words = [
        "check",
        "pd-kv-transfer",
        "--engine",
        engine,
        "--json",
        *(["--walks", "50", "--seed", "1"] if engine == "swarm" else []),
    ]
    completed = subprocess.run(
        [sys.executable, "-c", probe, *words], capture_output=True, text=True, timeout=120, env=environment(), cwd=ROOT
    )
    assert json.loads(completed.stdout)["engine"] == ("bfs-vec" if engine == "auto" else engine), completed.stderr
    loaded = {name.split(".")[0] for name in completed.stderr.split()}
    assert not loaded & {"torch", "z3", "triton", "hypothesis"}, completed.stderr[-2000:]


def complete(shell: str, words: str, current: str = "") -> list[str]:
    """The candidates click answers a shell with (``_LOCKSTEP_COMPLETE``), for ``words`` and the word ``current``."""
    typed = f"{words} {current}" if current or shell == "fish" else f"{words} "
    if shell == "fish":
        variables = {"COMP_WORDS": typed, "COMP_CWORD": current}
    else:
        variables = {"COMP_WORDS": typed.rstrip() if current else typed, "COMP_CWORD": str(len(words.split()))}
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=environment(_LOCKSTEP_COMPLETE=f"{shell}_complete", **variables),
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    if shell == "bash":
        return [line.split(",", 1)[1] for line in lines if line.startswith("plain,")]
    if shell == "zsh":  # type, value, help, one after another
        return [lines[index + 1] for index in range(0, len(lines), 3) if lines[index] == "plain"]
    return [line.split("\t")[0].split(",", 1)[1] for line in lines if line.startswith("plain,")]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_names_protocols_variants_and_instances(shell: str) -> None:
    protocols = complete(shell, "lockstep check")
    assert protocols == [
        "pp-broadcast",
        "dp-pause",
        "async-placeholders",
        "computed-tokens",
        "cudagraph-pp",
        "dp-step-coordination",
        "pd-kv-transfer",
    ]
    variants = complete(shell, "lockstep check dp-pause --variant")
    assert variants == [variant.name for variant in get_protocol("dp-pause").variants]  # dp-pause's, not every one's
    assert variants[:3] == ["pre-fix", "post-fix", "ignore-wave-while-paused"]
    instances = complete(shell, "lockstep check dp-pause --instance")
    assert instances[0] == "seed" and "stale-wave-after-resume" in instances and "decode-gap" not in instances
    assert complete(shell, "lockstep check dp-pause --instance", "double") == ["double-resume"]
    assert complete(shell, "lockstep", "che") == ["check"]
    assert complete(shell, "lockstep fuzz pp-broadcast --variant", "skip") == ["skip-disagree", "skip-whole-receive"]
    assert complete(shell, "lockstep run dp-pause --scenario") == ["issue-36594", "random", "counterexample"]
    assert "no_hang" in complete(shell, "lockstep check dp-pause --property")
    assert "--max-states" in complete(shell, "lockstep check dp-pause", "--max")
    assert complete(shell, "lockstep check dp-pause --engine", "bfs") == ["bfs", "bfs-vec", "bfs-gpu"]
    assert complete(shell, "lockstep check dp-pause --kernels") == ["auto", "arrays", "c", "triton"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_with_the_script_lockstep_prints(tmp_path: Path) -> None:
    """``lockstep completion bash`` sourced in a real bash; its completion function fills COMPREPLY."""
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep", "completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(),
        cwd=ROOT,
    )
    assert completed.returncode == 0 and "_LOCKSTEP_COMPLETE=bash_complete" in completed.stdout
    script = tmp_path / "lockstep-completion.bash"
    script.write_text(completed.stdout)
    shim = tmp_path / "bin" / "lockstep"  # `lockstep` on PATH runs this checkout
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m lockstep "$@"\n')
    shim.chmod(0o755)
    session = (
        f"source {script}\n"
        "COMP_WORDS=(lockstep check dp-pause --variant ''); COMP_CWORD=4; _lockstep_completion lockstep\n"
        'echo "${COMPREPLY[*]}"\n'
        "COMP_WORDS=(lockstep check ''); COMP_CWORD=2; COMPREPLY=(); _lockstep_completion lockstep\n"
        'echo "${COMPREPLY[*]}"\n'
    )
    env = environment()
    env["PATH"] = f"{shim.parent}{os.pathsep}{env['PATH']}"
    completed = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", session],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    variants, protocols = completed.stdout.splitlines()
    assert variants.split() == [variant.name for variant in get_protocol("dp-pause").variants]
    assert protocols.split() == [
        "pp-broadcast",
        "dp-pause",
        "async-placeholders",
        "computed-tokens",
        "cudagraph-pp",
        "dp-step-coordination",
        "pd-kv-transfer",
    ]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_the_other_shells_get_their_scripts(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    assert f"_LOCKSTEP_COMPLETE={shell}_complete" in capsys.readouterr().out


def test_a_misspelt_command_is_refused_with_the_closest_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["chek", "dp-pause"])
    assert stopped.value.code == 2
    assert "lockstep: error: no command 'chek'; did you mean check?" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["frobnicate"])
    assert stopped.value.code == 2 and "commands: list, prove-lemmas, prove, check, run" in capsys.readouterr().err


def test_run_timeout_is_the_whole_runs_wall_clock(tmp_path: Path) -> None:
    """``--hang-timeout`` is the hang limit; ``--timeout`` ends the run, hung or not, when it is up (exit 3)."""
    started = time.monotonic()
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "dp-pause",
            "--variant",
            "pre-fix",
            "--hang-timeout",
            "60",
            "--timeout",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(),
        cwd=tmp_path,
    )
    payload = json.loads(completed.stdout)
    assert completed.returncode == 3 and payload["outcome"] == "inconclusive", completed.stderr
    assert payload["hang_timeout"] == 60 and payload["timeout"] == 4 and payload["schema_version"] == 1
    assert time.monotonic() - started < 40


def test_fuzz_timeout_covers_importing_the_model_file(tmp_path: Path) -> None:
    model = tmp_path / "endless.py"
    model.write_text("while True:\n    pass\n")
    completed = subprocess.run(
        [sys.executable, "-m", "lockstep", "fuzz", "--model-file", str(model), "--timeout", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(),
        cwd=tmp_path,
    )
    assert completed.returncode == 3 and "took longer than --timeout 2 s" in completed.stderr
    payload = json.loads(completed.stdout)
    assert payload["kind"] == "inconclusive" and payload["exit_code"] == 3


def test_the_wheel_ships_the_schemas_and_py_typed(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "lockstep", source / "lockstep", ignore=shutil.ignore_patterns("__pycache__"))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "out"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    (wheel,) = (tmp_path / "out").glob("lockstep-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    from lockstep.schemas import NAMES

    assert {f"lockstep/schemas/{name}.schema.json" for name in NAMES} <= names
    assert {"lockstep/py.typed", "lockstep/cli/__init__.py", "lockstep/traces/trace-schema.json"} <= names


@pytest.mark.parametrize("first", ["lockstep.impl.dp_pause", "lockstep.impl.pp_broadcast", "lockstep.impl.arguments"])
def test_the_runtime_registry_is_whole_whichever_module_a_process_imports_first(first: str) -> None:
    """The CLI no longer imports the runtime at start, so a process may import a protocol's package first;
    the registry, discovered on first use, still names every protocol."""
    probe = (
        f"import {first}\nfrom lockstep.impl.protocols import RUNTIME_PROTOCOLS\nprint(' '.join(RUNTIME_PROTOCOLS))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=environment(), cwd=ROOT
    )
    assert completed.stdout.split() == [
        "async-placeholders",
        "computed-tokens",
        "cudagraph-pp",
        "dp-pause",
        "pd-kv-transfer",
        "pp-broadcast",
    ]


def test_help_version_and_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    for words in (["--help"], ["-h"], ["check", "--help"], ["trace", "merge", "--help"], ["--version"]):
        with pytest.raises(SystemExit) as stopped:
            main(words)
        assert stopped.value.code == 0
        assert capsys.readouterr().out.startswith("Usage: lockstep" if words != ["--version"] else "lockstep ")
    with pytest.raises(SystemExit) as stopped:
        main([])  # nothing to run: what there is, on stderr, and exit 2
    captured = capsys.readouterr()
    assert stopped.value.code == 2 and "Commands:" in captured.err and captured.out == ""
    with pytest.raises(SystemExit) as stopped:
        main(["trace"])
    assert stopped.value.code == 2 and "lockstep: error: name a trace command: merge" in capsys.readouterr().err
