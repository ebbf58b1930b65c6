"""Hostile flight-recorder dumps end in bounded time and memory, and diagnoses say only what they know (issue 38).

Each case writes real dumps (pickles and JSON as torch writes them, then made hostile) and runs the real
command, ``lockstep replay --flight-recorder``, in this process or as a subprocess where a crash, a
memory limit or a runaway loop must be seen from outside:

- a pickle of shared references (one 20000-element list referred to 20000 times: 242 KB that a reader
  expands to 400 million elements) is exit 2 naming the file, under a memory limit of 2 GiB above the
  command's own peak; a dict key nested a million deep (which crashes CPython's unpickler when it
  hashes it) is exit 2, not a crash; entries, frames, shapes and dimensions have bounds;
- JSON nested 100000 deep and integers of 5000 digits, in a dump or a mapping file, are exit 2 naming
  the file (were a RecursionError or ValueError: exit 5);
- control characters and escapes in every name a dump holds reach the terminal escaped;
- negative counters, ids and ranks are exit 2 naming the file and the field;
- sequence ids far apart, and a ring buffer that claims to have lost 2**62 ops, end (were loops over
  every id between, and a list of every lost op); many groups to map to a model end (was every
  assignment of groups to communicators);
- a real gloo hang across groups (``lockstep run dp-pause --variant pre-fix``: each rank waits in a
  group only it posted on) is ``inconclusive`` (exit 3) without a model, never ``consistent``; a
  ``--protocol`` check that maps no group is ``inconclusive``; the directory ``lockstep run
  --flight-recorder`` writes is read with its ``nccl/`` dumps and its mapping file.
"""

from __future__ import annotations

import json
import pickle
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lockstep.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "flight-recorder"
LOCKSTEP = Path(sys.executable).parent / "lockstep"
TIMEOUT = 120  # seconds: a ceiling for a command on a loaded machine, never what decides a test
NAMES = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e\x00"  # clear screen, set title + bell, C1 CSI, bidi override, NUL


def entry(**fields: Any) -> dict[str, Any]:
    """One gloo entry as torch 2.13 writes it (``record_flight_recorder.py``'s fixtures), with ``fields`` changed."""
    base: dict[str, Any] = {
        "record_id": 0,
        "pg_id": 1,
        "process_group": ("1", "tp"),
        "collective_seq_id": 1,
        "p2p_seq_id": 0,
        "op_id": 1,
        "profiling_name": "gloo:all_reduce",
        "time_created_ns": 1795496312148081194,
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4]],
        "output_dtypes": ["Float"],
        "state": "scheduled",
        "retired": True,
        "timeout_ms": 2000,
        "is_p2p": False,
        "frames": [{"name": "all_reduce", "filename": "/job/train.py", "line": 12}],
    }
    return {**base, **fields}


def document(entries: list[Any], **fields: Any) -> dict[str, Any]:
    pg_config = {"": {"name": "", "desc": "", "ranks": "[]"}}
    return {
        "version": "2.10",
        "pg_config": pg_config,
        "pg_status": {},
        "comm_lib_version": "",
        "entries": entries,
        **fields,
    }


