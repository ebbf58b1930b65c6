"""Exports people can read, and `--model-file` wherever a model is named (issue 37).

Perfetto slices titled by action with the state in their arguments, an instant event where the run
goes wrong and counter tracks of what the violated property reads; ITF with Quint's
``mbt::actionTaken`` and ``mbt::nondetPicks``, read back by the ``itf-py`` package; DOT
counterexamples titled with the violated property, each state listing its step's changes; ``graph``
filling violating states red; ``check``'s JSON counterexample with its states; and a model file's
counterexample shown, exported and graphed with ``--model-file``. Each is checked against the model
that produced the trace (``lockstep.checkers.check``), not against the exporter's own output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import itf_py
import jsonschema
import networkx as nx
import pydot
import pytest

from lockstep.checkers import check
from lockstep.checkers.counterexample import rows
from lockstep.cli import main
from lockstep.cli.report import result_json
from lockstep.models import get_protocol
from lockstep.models.external import load_model_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
COUNTEREXAMPLE = FIXTURES / "dp-pause-pre-fix-seed.jsonl"  # quiescent_during_rpc, 17 steps
RECORDING = FIXTURES / "runtime" / "dp-pause-pre-fix"  # `lockstep run dp-pause --variant pre-fix`
DOC = ROOT / "docs" / "adding-a-protocol.md"

# A model whose actions pick enum members (no integers): itf-py 0.5 decodes Quint's `Some` of a
# string, not of a `{"#bigint": ...}` (it builds a namedtuple from the value's keys).
HANDOFF = '''"""handoff: a token given between two holders, at most once (an example model)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.spec.actions import action
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, Protocol, VariantSpec
from lockstep.spec.sorts import enum, integers
from lockstep.spec.terms import Term

Holder = enum("Holder", ["LEFT", "RIGHT"])


@dataclass(frozen=True)
class State:
    holder: Term
    gives: Term


@action(actor="desk")
def give(state: State, variant: str, to: Term) -> Step:
    """Hand the token to ``to`` (pre-fix: as often as asked)."""
    limit = 3 if variant == "pre-fix" else 1
    return Step((state.holder != to) & (state.gives < limit), {state.holder: to, state.gives: state.gives + 1})


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    machine = Machine(f"handoff/{variant}")
    state = State(machine.variable("holder", Holder, 0), machine.variable("gives", integers(0, 3), 0))
    machine.add(give, state, variant, to=Holder)
    machine.set_final(state.gives >= 1)
    machine.always("given_once", state.gives <= 1, "the token changes hands at most once")
    return machine


