"""Flight-recorder dumps: reading real pickle and JSON dumps safely, and diagnosing them without a model.

The fixtures under tests/data/flight-recorder were recorded for real (tools/record_flight_recorder.py):
gloo on torch 2.13 (CPU) and 2.11 (CUDA build), NCCL on torch 2.11 with one H100 (live and on a watchdog timeout).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.checkers.flight_recorder.diagnosis import diagnose, diagnose_directory
from lockstep.cli.flight_recorder_report import diagnosis_to_json, render
from lockstep.traces.flight_recorder import FlightRecorderError, read_directory, read_dump, restricted_loads

FIXTURES = Path(__file__).resolve().parent / "data" / "flight-recorder"
MAPPING = "flight-recorder-mapping.json"
DESYNC = "ranks 0,2 in all_reduce#3 of unnamed group (pg_id 2); rank 1 in barrier#3 of unnamed group (pg_id 2)"
CROSS = "ranks 0,1 in all_reduce#2 of group 0 (default_pg); rank 2 last posted broadcast#1 of group 1"
EXPECTED = {
    "gloo-desync": ("desync", DESYNC),
    "gloo-cross": ("hang", CROSS),
    "gloo-wrapped": (
        "hang",
        "rank 0 in all_reduce#11 of group 0 (default_pg); rank 1 last posted all_reduce#10 of group 0 (default_pg)",
    ),
    "gloo-desync-torch2.11": (
        "desync",
        "rank 0 in all_reduce#3 of group 0 (default_pg); rank 1 in barrier#3 of group 0 (default_pg)",
    ),
    "nccl-live-torch2.11": ("consistent", ""),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("encoding", ["pickle", "json"])
def test_every_recorded_fixture_is_read_and_diagnosed(name: str, encoding: str) -> None:
    diagnosis = diagnose_directory(FIXTURES / name / encoding)
    verdict, summary = EXPECTED[name]
    assert (diagnosis.verdict, diagnosis.summary) == (verdict, summary)
    assert diagnosis.exit_code == (0 if verdict == "consistent" else 1)
    assert diagnosis.encodings == (encoding,)
    json.dumps(diagnosis_to_json(diagnosis))


def test_every_fixture_folder_names_its_versions() -> None:
    folders = [folder for folder in FIXTURES.iterdir() if folder.is_dir()]
    assert len(folders) >= 6
    for folder in folders:
        readme = (folder / "README.md").read_text()
        assert "torch 2.1" in readme and ("CUDA" in readme or "CPU only" in readme), folder


def test_the_nccl_watchdog_dump_shows_the_op_that_timed_out() -> None:
    diagnosis = diagnose_directory(FIXTURES / "nccl-timeout-torch2.11")
    assert diagnosis.verdict == "hang"
    assert diagnosis.summary == "rank 0 in all_reduce#3 of group 0 (default_pg)"
    (group, tensor_parallel) = diagnosis.groups
    assert group.members_source == "pg_config" and group.backend == "nccl"
    assert [item.state for item in group.operations[0]] == ["completed", "completed", "scheduled"]
    assert tensor_parallel.label == "group 1 (tp)" and tensor_parallel.verdict == "consistent"
    assert "only one rank's dump" in diagnosis.warnings[0]
    assert (
        read_dump(FIXTURES / "nccl-timeout-torch2.11" / "nccl_trace_rank_0").communication_library_version == "2.28.9"
    )


def test_the_desync_names_the_first_disagreement_and_the_frames_of_each_waiting_rank() -> None:
    diagnosis = diagnose_directory(FIXTURES / "gloo-desync" / "pickle")
    unnamed = diagnosis.groups[-1]
    assert unnamed.key == "pg_id 2" and unnamed.pattern == "all_reduce×3 barrier×1"
    assert unnamed.disagreement is not None
    assert (unnamed.disagreement.sequence, unnamed.disagreement.reason) == (3, "different operations")
    assert [group.verdict for group in diagnosis.groups] == ["consistent", "consistent", "desync"]
    text = render(diagnosis)
    assert "first disagreement at #3: different operations" in text
    assert "rank 1 in barrier#3 (scheduled)" in text
    assert "record_flight_recorder.py:" in text and "in expect_timeout" in text
    assert "/torch/distributed/" not in text  # torch's own frames are left out of the text


def test_a_wrapped_ring_buffer_is_said_and_only_the_common_window_is_compared() -> None:
    diagnosis = diagnose_directory(FIXTURES / "gloo-wrapped" / "json")
    assert any("ring buffer wrapped; the oldest 5 entries are lost" in warning for warning in diagnosis.warnings)
    (group,) = diagnosis.groups
    assert group.disagreement is not None and group.disagreement.absent == (1,)
    assert any("start at #6: #1 to #5 were lost" in note for note in group.notes)


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_different_sizes_and_dtypes_are_disagreements(tmp_path: Path) -> None:
    folder = _copy(FIXTURES / "gloo-cross" / "json", tmp_path / "sizes")
    for rank, change in ((0, {"input_sizes": [[5]]}), (1, {"input_dtypes": ["Half"]})):
        document = json.loads((folder / f"rank{rank}.json").read_text())
        document["entries"][0].update(change)
        (folder / f"rank{rank}.json").write_text(json.dumps(document))
    group = diagnose_directory(folder).groups[0]
    assert group.disagreement is not None and group.disagreement.reason == "different sizes"
    (folder / "rank0.json").write_text((FIXTURES / "gloo-cross" / "json" / "rank0.json").read_text())
    group = diagnose_directory(folder).groups[0]
    assert group.disagreement is not None and group.disagreement.reason == "different dtypes"


class _Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_a_malicious_pickle_is_refused_and_nothing_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "ran"
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Planted(marker)]}, protocol=protocol))
    with pytest.raises(FlightRecorderError) as raised:
        read_directory(tmp_path)
    assert str(raised.value).startswith(f"{dump}: refused: the pickle asks for ")
    assert "GLOBAL" in str(raised.value) and "will not import or call anything" in str(raised.value)
    assert not marker.exists()
    pickle.loads(dump.read_bytes())  # the plain unpickler would have run it: the plant is real
    assert marker.exists()


def test_the_unpickler_itself_refuses_classes_even_past_the_opcode_scan() -> None:
    from lockstep.traces import flight_recorder

    with pytest.raises(pickle.UnpicklingError, match="refused to import posix.system"):
        flight_recorder._RefusingUnpickler(__import__("io").BytesIO(b"cposix\nsystem\n.")).load()
    assert restricted_loads(pickle.dumps({"a": (1, [2.5, None, True])}), "x") == {"a": (1, [2.5, None, True])}


@pytest.mark.parametrize("encoding,name", [("pickle", "nccl_trace_rank_1"), ("json", "rank1.json")])
def test_a_truncated_dump_is_named_not_a_traceback(tmp_path: Path, encoding: str, name: str) -> None:
    folder = _copy(FIXTURES / "gloo-desync" / encoding, tmp_path / encoding)
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(FlightRecorderError, match=rf"{name}: truncated or corrupt"):
        read_directory(folder)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"rank0.json": b""}, "rank0.json: empty file"),
        ({"rank0.json": b"hello"}, "rank0.json: neither a pickle nor a JSON"),
        ({"rank0.json": b"[1, 2]"}, "neither a pickle nor a JSON"),
        ({"rank0.json": b'{"version": "2.10"}'}, "rank0.json: no entries"),
        ({"rank0.json": b'{"entries": []}'}, "rank0.json: no format version"),
        ({"rank0.json": b'{"version": "2.10", "entries": [{"state": "done"}]}'}, "entry 0: process_group"),
        (
            {"rank0.json": b'{"version": "2.10", "entries": []}', "rank0": b'{"version": "2.10", "entries": []}'},
            "two dumps for rank 0",
        ),
        ({"README.md": b"x"}, "no flight-recorder dumps"),
    ],
)
def test_unreadable_input_gives_a_clear_message(tmp_path: Path, files: dict[str, bytes], message: str) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(FlightRecorderError, match=message):
        read_directory(tmp_path)


def test_a_file_without_a_rank_and_a_folder_of_folders_are_explained(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text("{}")
    with pytest.raises(FlightRecorderError, match="does not end with a rank number"):
        read_dump(tmp_path / "trace.json")
    with pytest.raises(FlightRecorderError, match="try one of its folders: json, pickle"):
        read_directory(FIXTURES / "gloo-desync")


def test_one_rank_only_and_mixed_versions_are_warnings(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "gloo-desync" / "json" / "rank0.json", tmp_path / "rank0.json")
    diagnosis = diagnose_directory(tmp_path)
    assert (diagnosis.verdict, diagnosis.exit_code) == ("inconclusive", 3)  # gloo: nothing else to compare with
    assert diagnosis.warnings == ("only one rank's dump (rank0.json): other ranks cannot be compared with it",)
    document = json.loads((FIXTURES / "gloo-desync" / "json" / "rank1.json").read_text())
    document["version"] = "2.9"
    (tmp_path / "rank1.json").write_text(json.dumps(document))
    directory = read_directory(tmp_path)
    assert any("format version 2.9" in warning for warning in directory.warnings)
    assert any(
        "different format versions (rank0.json 2.10, rank1.json 2.9)" in warning for warning in directory.warnings
    )
    assert diagnose(directory).verdict == "desync"


def test_pickle_and_json_dumps_of_the_same_run_diagnose_alike() -> None:
    for name in ("gloo-desync", "gloo-cross", "gloo-wrapped"):
        from_pickle = diagnosis_to_json(diagnose_directory(FIXTURES / name / "pickle"))
        from_json = diagnosis_to_json(diagnose_directory(FIXTURES / name / "json"))
        for document in (from_pickle, from_json):
            document.pop("directory"), document.pop("encodings"), document.pop("warnings")  # warnings name files
            for group in document["groups"]:
                group.pop("operations"), group.pop("disagreement"), group.pop("waits")
            for position in document["positions"]:
                position["wait"] and position["wait"]["operation"].pop("frames")  # JSON dumps hold no frames
        assert from_pickle == from_json, name


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the stock analyzer needs torch")
def test_the_stock_analyzer_crashes_on_the_gloo_desync_that_lockstep_diagnoses() -> None:
    folder = FIXTURES / "gloo-desync" / "pickle"
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    assert "KeyError" in completed.stderr
    assert diagnose_directory(folder).verdict == "desync"


# ------------------------------------------------------------------------------ the command line
def test_lockstep_replay_flight_recorder_reads_every_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    import json as json_module

    from lockstep.cli import main

    root = Path(__file__).resolve().parent / "data" / "flight-recorder"
    runtime = sorted(folder for folder in root.glob("runtime-*") if folder.is_dir())  # dumps in the folder itself
    folders = sorted(folder for folder in root.glob("*/*") if folder.is_dir()) + runtime
    assert len(runtime) >= 3
    for folder in folders:
        # consistent: the live dump; the NCCL pp dumps, alone or read from the run's directory with its gloo
        # dumps (every send has its recv, the broadcast is missing). Inconclusive: the runtime's gloo dumps
        # (gloo records no members and no send/recv: the groups the ranks wait in have one poster each)
        expected = 0 if folder.parent.name.startswith("nccl-live") or "runtime-" in str(folder) else 1
        expected = 3 if folder.name in ("runtime-dp-pause", "runtime-pp-broadcast") else expected
        assert main(["replay", "--flight-recorder", str(folder)]) == expected, folder
        text = capsys.readouterr().out
        assert text.startswith(f"flight-recorder dumps in {folder}") and "verdict:" in text
        assert main(["replay", "--flight-recorder", str(folder), "--json"]) == expected
        payload = json_module.loads(capsys.readouterr().out)
        assert payload["schema_version"] == 1 and payload["directory"] == str(folder)


def test_lockstep_replay_flight_recorder_refuses_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from lockstep.cli import main

    assert main(["replay", "--flight-recorder", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "rank_0").write_bytes(b"\x80\x04\x95")  # a truncated pickle
    assert main(["replay", "--flight-recorder", str(tmp_path)]) == 2
    assert "rank_0" in capsys.readouterr().err
    assert main(["replay"]) == 2
    assert "--flight-recorder DIR" in capsys.readouterr().err


# ------------------------------------------------------------------ checked against a model
# runtime-dp-pause and runtime-pp-broadcast: real dumps of lockstep's runtime hanging (recorded with
# `lockstep run --flight-recorder` by tools/record_flight_recorder.py); see each folder's README.
def _model_check(name: str, protocol: str, variant: str, mapping: bool = True) -> object:
    from lockstep.checkers.flight_recorder.model_check import check_dumps, model_instance
    from lockstep.checkers.flight_recorder.projection import read_mapping
    from lockstep.models import get_protocol

    directory = read_directory(FIXTURES / name)  # "runtime-pp-broadcast-nccl/nccl": the mapping is one folder up
    model = model_instance(get_protocol(protocol), variant, None, len(directory.dumps))
    if not mapping:
        return check_dumps(directory, model)
    folder = next(path for path in (FIXTURES / name, (FIXTURES / name).parent) if (path / MAPPING).exists())
    mapping_file = read_mapping(folder / MAPPING)
    return check_dumps(
        directory,
        model,
        mapping=mapping_file.groups,
        acknowledged=mapping_file.acknowledged,
        runtime_only=mapping_file.runtime_only,
    )


def test_the_runtime_dp_pause_hang_is_the_pre_fix_models_hang() -> None:
    from lockstep.checkers.flight_recorder.model_check import ModelCheck

    for mapping in (True, False):  # from the run's mapping file, and guessed
        check = _model_check("runtime-dp-pause", "dp-pause", "pre-fix", mapping)
        assert isinstance(check, ModelCheck)
        assert check.verdict == "hang" and check.exit_code == 1
        assert check.violated[0] == "no_hang"
        assert check.mapping == {"2": "worker_dp", "3": "worker_world"}
        assert check.pending == ["rank 1 in forward(worker_dp)", "rank 0 in rpc(worker_world)"]
        assert check.path[-1] == "rank:0 handle_collective_rpc(rank=0)" or "handle_collective_rpc" in " ".join(
            check.path
        )
    fixed = _model_check("runtime-dp-pause", "dp-pause", "post-fix")
    assert isinstance(fixed, ModelCheck) and fixed.verdict == "diverges" and fixed.divergence is not None
    assert fixed.divergence["unmatched"][0]["communicator"] == "worker_world"
    assert "no model state posts" in fixed.divergence["reason"]


def test_the_runtime_pp_broadcast_mutant_hang_is_the_mutants_hang_and_not_the_post_fix_models() -> None:
    from lockstep.checkers.flight_recorder.model_check import ModelCheck

    check = _model_check("runtime-pp-broadcast", "pp-broadcast", "skip-disagree")
    assert isinstance(check, ModelCheck)
    assert (check.verdict, check.violated[0], check.pending) == ("hang", "no_hang", ["rank 1 in broadcast(pp)"])
    assert any("gloo records no send/recv" in note for note in check.notes)
    for variant in ("post-fix", "pre-fix"):
        other = _model_check("runtime-pp-broadcast", "pp-broadcast", variant)
        assert isinstance(other, ModelCheck) and other.verdict == "diverges" and other.exit_code == 1
        assert other.divergence is not None and "does not leave hanging" in other.divergence["reason"]


def test_a_lost_ring_buffer_prefix_becomes_wildcards_and_is_said() -> None:
    from lockstep.checkers.flight_recorder.projection import plan_projection
    from lockstep.models import get_protocol

    directory = read_directory(FIXTURES / "gloo-wrapped" / "pickle")
    machine = get_protocol("dp-pause").instance("pre-fix").machine()
    (plan,) = plan_projection(directory, machine, {"0": "worker_dp"})
    first = [entry.collective_sequence for entry in directory.dumps[0].entries][0]
    sequence = plan.sequences[(0, 0)]
    assert [operation.family for operation in sequence[: first - 1]] == [None] * (first - 1)
    assert sequence[first - 1].family == "all_reduce" and len(sequence) == 11
    assert any("starts mid-execution" in note for note in plan.notes)


def test_the_runtimes_acks_are_dropped_and_peers_kept() -> None:
    from lockstep.checkers.flight_recorder.projection import _sequence

    def entry(name: str, sequence: int) -> object:
        return read_dump_entry(name, sequence)

    sender = [entry("nccl:send 0->1", 1), entry("nccl:recv 0<-1", 2), entry("nccl:send 0->1", 3)]
    kept = _sequence(sender, acknowledged=True, point_to_point=True)  # type: ignore[arg-type]
    assert [(item.family, item.peer) for item in kept] == [("send", 1), ("send", 1)]
    plain = _sequence(sender, acknowledged=False, point_to_point=True)  # type: ignore[arg-type]
    assert [(item.family, item.peer) for item in plain] == [("send", 1), ("recv", 1), ("send", 1)]


def read_dump_entry(profiling_name: str, sequence: int) -> object:
    from lockstep.traces.flight_recorder import FlightRecorderEntry

    return FlightRecorderEntry(
        sequence,
        1,
        "1",
        "",
        0,
        sequence,
        sequence,
        profiling_name,
        ((4,),),
        ("Float",),
        ((4,),),
        ("Float",),
        "completed",
        True,
        True,
        1000,
        None,
        (),
    )


def test_lockstep_replay_flight_recorder_against_a_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from lockstep.cli import main

    folder = FIXTURES / "runtime-pp-broadcast"
    mapping = str(folder / "flight-recorder-mapping.json")
    arguments = ["replay", "--flight-recorder", str(folder), "--protocol", "pp-broadcast", "--mapping", mapping]
    assert main([*arguments, "--variant", "skip-disagree"]) == 1
    text = capsys.readouterr().out
    assert "against the model pp-broadcast skip-disagree seed: hang" in text and "violates: no_hang" in text
    assert "shortest model path into it" in text
    assert main([*arguments, "--variant", "skip-disagree", "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["model_check"]["verdict"] == "hang" and payload["model_check"]["mapping"] == {"1": "pp"}
    assert main([*arguments, "--variant", "skip-disagree", "--max-states", "5"]) == 3
    assert "raise --max-states" in capsys.readouterr().out
    bad = tmp_path / "mapping.json"
    bad.write_text('{"groups": [1]}')
    assert main([*arguments[:-1], str(bad)]) == 2
    assert "mapping.json" in capsys.readouterr().err
    assert main(["replay", "--flight-recorder", str(folder), "--mapping", mapping]) == 2
    assert "--protocol" in capsys.readouterr().err
    assert main(["replay", "--flight-recorder", str(folder), "--protocol", "no-such-protocol"]) == 2
    capsys.readouterr()


def test_lockstep_run_flight_recorder_dumps_every_rank_beside_its_trace_on_a_hang(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A real run of the pre-fix dp-pause hang (about 5 s): each rank dumps from inside, and the dumps
    check as the pre-fix model's hang."""
    pytest.importorskip("torch")
    from lockstep.cli import main

    traces = tmp_path / "traces"
    assert main(["run", "dp-pause", "--variant", "pre-fix", "--flight-recorder", "--no-replay"]) == 2
    assert "--trace-dir" in capsys.readouterr().err
    code = main(
        ["run", "dp-pause", "--variant", "pre-fix", "--hang-timeout", "1.5", "--trace-dir", str(traces)]
        + ["--flight-recorder", "--no-replay"]
    )
    assert code == 1
    capsys.readouterr()
    assert sorted(path.name for path in traces.glob("*.flight-recorder")) == [
        "rank-0.flight-recorder",
        "rank-1.flight-recorder",
    ]
    mapping = str(traces / "flight-recorder-mapping.json")
    arguments = ["replay", "--flight-recorder", str(traces), "--protocol", "dp-pause", "--mapping", mapping]
    assert main([*arguments, "--variant", "pre-fix", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["model_check"]["violated"][0] == "no_hang"