def write_pickles(folder: Path, documents: dict[int, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, value in documents.items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(value))
    return folder


def replay(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(["replay", "--flight-recorder", *arguments])
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


def run_limited(arguments: list[str], memory: int | None = None) -> subprocess.CompletedProcess[str]:
    """The real command as a subprocess (with its address space limited to ``memory`` bytes)."""

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [str(LOCKSTEP), *arguments], capture_output=True, text=True, timeout=TIMEOUT, preexec_fn=limit
    )


def peak_memory(arguments: list[str]) -> int:
    """The peak address space, in bytes, of the command run on ``arguments`` in a fresh interpreter."""
    program = (
        "import sys\nfrom lockstep.cli import main\nmain(sys.argv[1:])\n"
        "print(next(line for line in open('/proc/self/status') if line.startswith('VmPeak')).split()[1])"
    )
    completed = subprocess.run(
        [sys.executable, "-c", program, *arguments], capture_output=True, text=True, timeout=TIMEOUT
    )
    return int(completed.stdout.split()[-1]) * 1024


# ------------------------------------------------------------------------- 1. bounds on what a dump holds
def test_a_pickle_of_shared_references_is_refused_quickly_under_a_memory_limit(tmp_path: Path) -> None:
    shared = [1] * 20_000
    folder = write_pickles(tmp_path / "amplified", {0: document([entry(input_sizes=[shared] * 20_000)])})
    assert (folder / "nccl_trace_rank_0").stat().st_size < 300_000  # small on disk, 400 million elements expanded
    write_pickles(tmp_path / "plain", {0: document([entry()])})
    memory = peak_memory(["replay", "--flight-recorder", str(tmp_path / "plain")]) + 2 * 1024**3
    completed = run_limited(["replay", "--flight-recorder", str(folder)], memory)
    assert completed.returncode == 2, completed.stderr[-2000:]
    message = " ".join(completed.stderr.split())
    assert f"{folder / 'nccl_trace_rank_0'}: refused: the dump expands to more than" in message
    assert "Traceback" not in completed.stderr


def test_a_dict_key_nested_a_million_deep_is_refused_not_a_crash(tmp_path: Path) -> None:
    # PROTO 4, {} then a key of EMPTY_TUPLE wrapped a million times by TUPLE1, a None value, SETITEM, STOP:
    # the plain unpickler hashes the key and overflows the C stack (a segmentation fault)
    data = b"\x80\x04}" + b")" + b"\x85" * 1_000_000 + b"Ns."
    (tmp_path / "nccl_trace_rank_0").write_bytes(data)
    completed = run_limited(["replay", "--flight-recorder", str(tmp_path)])
    assert completed.returncode == 2, (completed.returncode, completed.stderr[-2000:])
    assert f"{tmp_path / 'nccl_trace_rank_0'}: refused: a dict key or set item" in " ".join(completed.stderr.split())


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("entries", "refused: 200001 entries (lockstep's bound per dump is 200000)"),
        ("frames", "entry 0: refused: 10001 frames (lockstep's bound per entry is 10000)"),
        ("shapes", "entry 0: refused: input_sizes holds more than 10000 shapes"),
        ("dimensions", "entry 0: refused: output_sizes holds more than 10000 shapes or a shape of more than 1024"),
        ("nesting", "refused: nested more than 64 deep"),
        ("cycle", "refused: a container that holds itself"),
    ],
)
def test_entries_frames_shapes_and_nesting_have_bounds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, change: str, problem: str
) -> None:
    one = entry()
    value: Any = document([one])
    if change == "entries":  # references to one entry: a small file
        value = document([one] * 200_001)
    elif change == "frames":
        value = document([entry(frames=[one["frames"][0]] * 10_001)])
    elif change == "shapes":
        value = document([entry(input_sizes=[[4]] * 10_001)])
    elif change == "dimensions":
        value = document([entry(output_sizes=[[1] * 1025])])
    elif change == "nesting":
        deep: list[Any] = []
        for _ in range(100):
            deep = [deep]
        value = document([entry(extra=deep)])
    else:
        loop: list[Any] = []
        loop.append(loop)
        value = document([entry(extra=loop)])
    write_pickles(tmp_path, {0: value})
    code, _, err = replay(capsys, str(tmp_path))
    assert code == 2 and f"{tmp_path / 'nccl_trace_rank_0'}: {problem}" in err, err


# ------------------------------------------------------------------- 2. recursion and long integers
@pytest.mark.parametrize("where", ["dump", "mapping"])
@pytest.mark.parametrize("hostile", ["deep", "digits"])
def test_deep_json_and_long_integers_are_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str, hostile: str
) -> None:
    text = "[" * 100_000 + "]" * 100_000 if hostile == "deep" else "1" * 5000
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    plain = json.dumps(document([entry()]))
    (dumps / "rank0.json").write_text(plain.replace('"comm_lib_version": ""', f'"comm_lib_version": {text}'))
    if where == "mapping":
        (dumps / "rank0.json").write_text(plain)
        (dumps / "rank1.json").write_text(plain)
        (tmp_path / "mapping.json").write_text('{"groups": {"1": "worker_dp"}, "other": ' + text + "}")
    arguments = [str(dumps)] + (
        ["--protocol", "dp-pause", "--mapping", str(tmp_path / "mapping.json")] * (where == "mapping")
    )
    code, _, err = replay(capsys, *arguments)
    named = tmp_path / "mapping.json" if where == "mapping" else dumps / "rank0.json"
    expected = "JSON nested too deeply" if hostile == "deep" else "an integer of 5000 digits (at most 20)"
    assert code == 2 and f"{named}: {expected}" in err, err


def test_an_integer_of_5000_digits_in_a_pickle_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    write_pickles(tmp_path, {0: document([entry(collective_seq_id=10**5000)])})
    code, _, err = replay(capsys, str(tmp_path))
    assert code == 2 and f"{tmp_path / 'nccl_trace_rank_0'}: an integer of 16610 bits" in err, err