PROTOCOL = Protocol(
    name="handoff",
    title="a token given at most once",
    change="example",
    variants=(VariantSpec("pre-fix", "gives freely", "v1"), VariantSpec("post-fix", "gives once", "v2")),
    parameters=(),
    instances=(InstanceSpec("seed", "two holders", {}, {"pre-fix": "violated", "post-fix": "holds"}),),
    build=build,
)
'''


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def events_of(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()[1:] if line.strip()]


def reference_path() -> Any:
    """The model's own counterexample that COUNTEREXAMPLE records, with its machine."""
    result = check(get_protocol("dp-pause").instance("pre-fix"))
    path = result.property_result("quiescent_during_rpc").path
    assert path is not None and path.length == len(events_of(COUNTEREXAMPLE))
    return result.machine, path


@pytest.fixture
def early_stop(tmp_path: Path) -> Path:
    """docs/adding-a-protocol.md's example model, as the document has it."""
    file = tmp_path / "early_stop.py"
    file.write_text(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0])
    return file


def test_perfetto_slices_are_titled_by_action_with_the_state_in_their_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "perfetto")
    assert code == 0
    slices = [event for event in json.loads(out)["traceEvents"] if event["ph"] == "X"]
    events = events_of(COUNTEREXAMPLE)
    assert [item["name"] for item in slices] == [event["action"] for event in events]
    for item, event in zip(slices, events):
        assert item["args"]["observed"] == event["observed"]  # the state changes: in the arguments
        assert all(item["args"][name] == value for name, value in event["args"].items())


def test_perfetto_marks_the_violation_and_counts_what_the_property_reads(capsys: pytest.CaptureFixture[str]) -> None:
    """quiescent_during_rpc reads `mode`: one counter track whose samples follow the model's states."""
    machine, path = reference_path()
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "perfetto")
    assert code == 0
    document = json.loads(out)["traceEvents"]
    (instant,) = [event for event in document if event["ph"] == "i"]
    last = max(event["ts"] for event in document if event["ph"] == "X")
    assert instant["args"]["property"] == "quiescent_during_rpc" and instant["ts"] > last
    assert instant["args"]["description"] == machine.property_named("quiescent_during_rpc").description
    counters = [event for event in document if event["ph"] == "C"]
    assert {event["name"].split(" ")[0] for event in counters} == {"mode"}
    members = machine.variables["mode"].sort.value.members
    assert all(f"{position}={member}" in counters[0]["name"] for position, member in enumerate(members))
    position = list(machine.variables).index("mode")
    states = [path.initial, *(step.state for step in path.steps)]
    # a sample at each change, after the step that made it; the last one is the violating state's
    changed = [
        0,
        *(number for number in range(1, len(states)) if states[number][position] != states[number - 1][position]),
    ]
    assert [event["ts"] for event in counters] == [number * 10 for number in changed]
    for event, number in zip(counters, changed):
        assert event["args"] == {f"[{rank}]": value for rank, value in enumerate(states[number][position])}


def test_perfetto_of_a_recording_marks_where_replay_finds_the_violation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "replay", str(RECORDING), "--profile", "runtime", "--json")
    verdict = json.loads(out)
    assert code == 1 and verdict["verdict"] == "violated"
    code, out, _ = run(capsys, "export", str(RECORDING), "--profile", "runtime", "--format", "perfetto")
    assert code == 0
    document = json.loads(out)["traceEvents"]
    (instant,) = [event for event in document if event["ph"] == "i"]
    assert (instant["args"]["after event"], instant["args"]["property"]) == (verdict["event"], verdict["property"])
    (marked,) = [event for event in document if event.get("cname") == "terrible"]
    assert marked["args"]["index"] == verdict["event"]
    # the recording observes map entries (mode[1]): the counter follows them
    final = [event for event in document if event["ph"] == "C"][-1]
    assert final["ts"] == instant["ts"] and final["args"]["[1]"] != 0


def test_itf_states_carry_quints_action_taken_and_nondet_picks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "itf")
    assert code == 0
    document = json.loads(out)
    assert document["vars"][-2:] == ["mbt::actionTaken", "mbt::nondetPicks"]
    states = document["states"]
    assert (states[0]["mbt::actionTaken"], states[0]["mbt::nondetPicks"]) == ("init", {})
    for state, event in zip(states[1:], events_of(COUNTEREXAMPLE), strict=True):
        assert state["mbt::actionTaken"] == event["action"]
        assert state["mbt::nondetPicks"] == {
            name: {"tag": "Some", "value": {"#bigint": str(value)}} for name, value in event["args"].items()
        }


def test_itf_py_reads_the_action_taken_from_an_export(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "handoff.py"
    model.write_text(HANDOFF)
    monkeypatch.chdir(tmp_path)
    code, _, _ = run(capsys, "check", "--model-file", str(model), "--variant", "pre-fix")
    (trace,) = (tmp_path / "lockstep-out").glob("*.jsonl")
    assert code == 1 and [event["action"] for event in events_of(trace)] == ["give", "give"]
    output = tmp_path / "handoff.itf.json"
    code, _, _ = run(capsys, "export", str(trace), "--model-file", str(model), "--format", "itf", "-o", str(output))
    assert code == 0
    read = itf_py.trace_from_json(json.loads(output.read_text()))
    assert [state.values["mbt::actionTaken"] for state in read.states] == ["init", "give", "give"]
    assert [state.values["mbt::nondetPicks"].to.value for state in read.states[1:]] == ["RIGHT", "LEFT"]
    assert [state.values["gives"] for state in read.states] == [0, 1, 2]


def test_dot_counterexample_names_the_violated_property_and_each_steps_changes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    machine, path = reference_path()
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "dot")
    assert code == 0
    (graph,) = pydot.graph_from_dot_data(out)
    title = json.loads(graph.get_label())
    assert "quiescent_during_rpc is violated" in title
    assert machine.property_named("quiescent_during_rpc").description in title
    nodes = {node.get_name(): node for node in graph.get_nodes()}
    for row in rows(machine, path):
        lines = json.loads(nodes[str(row.index)].get_label()).split("\n")
        assert lines == [
            str(row.index),
            *(f"{change.variable}: {change.before} → {change.after}" for change in row.changes),
        ]
    violating = [node for node in graph.get_nodes() if node.get("fillcolor")]
    assert {node.get_name() for node in violating} == {str(path.length)}


def test_graph_fills_the_states_that_violate_a_safety_property(
    capsys: pytest.CaptureFixture[str], early_stop: Path, tmp_path: Path
) -> None:
    protocol = load_model_file(early_stop)
    for variant, red in (("pre-fix", True), ("post-fix", False)):
        output = tmp_path / f"{variant}.graphml"
        code, _, err = run(
            capsys,
            "graph",
            "--model-file",
            str(early_stop),
            "--variant",
            variant,
            "--format",
            "graphml",
            "-o",
            str(output),
        )
        assert code == 0
        graph = nx.read_graphml(output)
        violates = {node: data["violates"] for node, data in graph.nodes(data=True) if data["violates"]}
        result = check(protocol.instance(variant))
        violated = {
            item.name for item in result.properties if item.verdict.value == "violated" and item.kind.value == "always"
        }
        assert bool(violates) is red and ("violating a safety property" in err) is red
        assert {name for names in violates.values() for name in names.split(", ")} == violated
    code, out, _ = run(capsys, "graph", "--model-file", str(early_stop), "--variant", "pre-fix", "--format", "dot")
    (dot,) = pydot.graph_from_dot_data(out)
    red_nodes = [node for node in dot.get_nodes() if node.get("fillcolor")]
    assert red_nodes and all("violates no_hang" in json.loads(node.get_label()) for node in red_nodes)


def test_graph_takes_set_and_ranks(capsys: pytest.CaptureFixture[str], early_stop: Path, tmp_path: Path) -> None:
    instance = load_model_file(early_stop).instance("post-fix", overrides={"budget": 2}, ranks=3)
    states = check(instance).stats.states
    output = tmp_path / "graph.graphml"
    arguments = ["--model-file", str(early_stop), "--variant", "post-fix", "--format", "graphml", "-o", str(output)]
    code, _, err = run(capsys, "graph", *arguments, "--ranks", "3", "--set", "budget=2")
    assert code == 0 and nx.read_graphml(output).number_of_nodes() == states, err
    assert states != check(load_model_file(early_stop).instance("post-fix")).stats.states


def test_check_json_counterexample_carries_its_states_when_asked() -> None:
    instance = get_protocol("dp-pause").instance("pre-fix")
    result = check(instance)
    counterexample = result.counterexample
    assert counterexample is not None and counterexample.path is not None
    path, machine = counterexample.path, result.machine
    schema = json.loads((ROOT / "lockstep" / "schemas" / "check.schema.json").read_text())
    plain = result_json(result, instance, None)
    assert "initial_state" not in plain["counterexample"] and "state" not in plain["counterexample"]["steps"][0]
    payload = json.loads(json.dumps(result_json(result, instance, None, states=True)))
    jsonschema.validate(payload, schema)
    shown = [
        payload["counterexample"]["initial_state"],
        *(step["state"] for step in payload["counterexample"]["steps"]),
    ]
    names = [name for name, variable in machine.variables.items() if not variable.monitor]
    for state, reference in zip(shown, [path.initial, *(step.state for step in path.steps)], strict=True):
        assert list(state) == names
        for name in names:
            sort = machine.variables[name].sort
            assert state[name] == sort.to_json(reference[list(machine.variables).index(name)])


def test_a_model_files_counterexample_is_shown_exported_and_graphed_with_model_file(
    capsys: pytest.CaptureFixture[str], early_stop: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, _ = run(capsys, "check", "--model-file", str(early_stop), "--variant", "pre-fix")
    (trace,) = (tmp_path / "lockstep-out").glob("*.jsonl")
    assert code == 1
    model = ["--model-file", str(early_stop)]
    code, out, err = run(capsys, "show", str(trace), *model)
    assert code == 0 and err == "" and "no_hang is violated at step 7" in out and "phase[0]: READY → STOPPED" in out
    code, out, _ = run(capsys, "export", str(trace), *model, "--format", "itf")
    assert code == 0 and [state["mbt::actionTaken"] for state in json.loads(out)["states"]][-1] == "stop_locally"
    code, out, err = run(capsys, "export", str(trace), *model, "--format", "dot")
    assert code == 0 and err == "" and "no_hang is violated" in out
    code, out, err = run(capsys, "export", str(trace), *model, "--format", "perfetto")
    assert code == 0 and [
        event["args"]["property"] for event in json.loads(out)["traceEvents"] if event["ph"] == "i"
    ] == ["no_hang"]
    code, out, _ = run(capsys, "show", str(trace), *model, "--html")
    assert code == 0 and "stop_locally" in out
    code, _, _ = run(capsys, "graph", *model, "--variant", "pre-fix", "--format", "dot", "-o", str(tmp_path / "g.dot"))
    assert code == 0 and "violates no_hang" in (tmp_path / "g.dot").read_text()
    # the file's protocol is named early-stop: another name with it is a usage error; -o never overwrites it
    code, _, err = run(capsys, "export", str(trace), *model, "--protocol", "dp-pause", "--format", "dot")
    assert code == 2 and "defines protocol 'early-stop'" in err
    code, _, err = run(capsys, "export", str(trace), *model, "--format", "dot", "-o", str(early_stop))
    assert code == 2 and "would overwrite" in err and "PROTOCOL" in early_stop.read_text()


CLAIMED = '''"""computed-tokens whose post-fix also claims that no request computes a token: false in any run."""

