"""Every output lockstep writes goes through one safe writer (``lockstep.traces.output``; issue 38).

The writing commands are found from the CLI itself (every path option that is not an input), and
each is run for real, as a subprocess, against:

- a device as its output: ``/dev/full`` stays a character device and the write error is a message
  naming the output (no traceback), ``/dev/null`` takes the output and stays a device (a folder
  output refuses both);
- links planted where a fixed temporary name would be (``OUT.partial``, ``.OUT.partial``, and the
  names a folder output writes): the file they point at is unchanged;
- two processes writing the same output at once: each exit is honest, and an exit that says the
  output was written leaves it whole (a trace that reads back, a whole DOT file, a folder of traces
  that merge in causal order);
- a write the system refuses part-way (a file-size limit): the output that was there is unchanged
  and no temporary file is left.

Besides: the live recorder (``lockstep.record``) never follows a link planted at its trace file, and
neither do ``fuzz --impl --trace-out`` (the failing run's traces) nor ``explore``'s export (tested
through the library: one needs a failing runtime, the other a page's request); ``vllm check``
needs a real vLLM (its folder is claimed as ``run``'s). The device nodes are made in the test's
folder where the user may (root), so a writer that wrongly renames over one harms only that copy.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest

from lockstep.cli import main
from lockstep.cli.root import lockstep
from lockstep.traces.merge import open_traces

TIMEOUT = 300  # seconds: a ceiling for a real run on a loaded machine, never what decides a test
FULL, NULL = Path("/dev/full"), Path(os.devnull)
VICTIM_TEXT = "the victim's own text\n"
INPUTS = {  # read
    "model_file",
    "choices",
    "counterexample",
    "paths",
    "flight_recorder",
    "mapping",
    "change",
    "source",
    "vllm_source",
}
TAKEN = ("is being written by another lockstep", "already holds *.jsonl files", "is not empty")
NO_DEFAULT_OUTPUT = {("run",), ("export",), ("graph",), ("trace", "merge"), ("show",)}  # without it: none, or stdout
# outputs not run here as a command, and why; each is written by the helpers the commands above exercise
ELSEWHERE = {
    (("explore",), "export_dir"): "a page's request (Session.export, tested below) over a local server",
    (("vllm", "check"), "trace_dir"): "needs a real vLLM; its folder is claimed as run's (claim_directory)",
}


@dataclass(frozen=True)
class Writer:
    """A command that writes an output: through ``flag`` (the click parameter ``option``), or where
    it writes by default (``default``, relative to its working folder) when ``option`` is None."""

    command: tuple[str, ...]
    arguments: tuple[str, ...]  # "{trace}": a model counterexample, "{big}": a long one-actor trace
    option: str | None = None
    flag: str = ""
    default: str = ""
    kind: str = "trace"  # trace | dot | html | folder (of traces)
    codes: frozenset[int] = frozenset({0})  # the exits of a run that wrote its output
    refused: int = 2  # the exit when the output cannot be written
    plants: tuple[str, ...] = ()  # names planted inside a folder output

    @property
    def label(self) -> str:
        where = self.flag or f"default {self.default}"
        return f"{' '.join(self.command)} {where}"

    def argv(self, inputs: dict[str, Path], target: Path | None) -> list[str]:
        arguments = [
            argument.format(**{name: str(path) for name, path in inputs.items()}) for argument in self.arguments
        ]
        named = [self.flag, str(target)] if self.option is not None and target is not None else []
        return [*self.command, *arguments, *named]


FUZZ = ("pp-broadcast", "--variant", "pre-fix", "--examples", "20", "--seed", "1", "--shrink-seconds", "1")
HANG = ("dp-pause", "--variant", "pre-fix", "--flight-recorder", "--hang-timeout", "3")
DUMPS = (".rank-0.flight-recorder.partial", ".rank-1.flight-recorder.partial", ".flight-recorder-mapping.json.partial")
CHOICES = ("choices.json", ".choices.json.partial")
PATHS = ("path-1.jsonl", ".path-1.jsonl.partial")  # test-runtime: its folder must be empty
PRE_FIX = ("pp-broadcast", "--variant", "pre-fix")
WRITERS = [
    Writer(("check",), PRE_FIX, "trace_out", "--trace-out", codes=frozenset({1}), refused=1),
    Writer(
        ("check",), PRE_FIX, default="lockstep-out/pp-broadcast-pre-fix-seed.jsonl", codes=frozenset({1}), refused=1
    ),
    Writer(("fuzz",), FUZZ, "trace_out", "--trace-out", codes=frozenset({1}), refused=1),
    Writer(
        ("fuzz",), FUZZ, default="lockstep-out/pp-broadcast-pre-fix-seed-fuzz.jsonl", codes=frozenset({1}), refused=1
    ),
    Writer(("export",), ("{big}", "--format", "dot"), "output", "-o", kind="dot"),
    Writer(("graph",), ("pp-broadcast", "--format", "dot"), "output", "-o", kind="dot"),
    Writer(("trace", "merge"), ("{big}",), "output", "-o"),
    Writer(("show",), ("{trace}", "--html"), "output", "-o", kind="html"),
    Writer(("run",), HANG, "trace_dir", "--trace-dir", kind="folder", codes=frozenset({1}), plants=DUMPS),
    Writer(
        ("reproduce",), ("{trace}",), "trace_dir", "--trace-dir", kind="folder", codes=frozenset({1}), plants=CHOICES
    ),
    Writer(
        ("reproduce",),
        ("{trace}",),
        default="lockstep-out/counterexample-reproduced",
        kind="folder",
        codes=frozenset({1}),
        plants=CHOICES,
    ),
    Writer(
        ("test-runtime",), ("pp-broadcast", "--max-paths", "1"), "trace_dir", "--trace-dir", kind="folder", plants=PATHS
    ),
    Writer(
        ("test-runtime",),
        ("pp-broadcast", "--max-paths", "1"),
        default="lockstep-out/test-runtime-pp-broadcast-post-fix",
        kind="folder",
        plants=PATHS,
    ),
]
FILE_WRITERS = [writer for writer in WRITERS if writer.kind != "folder"]


def labels(writer: Writer) -> str:
    return writer.label


def commands(group: click.Group, context: click.Context, prefix: tuple[str, ...] = ()) -> Iterator[Any]:
    """Every command of the CLI as (its words, the click command)."""
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from commands(command, context, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_command_that_writes_is_covered() -> None:
    """Each path option is an input or an output; each output, and each default output, has a case."""
    outputs = set()
    for words, command in commands(lockstep, click.Context(lockstep)):
        for parameter in command.params:
            if isinstance(parameter.type, click.Path) and parameter.name not in INPUTS:
                outputs.add((words, parameter.name))
    covered = {(writer.command, writer.option) for writer in WRITERS if writer.option is not None}
    assert outputs == covered | set(ELSEWHERE)
    with_default = {words for words, _ in outputs - set(ELSEWHERE)} - NO_DEFAULT_OUTPUT
    assert with_default == {writer.command for writer in WRITERS if writer.option is None}


# ------------------------------------------------------------------------------------------- helpers
def lockstep_process(argv: list[str], cwd: Path, **options: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lockstep", *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    """The exit code and the stderr (whitespace folded) of ``process``, waited for up to ``TIMEOUT``."""
    _, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, " ".join(err.split())


def run_lockstep(argv: list[str], cwd: Path, **options: Any) -> tuple[int, str]:
    return finish(lockstep_process(argv, cwd, **options))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A model counterexample (pp-broadcast pre-fix) and a long one-actor trace (its writes take a while)."""
    folder = tmp_path_factory.mktemp("inputs")
    trace = folder / "counterexample.jsonl"
    assert main(["check", "pp-broadcast", "--variant", "pre-fix", "--trace-out", str(trace)]) == 1
    header = json.loads(trace.read_text().splitlines()[0])
    big = folder / "long.jsonl"
    with big.open("w") as file:
        file.write(json.dumps(header) + "\n")
        file.writelines(
            json.dumps({"index": index, "actor": "rank:0", "action": "step", "args": {"number": index}}) + "\n"
            for index in range(150_000)
        )
    return {"trace": trace, "big": big}