# ------------------------------------------------------------------------------ 3. escapes in names
def test_control_characters_in_names_reach_the_terminal_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def hostile(rank: int, sequence: int) -> dict[str, Any]:
        return entry(
            record_id=sequence - 1,
            collective_seq_id=sequence,
            op_id=sequence,
            process_group=("1" + NAMES, "desc" + NAMES),
            profiling_name="gloo:all_reduce" + NAMES,
            input_dtypes=["Float" + NAMES],
            frames=[{"name": "step" + NAMES, "filename": f"/job/train{NAMES}.py", "line": 7}],
        )

    documents = {rank: document([hostile(rank, 1), hostile(rank, 2)], version="2.10" + NAMES) for rank in (0, 1)}
    documents[1]["entries"][1]["profiling_name"] = "gloo:barrier" + NAMES  # a desync: frames are shown
    folder = write_pickles(tmp_path / f"dumps{NAMES.replace(chr(0), '')}", documents)
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"groups": {"1" + NAMES: "worker_dp"}}))
    runs = [
        [str(folder), "--operations"],
        [str(folder), "--protocol", "dp-pause", "--mapping", str(mapping)],
        [str(folder), "--protocol", "dp-pause", "--mapping", str(tmp_path / f"missing{NAMES[:9]}.json")],
    ]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / f"rank{NAMES[:9]}0.json").write_text("not a dump")
    runs.append([str(tmp_path / "bad")])
    for arguments in runs:
        main(["replay", "--flight-recorder", *arguments])
        captured = capsys.readouterr()
        shown = captured.out + captured.err
        assert shown.strip(), arguments
        assert all(character == "\n" or character.isprintable() for character in shown), (arguments, shown)
        assert "\\x1b[2J" in shown, (arguments, shown)
    assert main(["replay", "--flight-recorder", str(folder), "--json"]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x9b" not in out  # json escapes them ...
    payload = json.loads(out)
    assert payload["groups"][0]["key"] == "1" + NAMES  # ... and keeps them


# -------------------------------------------------------------------------- 4. negative counters
@pytest.mark.parametrize("field", ["record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "timeout_ms"])
def test_a_negative_counter_is_bad_input_naming_the_file_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, field: str
) -> None:
    write_pickles(tmp_path, {0: document([entry()]), 1: document([entry(**{field: -5})])})
    code, _, err = replay(capsys, str(tmp_path))
    assert code == 2 and f"{tmp_path / 'nccl_trace_rank_1'}: entry 0: {field} is negative (-5)" in err, err


def test_a_missing_sequence_id_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = entry()
    del missing["collective_seq_id"]
    write_pickles(tmp_path, {0: document([missing])})
    code, _, err = replay(capsys, str(tmp_path))
    expected = f"{tmp_path / 'nccl_trace_rank_0'}: entry 0: collective_seq_id is missing or not an integer (None)"
    assert code == 2 and expected in err, err


def test_a_negative_rank_in_pg_config_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pg_config = {"1": {"name": "1", "desc": "tp", "ranks": "[-1, 0]"}}
    write_pickles(tmp_path, {0: document([entry()], pg_config=pg_config)})
    code, _, err = replay(capsys, str(tmp_path))
    assert code == 2 and f"{tmp_path / 'nccl_trace_rank_0'}: pg_config ranks of group '1' are not ranks" in err, err


# --------------------------------------------------------------------------- bounded time, however far apart
def test_sequence_ids_far_apart_end(tmp_path: Path) -> None:
    far = 2**62
    documents = {rank: document([entry(), entry(record_id=1, collective_seq_id=far, op_id=far)]) for rank in (0, 1)}
    documents[1]["entries"][1]["profiling_name"] = "gloo:barrier"
    folder = write_pickles(tmp_path, documents)
    completed = run_limited(["replay", "--flight-recorder", str(folder)])  # was a loop over every id between
    assert completed.returncode == 1, completed.stderr[-2000:]
    assert f"first disagreement at #{far}: different operations" in completed.stdout
    assert f"rank 0 has no entries from #2 to #{far - 1}" in completed.stdout


def test_a_ring_buffer_that_lost_2_to_the_62_ops_ends_against_a_model(tmp_path: Path) -> None:
    far = 2**62
    lost = entry(record_id=far - 1, process_group=("5", "dp"), pg_id=5, collective_seq_id=far, op_id=far)
    folder = write_pickles(tmp_path / "dumps", {0: document([lost]), 1: document([lost])})
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"groups": {"5": "worker_dp"}}))
    arguments = ["--protocol", "dp-pause", "--variant", "pre-fix", "--mapping", str(mapping), "--max-states", "2000"]
    completed = run_limited(["replay", "--flight-recorder", str(folder), *arguments])  # was a list of 2**62 ops
    assert completed.returncode == 3, completed.stderr[-2000:]
    assert "against the model dp-pause pre-fix" in completed.stdout and "raise --max-states" in completed.stdout


def test_the_automatic_mapping_of_many_groups_ends(tmp_path: Path) -> None:
    groups = [entry(pg_id=index, process_group=(str(index), "g"), record_id=index) for index in range(1, 41)]
    folder = write_pickles(tmp_path, {0: document(groups), 1: document(groups)})
    arguments = ["replay", "--flight-recorder", str(folder), "--protocol", "dp-pause", "--max-states", "2000"]
    completed = run_limited(arguments)  # was every assignment of 40 groups to 3 communicators
    assert completed.returncode in (0, 1, 3), completed.stderr[-2000:]
    assert "the automatic mapping looked at 100000 of" in " ".join(completed.stdout.split())