import dataclasses

from lockstep.models import get_protocol
from lockstep.spec.overlay import Overlay
from lockstep.spec.terms import all_of

BASE = get_protocol("computed-tokens")
CLAIM = Overlay(BASE, base="post-fix", name="claimed")


@CLAIM.property
def nothing_computed(machine, state):
    machine.always("nothing_computed", all_of(state.Request, lambda q: state.computed[q] == 0), "no token is computed")


def build(variant, parameters):
    return CLAIM.build(parameters) if variant == "post-fix" else BASE.build(variant, parameters)


PROTOCOL = dataclasses.replace(BASE, build=build)  # named computed-tokens: the runtime runs it
'''


def test_test_runtime_takes_a_model_file_and_judges_the_runs_by_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The file's model gives the goals and judges the run: its extra claim fails in the real run."""
    model = tmp_path / "claimed.py"
    model.write_text(CLAIMED)
    arguments = ["--variant", "post-fix", "--max-paths", "1", "--hang-timeout", "30", "--json"]
    code, out, err = run(
        capsys, "test-runtime", "--model-file", str(model), *arguments, "--trace-dir", str(tmp_path / "file")
    )
    result = json.loads(out)
    assert code == 1 and result["verdict"] == "violation", err
    assert [item["replay"]["property"] for item in result["runs"]] == ["nothing_computed"]
    assert any("nothing_computed" in goal["label"] for goal in result["goals"])
    # the built-in model of that name holds for the same kind of run
    code, out, err = run(
        capsys, "test-runtime", "computed-tokens", *arguments, "--trace-dir", str(tmp_path / "built-in")
    )
    assert code == 0 and json.loads(out)["verdict"] == "consistent", err


def test_check_json_states_carries_the_counterexample_states(tmp_path: Path) -> None:
    import subprocess
    import sys

    lockstep = Path(sys.executable).parent / "lockstep"
    arguments = [str(lockstep), "check", "pp-broadcast", "--variant", "pre-fix", "--json"]
    plain = json.loads(subprocess.run(arguments, capture_output=True, text=True, cwd=tmp_path).stdout)
    with_states = json.loads(
        subprocess.run([*arguments, "--json-states"], capture_output=True, text=True, cwd=tmp_path).stdout
    )
    assert "initial_state" not in plain["counterexample"]
    counterexample = with_states["counterexample"]
    assert counterexample["initial_state"] and all("state" in step for step in counterexample["steps"])