def target_of(writer: Writer, folder: Path) -> Path:
    if writer.option is None:
        return folder / writer.default
    return folder / ("out" if writer.kind == "folder" else "out." + {"trace": "jsonl"}.get(writer.kind, writer.kind))


def assert_whole(writer: Writer, path: Path) -> None:
    """``path`` is one whole output of ``writer``: a trace that reads back, a DOT file to its last
    line, or a folder whose every trace folder reads in causal order."""
    if writer.kind in ("dot", "html"):
        text = path.read_text()
        first, last = (
            (("digraph", "strict digraph"), "}\n") if writer.kind == "dot" else (("<!doctype html",), "</html>\n")
        )
        assert text.startswith(first) and text.endswith(last), text[-200:]
        return
    folders = [path] if writer.kind == "trace" else sorted({file.parent for file in path.rglob("*.jsonl")})
    assert folders, f"{path} holds no traces"
    for item in folders:
        trace = open_traces([item])
        events = sum(1 for _ in trace.records())
        assert events > 0 and not trace.warnings, (item, trace.warnings)


def temporary_files(folder: Path, planted: set[Path] = frozenset()) -> list[Path]:  # type: ignore[assignment]
    """Files under ``folder`` named like a temporary output (``*.partial``) that were not planted."""
    return [path for path in folder.rglob("*.partial") if path not in planted]


