"""Conformance replay of traces the torch reference runtime recorded: checked-in runs and fresh ones.

Every checked-in recording (tests/fixtures/traces/runtime/, one per protocol and variant, the
commands in tests/fixtures/traces/README.md) replays as its variant predicts: post-fix conforms,
pre-fix and mutants show the violation the model checker finds, and a pre-fix recording replayed
against the post-fix model diverges where the variants differ. Hand-mutated recordings (a dropped
broadcast, two causally ordered events swapped, a wrong counter value) diverge at the mutated event
with an explanation naming the false guard conjunct or the contradicted observed value; each
mutation is applied both to a checked-in recording and to a fresh run recorded here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lockstep.cli import main

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "tests" / "fixtures" / "traces" / "runtime"
Event = dict[str, Any]

# recording -> (verdict against its own variant, the property that fails or None, a sometimes-property witnessed)
VERDICTS: dict[str, tuple[str, str | None, str | None]] = {
    "dp-pause-post-fix": ("conforms", None, "resumed"),
    "dp-pause-pre-fix": ("violated", "quiescent_during_rpc", None),
    "pp-broadcast-post-fix": ("conforms", None, "L2_pipelined_prefill"),
    "pp-broadcast-pre-fix": ("violated", "no_false_dependency", None),
    "async-placeholders-post-fix": ("conforms", None, None),
    "async-placeholders-pre-fix": ("violated", "scan_cost_bounded", None),
    "computed-tokens-post-fix": ("conforms", None, None),
    "computed-tokens-pre-fix": ("violated", "U3_bounded_slack", None),
    "cudagraph-pp-post-fix": ("conforms", None, None),
    "cudagraph-pp-no-copy-in": ("violated", "A2_freshness", None),
    "pd-kv-transfer-post-fix": ("conforms", None, "transfer_completes"),
}

# pre-fix or mutant recording -> (file, action of the event where it leaves the post-fix model, text of the explanation)
AGAINST_POST_FIX: dict[str, tuple[str, str, str]] = {
    "dp-pause-pre-fix": ("rank-0.jsonl", "handle_pause", "engines_running[0] = true, but false was observed"),
    "pp-broadcast-pre-fix": ("rank-0.jsonl", "gpu_post", "gpu_post(rank=0) is not enabled"),
    "async-placeholders-pre-fix": ("rank-0.jsonl", "sample", "repair.scan_steps = 2, but 3 was observed"),
    "computed-tokens-pre-fix": (
        "rank-0.jsonl",
        "sample_tokens",
        "runner.num_computed_tokens_np[0] = [0], but [1] was observed",
    ),
    "cudagraph-pp-no-copy-in": ("rank-1.jsonl", "prepare_inputs", "persistent[1] = [0, 0], but [-1, -1] was observed"),
}


def replay_json(capsys: pytest.CaptureFixture[str], folder: Path, *options: str) -> tuple[int, dict[str, Any]]:
    """``lockstep replay FOLDER --json`` under the runtime's recorder profile (its headers' values are its own)."""
    code = main(["replay", str(folder), "--json", "--profile", "runtime", *options])
    captured = capsys.readouterr()
    assert captured.out, captured.err
    return code, json.loads(captured.out)


def read(path: Path) -> tuple[Event, list[Event]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    return lines[0], lines[1:]


def write(path: Path, header: Event, events: list[Event]) -> None:
    """Write ``events`` after ``header``, renumbering their indices 0, 1, 2, ... as a recorder would."""
    path.write_text(
        "".join(
            json.dumps(line) + "\n" for line in [header, *({**event, "index": i} for i, event in enumerate(events))]
        )
    )


def record(tmp_path_factory: pytest.TempPathFactory, protocol: str, *arguments: str) -> Path:
    """A fresh run of the runtime (``lockstep run ... --trace-dir``): real processes, real gloo collectives."""
    folder = tmp_path_factory.mktemp(protocol) / "traces"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            protocol,
            *arguments,
            "--hang-timeout",
            "10",
            "--trace-dir",
            str(folder),
            "--no-replay",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert json.loads(completed.stdout)["outcome"] == "completed"
    return folder


@pytest.fixture(scope="module")
def fresh_pp_broadcast(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory, "pp-broadcast", "--scenario", "seed")


@pytest.fixture(scope="module")
def fresh_dp_pause(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory, "dp-pause", "--sync-interval", "2")


# ------------------------------------------------------------------------------ checked-in recordings
@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_each_recording_replays_as_its_variant_predicts(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    folder = RECORDINGS / name
    for path in folder.glob("*.jsonl"):  # recorded by the runtime, not written by hand
        header, events = read(path)
        assert header["source"]["kind"] == "runtime" and header["source"]["torch"], path
        assert events and f"{header['protocol']}-{header['variant']}" == name
    verdict, failing, witness = VERDICTS[name]
    code, result = replay_json(capsys, folder)
    assert (result["verdict"], result["property"]) == (verdict, failing), result
    assert code == (0 if verdict == "conforms" else 1)
    assert (
        result["longest_conforming_prefix"]
        == result["events"]
        == sum(len(read(path)[1]) for path in folder.glob("*.jsonl"))
    )
    if witness is not None:
        assert witness in result["witnessed"]


@pytest.mark.parametrize("name", sorted(AGAINST_POST_FIX))
def test_a_pre_fix_recording_diverges_from_post_fix_where_the_variants_differ(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file, action, why = AGAINST_POST_FIX[name]
    code, result = replay_json(capsys, RECORDINGS / name, "--variant", "post-fix")
    assert code == 1 and result["verdict"] == "diverges", result
    explanation = result["explanation"]
    assert Path(explanation["file"]).name == file and explanation["event"]["action"] == action
    assert why in json.dumps(explanation["candidates"])
    assert result["longest_conforming_prefix"] == result["event"]
    # the prefix before that event is common to both variants: the pre-fix model takes the event
    own_code, own = replay_json(capsys, RECORDINGS / name)
    assert own["longest_conforming_prefix"] > result["event"]


# ------------------------------------------------------------------------------------ mutations
Mutation = Callable[
    [Path], tuple[str, int]
]  # mutates a copied recording; returns (file, line the divergence must name)


def drop_broadcast(rank: int) -> Mutation:
    """Drop ``rank``'s ``enter`` and ``complete`` of its first broadcast on ``pp``."""

    def mutate(folder: Path) -> tuple[str, int]:
        path = folder / f"rank-{rank}.jsonl"
        header, events = read(path)
        position = next(
            i
            for i, event in enumerate(events)
            if event["action"] == "enter" and event["args"] == {"communicator": "pp", "op": "broadcast"}
        )
        assert (
            events[position + 1]["action"] == "complete" and events[position + 1]["clock"] == events[position]["clock"]
        )
        write(path, header, events[:position] + events[position + 2 :])
        if rank == 0:  # the broadcaster's next step needs its broadcast done: it is where the replay stops
            return path.name, position + 2
        rank_0 = read(folder / "rank-0.jsonl")[1]  # rank 0's complete needs rank 1's enter
        matching = next(
            i
            for i, event in enumerate(rank_0)
            if event["action"] == "complete" and event["clock"] == events[position]["clock"]
        )
        return "rank-0.jsonl", matching + 2

    return mutate


