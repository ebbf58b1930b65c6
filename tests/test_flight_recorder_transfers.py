"""Send/recv matching, the NCCL pp-broadcast fixture, strict mappings, the JSON schema of
``replay --flight-recorder`` and the runtime's dumps from a ``RankPool``.

``tests/data/flight-recorder/runtime-pp-broadcast-nccl`` is a real 2-GPU NCCL run of the
pp-broadcast ``skip-disagree`` hang (torch 2.11, NCCL 2.28.9, see its README). The synthetic
dumps here are those real dumps with entries taken out or changed, written back as pickles of
the same containers the reader parses.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lockstep.checkers.flight_recorder.diagnosis import diagnose_directory
from lockstep.cli import main
from lockstep.cli.flight_recorder_report import diagnosis_to_json, render
from lockstep.traces.flight_recorder import restricted_loads

ROOT = Path(__file__).resolve().parent.parent
NCCL = ROOT / "tests" / "data" / "flight-recorder" / "runtime-pp-broadcast-nccl"
MAPPING = NCCL / "flight-recorder-mapping.json"


def nccl_documents() -> dict[int, dict[str, Any]]:
    documents = {}
    for rank in (0, 1):
        path = NCCL / "nccl" / f"rank-{rank}.flight-recorder"
        document = restricted_loads(path.read_bytes(), path)
        assert isinstance(document, dict)
        documents[rank] = document
    return documents


def write_dumps(folder: Path, documents: dict[int, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, document in documents.items():
        (folder / f"rank-{rank}.flight-recorder").write_bytes(pickle.dumps(document, protocol=2))
    return folder


def test_the_nccl_pp_dumps_pair_every_send_with_its_recv() -> None:
    diagnosis = diagnose_directory(NCCL / "nccl")
    assert (diagnosis.verdict, diagnosis.exit_code) == ("consistent", 0)
    (group,) = diagnosis.groups
    assert (group.key, group.backend, group.members, group.members_source) == ("1", "nccl", (0, 1), "pg_config")
    channels = [(transfer.source, transfer.destination, transfer.number) for transfer in group.transfers]
    assert channels == [(0, 1, 1), (0, 1, 2), (1, 0, 1), (1, 0, 2)]  # the tensors 0->1 and the acks 1->0
    assert all(transfer.matched and transfer.send and transfer.recv for transfer in group.transfers)
    first = group.transfers[0]
    assert first.send is not None and first.recv is not None
    assert (first.send.rank, first.recv.rank, first.send.entries[0].input_sizes) == (0, 1, ((64, 512),))
    assert group.waits == () and all(position.wait is None for position in diagnosis.positions)
    text = render(diagnosis, operations=True)
    assert "consistent, 4 send/recv pairs matched" in text and "send 0->1#1 [[64, 512]] Float completed" in text
    payload = diagnosis_to_json(diagnosis)
    assert [item["problem"] for item in payload["groups"][0]["transfers"]] == [None] * 4
    # the run's directory: the CPU recorder's dumps (only the default group's start-up broadcasts) read
    # with the NCCL recorder's in nccl/
    assert [group.key for group in diagnose_directory(NCCL).groups] == ["0", "1"]


def test_the_nccl_pp_dumps_against_the_model_say_what_a_dump_without_the_broadcast_can_tell() -> None:
    """Rank 1's pending broadcast is not in the dump (its communicator was made lazily, see the
    README): the dumps are two completed transfers, which skip-disagree (and post-fix) can post
    with nothing pending, so the check says consistent, not hang; pre-fix would have broadcast
    between the two transfers, so it diverges."""
    from lockstep.checkers.flight_recorder.model_check import check_dumps, model_instance
    from lockstep.checkers.flight_recorder.projection import read_mapping
    from lockstep.models import get_protocol
    from lockstep.traces.flight_recorder import read_directory

    directory = read_directory(NCCL / "nccl")
    mapping = read_mapping(MAPPING)
    assert (mapping.groups, mapping.runtime_only) == ({"1": "pp", "2": "pp_cpu"}, ("pp_cpu",))
    results = {}
    for variant in ("skip-disagree", "post-fix", "pre-fix"):
        results[variant] = check_dumps(
            directory,
            model_instance(get_protocol("pp-broadcast"), variant, None, 2),
            mapping=mapping.groups,
            mapping_file=str(MAPPING),
            acknowledged=mapping.acknowledged,
            runtime_only=mapping.runtime_only,
        )
    mutant = results["skip-disagree"]
    assert (mutant.verdict, mutant.exit_code, mutant.mapping, mutant.pending) == ("consistent", 0, {"1": "pp"}, [])
    assert [step for step in mutant.path if "pp.transfer" in step] == ["group:pp pp.transfer(sender=0, receiver=1)"] * 2
    assert any("'pp_cpu' is a runtime-only group" in note for note in mutant.notes)
    assert results["post-fix"].verdict == "consistent"
    fixed = results["pre-fix"]
    assert fixed.verdict == "diverges" and fixed.divergence is not None
    assert "nccl:send 0->1#3 as op #3 of rank 0 on pp" in fixed.divergence["reason"]


@pytest.mark.parametrize(
    ("change", "verdict", "problem", "summary"),
    [
        # rank 1 never posts its second recv (nor the ack after it); rank 0's second send stays pending
        ("drop-recv", "hang", "send without recv", "rank 0 in send 0->1#3 of group 1; rank 1: nothing pending"),
        # rank 0 never posts its second send; rank 1's second recv stays pending
        ("drop-send", "hang", "recv without send", "rank 0: nothing pending; rank 1 in recv 1<-0#3 of group 1"),
        # rank 1 receives into a buffer of another shape; neither op completes
        (
            "resize-recv",
            "desync",
            "different sizes",
            "rank 0 in send 0->1#3 of group 1; rank 1 in recv 1<-0#3 of group 1",
        ),
    ],
)
def test_a_send_without_its_recv_and_the_converse_are_found(
    tmp_path: Path, change: str, verdict: str, problem: str, summary: str
) -> None:
    documents = nccl_documents()
    sender, receiver = documents[0]["entries"], documents[1]["entries"]
    if change == "drop-recv":
        del receiver[2:]
        del sender[3:]
        sender[2]["state"] = "scheduled"
    elif change == "drop-send":
        del sender[2:]
        del receiver[3:]
        receiver[2]["state"] = "scheduled"
    else:
        del sender[3:]
        del receiver[3:]
        receiver[2]["input_sizes"] = [[64, 512]]
        sender[2]["state"] = receiver[2]["state"] = "scheduled"
    folder = write_dumps(tmp_path / change, documents)
    diagnosis = diagnose_directory(folder)
    (group,) = diagnosis.groups
    problems = [
        (transfer.source, transfer.number, transfer.problem) for transfer in group.transfers if transfer.problem
    ]
    assert problems == [(0, 2, problem)]
    assert (diagnosis.verdict, diagnosis.summary) == (verdict, summary)
    text = render(diagnosis)
    assert f"{problem}: transfer 2 from rank 0 to rank 1" in text
    assert main(["replay", "--flight-recorder", str(folder)]) == 1


def test_a_channel_whose_peer_has_no_dump_is_not_paired(tmp_path: Path) -> None:
    documents = nccl_documents()
    folder = write_dumps(tmp_path / "one", {0: documents[0]})
    (group,) = diagnose_directory(folder).groups
    assert group.transfers == ()
    assert any("not paired: no dump for rank 1" in note for note in group.notes)


def test_a_mapping_entry_naming_no_communicator_is_refused_unless_declared_runtime_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(MAPPING.read_text())
    arguments = ["replay", "--flight-recorder", str(NCCL / "nccl"), "--protocol", "pp-broadcast"]
    arguments += ["--variant", "skip-disagree", "--mapping"]
    undeclared = tmp_path / "undeclared.json"
    undeclared.write_text(json.dumps({**document, "runtime_only": []}))
    assert main([*arguments, str(undeclared)]) == 2
    error = capsys.readouterr().err
    assert "undeclared.json" in error and 'entry "2": "pp_cpu" is no communicator of the model' in error
    assert "Traceback" not in error
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"groups": {"1": "ppp"}, "runtime_only": ["pp_cpu"]}))
    assert main([*arguments, str(typo)]) == 2
    assert 'entry "1": "ppp"' in capsys.readouterr().err
    assert main([*arguments, str(MAPPING)]) == 0
    assert "runtime-only group" in capsys.readouterr().out


def test_replay_flight_recorder_json_follows_the_replay_schema(capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads((ROOT / "lockstep" / "schemas" / "replay.schema.json").read_text())
    validator = jsonschema.validators.validator_for(document)(document)
    gloo = ROOT / "tests" / "data" / "flight-recorder" / "runtime-pp-broadcast"
    runs = [
        (["--flight-recorder", str(NCCL / "nccl")], 0),
        (["--flight-recorder", str(NCCL / "nccl"), "--protocol", "pp-broadcast", "--variant", "pre-fix"], 1),
        (["--flight-recorder", str(gloo), "--protocol", "pp-broadcast", "--variant", "skip-disagree"], 1),
        (["--flight-recorder", str(ROOT / "tests" / "data" / "flight-recorder" / "gloo-desync" / "pickle")], 1),
    ]
    for arguments, code in runs:
        assert main(["replay", *arguments, "--json"]) == code
        payload = json.loads(capsys.readouterr().out)
        validator.validate(payload)
    assert payload["groups"] and "model_check" not in payload
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**payload, "model_check": {"verdict": "maybe"}})


def test_the_recording_tool_copies_every_dump_and_names_what_is_missing(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import record_flight_recorder
    finally:
        sys.path.remove(str(ROOT / "tools"))
    traces = tmp_path / "traces"
    (traces / "nccl").mkdir(parents=True)
    for rank in (0, 1):
        (traces / f"rank-{rank}.flight-recorder").write_bytes(b"\x80")
    (traces / "nccl" / "rank-0.flight-recorder").write_bytes(b"\x80")
    (traces / "rank-1.flight-recorder.error").write_text("rank 1: no flight-recorder dump: RuntimeError: boom\n")
    (traces / "flight-recorder-mapping.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"nccl/rank-1\.flight-recorder(.|\n)*RuntimeError: boom"):
        record_flight_recorder.collect_dumps(traces, tmp_path / "out", 2, "nccl", wait=0.2)
    (traces / "nccl" / "rank-1.flight-recorder").write_bytes(b"\x80")
    kept = record_flight_recorder.collect_dumps(traces, tmp_path / "out", 2, "nccl", wait=0.2)
    assert len(kept) == 6
    copied = sorted(str(path.relative_to(tmp_path / "out")) for path in (tmp_path / "out").rglob("*"))
    assert "nccl/rank-1.flight-recorder" in copied and "rank-1.flight-recorder.error" in copied


def test_a_rank_pool_run_dumps_every_rank_on_a_hang(tmp_path: Path) -> None:
    """A real pooled run of the pre-fix dp-pause hang (a few seconds): the pool's ranks dump too."""
    pytest.importorskip("torch")
    import argparse

    from lockstep.impl.arguments import add_run_arguments, config_from_arguments
    from lockstep.impl.launcher import HANG
    from lockstep.impl.pool import RankPool

    traces = tmp_path / "traces"
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    # a generous hang timeout: the hang is real, and on a loaded machine a short one fires elsewhere
    flags = ["dp-pause", "--variant", "pre-fix", "--hang-timeout", "10", "--trace-dir", str(traces)]
    config = config_from_arguments(parser.parse_args([*flags, "--flight-recorder"]))
    with RankPool("dp-pause", 2, timeout=10, flight_recorder=True) as pool:
        outcome = pool.run(config)
    assert outcome.outcome == HANG
    assert sorted(path.name for path in traces.glob("rank-*.flight-recorder")) == [
        "rank-0.flight-recorder",
        "rank-1.flight-recorder",
    ]
    assert json.loads((traces / "flight-recorder-mapping.json").read_text())["runtime_only"] == []
    assert diagnose_directory(traces).groups