def is_character_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


# ------------------------------------------------------------------------------------------- devices
def device_node(real: Path, folder: Path) -> Path:
    """A character device node for ``real``'s device (``/dev/full``, ``/dev/null``: the same driver)
    made in ``folder`` where this user may (root): a writer that wrongly renames a file over it then
    replaces this copy, not the machine's; else ``real`` itself, which such a user cannot replace."""
    node = folder / real.name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.stat(real).st_rdev)
    except PermissionError:
        return real
    return node


@pytest.mark.parametrize("writer", WRITERS, ids=labels)
def test_a_full_device_keeps_its_node_and_the_error_names_it(
    writer: Writer, inputs: dict[str, Path], tmp_path: Path
) -> None:
    if not FULL.exists():
        pytest.skip("no /dev/full here")
    work = tmp_path / "work"
    work.mkdir()
    full = target = device_node(FULL, tmp_path)
    if writer.option is None:  # the default output is a link to the device
        target = target_of(writer, work)
        target.parent.mkdir(parents=True)
        target.symlink_to(full)
    code, err = run_lockstep(writer.argv(inputs, target), work)
    assert is_character_device(full)
    assert code == writer.refused and code != 0, err
    assert str(target) in err or os.path.relpath(target, work) in err, err
    assert "Traceback" not in err and "partial" not in err, err
    assert not temporary_files(tmp_path)