def swap_before_pause(folder: Path) -> tuple[str, int]:
    """Swap a rank's ``handle_pause`` with the event before it (the ADD it handles first, or the PAUSE's arrival)."""
    for path in sorted(folder.glob("rank-*.jsonl")):
        header, events = read(path)
        position = next((i for i, event in enumerate(events) if event["action"] == "handle_pause"), None)
        if position is not None:
            assert events[position - 1]["action"] in ("handle_add", "arrive_from_client")
            events[position - 1], events[position] = events[position], events[position - 1]
            write(path, header, events)
            return path.name, position + 1  # handle_pause now sits on line `position + 1`
    raise AssertionError("no rank handled the pause")


def wrong_step_counter(folder: Path) -> tuple[str, int]:
    """Observe ``step_counter[r]`` = 0 where the rank's counter first reached 1."""
    for path in sorted(folder.glob("rank-*.jsonl")):
        header, events = read(path)
        key = f"step_counter[{path.stem.split('-')[1]}]"
        position = next((i for i, event in enumerate(events) if event.get("observed", {}).get(key) == 1), None)
        if position is not None:
            events[position]["observed"][key] = 0
            write(path, header, events)
            return path.name, position + 2
    raise AssertionError("no rank's step counter reached 1")


# mutation -> (recording, how, the explanation's reason, texts its candidates' explanation must hold)
MUTATIONS: dict[str, tuple[str, Mutation, str, tuple[str, ...]]] = {
    "broadcaster drops its broadcast": (
        "pp-broadcast-post-fix",
        drop_broadcast(0),
        "no candidate state enables gpu_complete for rank:0",
        ("gpu_complete(rank=0) is not enabled: (len(pp.queue[rank]) == 0) is false", "pp.queue = [<broadcast("),
    ),
    "receiver drops its broadcast": (
        "pp-broadcast-post-fix",
        drop_broadcast(1),
        "no candidate state agrees with rank:0 complete",
        ("member 0's op on pp has not completed (pp.queue[0] = <broadcast(",),
    ),
    "handle_pause swapped before its cause": (
        "dp-pause-post-fix",
        swap_before_pause,
        "no candidate state enables handle_pause for rank:",
        ("is not enabled: ((input_queue[rank][0].kind == PAUSE)", "is false (input_queue = ["),
    ),
    "wrong step_counter": (
        "dp-pause-post-fix",
        wrong_step_counter,
        "the observed values contradict every successor",
        ("step_counter[", "= 1, but 0 was observed"),
    ),
}