# --------------------------------------------------------- 5, 6. a real run's dumps: say only what they know
@pytest.fixture(scope="module")
def gloo_hang(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory a real ``lockstep run dp-pause --variant pre-fix --flight-recorder`` wrote (gloo, 2 ranks):
    rank 0 waits in an all_reduce of group 3 (worker_world), rank 1 in one of group 2 (worker_dp)."""
    pytest.importorskip("torch")
    traces = tmp_path_factory.mktemp("run") / "traces"
    arguments = ["run", "dp-pause", "--variant", "pre-fix", "--hang-timeout", "1.5", "--trace-dir", str(traces)]
    completed = run_limited([*arguments, "--flight-recorder", "--no-replay"])
    assert completed.returncode == 1, completed.stderr[-2000:]
    assert sorted(path.name for path in traces.glob("*.flight-recorder")) == [
        "rank-0.flight-recorder",
        "rank-1.flight-recorder",
    ]
    return traces


def test_a_real_gloo_hang_across_groups_is_inconclusive_without_a_model(
    capsys: pytest.CaptureFixture[str], gloo_hang: Path
) -> None:
    code, out, _ = replay(capsys, str(gloo_hang))
    assert code == 3, out
    headline = out.splitlines()[1]
    assert headline.startswith("verdict: inconclusive: nothing to compare on group 2, group 3 (one rank posted on each")
    assert "rank 0 last posted all_reduce#1 of group 3; rank 1 last posted all_reduce#1 of group 2" in headline
    assert "group 2: rank 1 (from the dumps), gloo, all_reduce×1: inconclusive" in out
    assert main(["replay", "--flight-recorder", str(gloo_hang), "--json"]) == 3
    payload = json.loads(capsys.readouterr().out)
    assert (payload["verdict"], payload["exit_code"]) == ("inconclusive", 3)
    single = gloo_hang.parent / "one-rank"
    single.mkdir()
    shutil.copy(gloo_hang / "rank-0.flight-recorder", single / "rank-0.flight-recorder")
    code, out, _ = replay(capsys, str(single))  # one rank's gloo dump: nothing at all to compare
    assert code == 3 and "verdict: inconclusive" in out


def test_a_model_check_that_maps_no_group_is_inconclusive(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gloo_hang: Path
) -> None:
    code, out, _ = replay(capsys, str(gloo_hang), "--protocol", "pp-broadcast")  # no pp-broadcast group is there
    assert code == 3, out
    assert "against the model pp-broadcast post-fix seed: inconclusive" in out and "no group mapped" in out
    assert "nothing was checked against the model: no group of the dumps maps to one of its communicators" in out
    assert "maps the groups of a dp-pause run: not used" in out
    elsewhere = tmp_path / "mapping.json"
    elsewhere.write_text(json.dumps({"groups": {"9": "worker_dp"}}))  # a group the dumps do not have
    code, out, _ = replay(capsys, str(gloo_hang), "--protocol", "dp-pause", "--mapping", str(elsewhere))
    assert code == 3 and "mapping: group '9' has no entries in the dumps" in out, out


def test_a_run_directory_is_read_with_its_mapping_file_and_nccl_dumps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, gloo_hang: Path
) -> None:
    code, out, _ = replay(capsys, str(gloo_hang), "--protocol", "dp-pause", "--variant", "pre-fix")
    assert code == 1, out
    assert (
        f"mapping (file {gloo_hang / 'flight-recorder-mapping.json'}): group 2 -> worker_dp, group 3 -> worker_world"
        in out
    )
    # the same layout with NCCL (recorded on 2 GPUs): the gloo default group's dumps beside nccl/ and the mapping
    run = shutil.copytree(FIXTURES / "runtime-pp-broadcast-nccl", tmp_path / "run")
    code, out, _ = replay(capsys, str(run), "--protocol", "pp-broadcast", "--variant", "skip-disagree")
    assert code == 0, out
    assert out.startswith(f"flight-recorder dumps in {run} (and {run / 'nccl'}): ranks 0,1")
    assert "group 1: ranks 0,1 (from pg_config), nccl, send×2 recv×2: consistent" in out
    assert f"mapping (file {run / 'flight-recorder-mapping.json'}): group 1 -> pp" in out
    code, out, _ = replay(capsys, str(run / "nccl"), "--protocol", "pp-broadcast", "--variant", "pre-fix")
    assert code == 1 and f"mapping (file {run / 'flight-recorder-mapping.json'}): group 1 -> pp" in out, out