@pytest.mark.parametrize("writer", [writer for writer in WRITERS if writer.option is not None], ids=labels)
def test_the_null_device_takes_a_file_and_stays_a_device(
    writer: Writer, inputs: dict[str, Path], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    null = device_node(NULL, tmp_path)
    code, err = run_lockstep(writer.argv(inputs, null), work)
    assert is_character_device(null)
    if writer.kind == "folder":  # a folder output is never a device
        assert code == 2 and f"{null} is not a directory" in err, err
    else:
        assert code in writer.codes, err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------- planted links
@pytest.mark.parametrize("writer", WRITERS, ids=labels)
def test_a_link_planted_at_a_temporary_name_is_not_followed(
    writer: Writer, inputs: dict[str, Path], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    target = target_of(writer, work)
    if writer.kind == "folder":
        target.mkdir(parents=True)
        planted = [target / name for name in writer.plants]
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        planted = [target.with_name(target.name + ".partial"), target.with_name(f".{target.name}.partial")]
    for link in planted:
        link.symlink_to(victim)
    code, err = run_lockstep(writer.argv(inputs, target), work)
    assert victim.read_text() == VICTIM_TEXT, err
    refused = code == 2 and any(reason in err for reason in TAKEN)  # a folder that must be empty
    assert (code in writer.codes or refused) and "Traceback" not in err, err
    if code in writer.codes:  # a default folder that holds something already is passed over for the next one
        moved = writer.kind == "folder" and writer.option is None
        assert_whole(writer, max(target.parent.glob(target.name + "*")) if moved else target)
    assert not temporary_files(work, set(planted))


# ----------------------------------------------------------------------------------- concurrent writers
@pytest.mark.parametrize("writer", WRITERS, ids=labels)
def test_two_writers_of_one_output_leave_it_whole_or_say_they_failed(
    writer: Writer, inputs: dict[str, Path], tmp_path: Path
) -> None:
    """A file: each rename is whole, both succeed and the last one wins. A folder (a run's traces):
    the second is refused while the first holds it (or finds it filled), or, for a default folder,
    takes the next one (``...-2``); no run ever writes into another's traces."""
    target = target_of(writer, tmp_path)
    processes = [lockstep_process(writer.argv(inputs, target), tmp_path) for _ in range(2)]
    results = [finish(process) for process in processes]
    for code, err in results:
        taken = writer.kind == "folder" and code == 2 and any(reason in err for reason in TAKEN)
        assert (code in writer.codes or taken) and "Traceback" not in err, err
    succeeded = sum(code in writer.codes for code, _ in results)
    assert succeeded >= 1, results
    written = [target]
    if writer.kind == "folder" and writer.option is None:  # each run that went ahead has a folder of its own
        written = sorted(target.parent.glob(target.name + "*"))
        assert len(written) == succeeded, (written, results)
    for output in written:
        assert_whole(writer, output)
    assert not temporary_files(tmp_path)


# --------------------------------------------------------------------------------- a write refused part-way
FILE_SIZE_LIMIT = 16 << 10  # bytes: less than each of these writers' output
PART_WAY = [writer for writer in FILE_WRITERS if writer.arguments[0] == "{big}" or writer.kind == "html"]


def limit_file_size() -> None:
    """In the child: files may not grow past ``FILE_SIZE_LIMIT`` (a write past it fails with EFBIG,
    the way a full disk fails with ENOSPC; the SIGXFSZ that comes with it is ignored)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


@pytest.mark.parametrize("writer", PART_WAY, ids=labels)
def test_a_write_refused_part_way_leaves_the_old_output_and_no_temporary_file(
    writer: Writer, inputs: dict[str, Path], tmp_path: Path
) -> None:
    target = target_of(writer, tmp_path)
    old = {"dot": "digraph old {\n}\n", "html": "<!doctype html>\n<html></html>\n"}.get(writer.kind) or inputs[
        "trace"
    ].read_text()
    target.write_text(old)
    code, err = run_lockstep(writer.argv(inputs, target), tmp_path, preexec_fn=limit_file_size)
    assert code == writer.refused, err
    assert f"{target}: cannot write: File too large" in err and "Traceback" not in err, err
    assert target.read_text() == old
    assert not temporary_files(tmp_path) and sorted(tmp_path.iterdir()) == [target]


# -------------------------------------------------------------------------------- the live recorder
def test_the_live_recorder_refuses_a_link_planted_at_its_trace_file(tmp_path: Path) -> None:
    from lockstep import record

    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank-0.jsonl").symlink_to(victim)
    parameters = record.parameters("dp-pause", ranks=2)
    with pytest.raises(FileExistsError, match="rank-0.jsonl"):
        record.open_trace(folder, actor="rank:0", protocol="dp-pause", variant="post-fix", parameters=parameters)
    assert victim.read_text() == VICTIM_TEXT
    recorder = record.open_trace(folder, actor="rank:1", protocol="dp-pause", variant="post-fix", parameters=parameters)
    recorder.close()
    with pytest.raises(FileExistsError, match="rank-1.jsonl"):  # an earlier run's file is not mixed into
        record.open_trace(folder, actor="rank:1", protocol="dp-pause", variant="post-fix", parameters=parameters)


def test_an_exploration_exported_into_a_folder_does_not_follow_a_planted_link(tmp_path: Path) -> None:
    """``lockstep explore``'s 'export trace' (``--export-dir``): ``Session.export`` writes whole."""
    from lockstep.explore.session import Session
    from lockstep.models import get_protocol

    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    session = Session(get_protocol("pp-broadcast").instance("pre-fix", "seed"))
    name = "explore-pp-broadcast-pre-fix-seed-0-steps.jsonl"
    for link in (f"{name}.partial", f".{name}.partial"):
        (tmp_path / link).symlink_to(victim)
    written = session.export(tmp_path)
    assert written == tmp_path / name and victim.read_text() == VICTIM_TEXT
    assert json.loads(written.read_text().splitlines()[0])["format"] == "lockstep-trace"
    assert not temporary_files(tmp_path, {tmp_path / f"{name}.partial", tmp_path / f".{name}.partial"})


@dataclass
class Mislabelled:
    """A runner whose runs fail (pre-fix runs labelled post-fix): the failing example's traces are kept."""

    runs: list[str] = field(default_factory=list)

    def __call__(self, config: Any) -> Any:
        from lockstep.impl.launcher import launch

        config.variant = "pre-fix"
        outcome = launch(config, deadline=120)
        for path in Path(config.trace_dir).glob("*.jsonl"):
            lines = path.read_text().split("\n")
            header = json.loads(lines[0])
            header["variant"] = "post-fix"
            path.write_text("\n".join([json.dumps(header), *lines[1:]]))
        self.runs.append(str(config.trace_dir))
        return outcome


def test_fuzz_impl_keeps_the_failing_traces_without_following_a_planted_link(tmp_path: Path) -> None:
    from lockstep.harness.runtime_fuzzing import fuzz_runtime

    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in ("rank-0.jsonl", ".rank-0.jsonl.partial"):
        (kept / name).symlink_to(victim)
    result = fuzz_runtime(
        "dp-pause",
        "post-fix",
        scenario="issue-36594",
        examples=3,
        seed=2,
        hang_timeout=2,
        runner=Mislabelled(),
        keep_traces=str(kept),
    )
    assert result.failing is not None and result.failing.trace_dir == str(kept), result.keep_error
    assert victim.read_text() == VICTIM_TEXT
    assert (kept / "rank-0.jsonl").is_file() and not (kept / "rank-0.jsonl").is_symlink()
    assert json.loads((kept / "rank-0.jsonl").read_text().splitlines()[0])["format"] == "lockstep-trace"