@pytest.mark.parametrize("source", ["checked-in", "fresh"])
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_mutated_recording_diverges_at_the_mutation(
    mutation: str, source: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    name, mutate, reason, texts = MUTATIONS[mutation]
    if source == "checked-in":
        original = RECORDINGS / name
    else:
        original = request.getfixturevalue(
            "fresh_pp_broadcast" if name.startswith("pp-broadcast") else "fresh_dp_pause"
        )
    folder = tmp_path / "mutated"
    shutil.copytree(original, folder)
    file, line = mutate(folder)
    code, result = replay_json(capsys, folder)
    assert code == 1 and result["verdict"] == "diverges", result
    explanation = result["explanation"]
    assert (Path(explanation["file"]).name, explanation["line"]) == (file, line), explanation
    assert reason in explanation["reason"]
    why = json.dumps(explanation["candidates"])
    for text in texts:
        assert text in why, why
    assert result["longest_conforming_prefix"] == result["event"]


def test_a_fresh_run_conforms(
    fresh_pp_broadcast: Path, fresh_dp_pause: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder, witness in ((fresh_pp_broadcast, "L2_pipelined_prefill"), (fresh_dp_pause, "resumed")):
        code, result = replay_json(capsys, folder)
        assert code == 0 and result["verdict"] == "conforms", result
        assert result["events"] == sum(len(read(path)[1]) for path in folder.glob("*.jsonl")) > 0
        assert witness in result["witnessed"]


@pytest.mark.parametrize("name", ["dp-pause-post-fix", "pp-broadcast-post-fix"])
def test_a_runtime_recording_without_its_profile_is_told_to_use_profile_runtime(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its header holds the runtime's values (``settle_before_resume`` 0, ``hang_bound`` 64), not the
    default instance's: the refusal names the profile that gives them, which then replays it."""
    code = main(["replay", str(RECORDINGS / name), "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and "header: parameters." in error and "--profile runtime" in error, error
    code, result = replay_json(capsys, RECORDINGS / name)
    assert code == 0 and result["verdict"] == "conforms", result
    # a model counterexample is no recording: no profile gives its values, and the message names none
    counterexample = ROOT / "tests" / "fixtures" / "traces" / "dp-pause-pre-fix-seed.jsonl"
    code = main(["replay", str(counterexample), "--json", "--set", "hang_bound=3"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and "--trust-header" in error and "--profile" not in error, error
