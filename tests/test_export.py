"""`lockstep show`, `export` (Perfetto, ITF, DOT, GraphML) and `graph`, each checked against its format's rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import networkx as nx
import pydot
import pytest

from lockstep.checkers import check
from lockstep.cli import main
from lockstep.models import get_protocol
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, MapSort, RecordSort, SequenceSort, Sort
from lockstep.spec.trace_values import decode

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "traces"
COUNTEREXAMPLE = FIXTURES / "dp-pause-pre-fix-seed.jsonl"
RUNTIME = FIXTURES / "runtime" / "dp-pause-post-fix"  # recorded by `lockstep run dp-pause`
COLLECTIVES_ONLY = FIXTURES / "collectives-only-pre-fix"  # hand-made: two ranks' enter/complete events
DOC = Path(__file__).resolve().parent.parent / "docs" / "adding-a-protocol.md"


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_chrome_trace(document: dict) -> list[dict]:  # type: ignore[type-arg]
    """The Chrome trace-event format's rules that Perfetto's importer relies on."""
    events = document["traceEvents"]
    assert isinstance(events, list) and events
    open_slices: dict[int, list[int]] = {}
    flow_phases: dict[int, list[str]] = {}
    for event in events:
        assert event["ph"] in {"M", "X", "B", "E", "s", "t", "f", "i", "C"}
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "thread_name", "thread_sort_index"} and "args" in event
            continue
        assert isinstance(event["ts"], int) and event["ts"] >= 0
        if event["ph"] == "C":  # a counter: numbers per series
            assert (
                event["name"] and event["args"] and all(type(value) in (int, float) for value in event["args"].values())
            )
        elif event["ph"] == "i":
            assert event["s"] in {"g", "p", "t"} and event["name"]
        elif event["ph"] == "X":
            assert event["dur"] > 0 and event["name"]
        elif event["ph"] == "B":
            open_slices.setdefault(event["tid"], []).append(event["ts"])
        elif event["ph"] == "E":
            assert open_slices.get(event["tid"]), "an E without its B on the same track"
            assert event["ts"] >= open_slices[event["tid"]].pop()
        else:
            flow_phases.setdefault(event["id"], []).append(event["ph"])
    assert all(not stack for stack in open_slices.values()), "every B slice is closed"
    for phases in flow_phases.values():
        assert phases[0] == "s" and all(phase == "t" for phase in phases[1:])
    return events


@pytest.mark.parametrize(
    "recording, actors",
    [
        pytest.param(COLLECTIVES_ONLY, {"rank:0", "rank:1"}, id="collectives-only"),
        pytest.param(
            RUNTIME, {"client", "coordinator", "rank:0", "rank:1"}, id="recorded"
        ),  # rank 1 enters worker_dp#2 before rank 0 completes #1
    ],
)
def test_perfetto_export_of_a_runtime_recording(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, recording: Path, actors: set[str]
) -> None:
    output = tmp_path / "trace.json"
    code, _, err = run(capsys, "export", str(recording), "--format", "perfetto", "-o", str(output))
    assert code == 0 and "wrote" in err
    events = assert_chrome_trace(json.loads(output.read_text()))
    tracks = {event["args"]["name"] for event in events if event["ph"] == "M" and event["name"] == "thread_name"}
    assert tracks == actors
    slices = [event for event in events if event["ph"] == "B"]
    assert slices and slices[0]["name"] == "forward(worker_dp)#1"
    # the first collective joins both ranks with one flow
    first = [event for event in events if event["ph"] in "st" and event["name"] == "forward(worker_dp)#1"]
    assert sorted(event["ph"] for event in first) == ["s", "t"] and len({event["tid"] for event in first}) == 2


def test_perfetto_export_of_a_counterexample(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "perfetto")
    assert code == 0
    events = assert_chrome_trace(json.loads(out))
    assert (
        sum(1 for event in events if event["ph"] == "X") == sum(1 for line in COUNTEREXAMPLE.open() if line.strip()) - 1
    )


def itf_decode(sort: Sort, value: object) -> object:
    """ITF back to model values, refusing anything ITF's ADR-015 does not allow for the sort."""
    if isinstance(sort, BoolSort):
        assert isinstance(value, bool)
        return value
    if isinstance(sort, (IntSort, IndexSort)):
        assert isinstance(value, dict) and set(value) == {"#bigint"} and re.fullmatch(r"-?[0-9]+", value["#bigint"])
        return int(value["#bigint"])
    if isinstance(sort, EnumSort):
        assert isinstance(value, str)
        return sort.members.index(value)
    if isinstance(sort, MapSort):
        assert isinstance(value, dict) and set(value) == {"#map"}
        pairs = value["#map"]
        assert [itf_decode(sort.key, key) for key, _ in pairs] == list(sort.key.values())
        return tuple(itf_decode(sort.value, item) for _, item in pairs)
    if isinstance(sort, SequenceSort):
        assert isinstance(value, list)
        return tuple(itf_decode(sort.element, item) for item in value)
    assert isinstance(sort, RecordSort) and isinstance(value, dict) and list(value) == [name for name, _ in sort.fields]
    return tuple(itf_decode(field, value[name]) for name, field in sort.fields)


def test_itf_export_holds_the_counterexample_states(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "itf")
    assert code == 0
    document = json.loads(out)
    assert document["#meta"]["format"] == "ITF" and isinstance(document["vars"], list)
    instance = get_protocol("dp-pause").instance("pre-fix")
    result = check(instance, engine="bfs")
    path = result.property_result("quiescent_during_rpc").path
    assert path is not None
    machine = result.machine
    expected = [path.initial, *[step.state for step in path.steps]]
    assert len(document["states"]) == len(expected)
    names = list(machine.variables)
    for index, (state, reference) in enumerate(zip(document["states"], expected)):
        assert state["#meta"]["index"] == index and set(state) == {"#meta", *document["vars"]}
        for name in document["vars"][:-2]:  # the last two: Quint's mbt::actionTaken and mbt::nondetPicks
            assert itf_decode(machine.variables[name].sort, state[name]) == reference[names.index(name)], (index, name)
    assert decode(machine.variables["mode"].sort, ["TOP", "TOP"], "mode") == (0, 0)


def test_itf_needs_full_states(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "export", str(RUNTIME), "--format", "itf", "--profile", "runtime")
    assert code == 2 and out == ""
    assert "ITF needs full states" in " ".join(err.split()) and "client.jsonl:2" in err.replace("\n", "")


def test_itf_states_are_the_callers_model(capsys: pytest.CaptureFixture[str]) -> None:
    """The header does not choose the model ITF's states come from: one that would widen it is exit 2."""
    code, out, err = run(capsys, "export", str(RUNTIME), "--format", "itf")
    assert code == 2 and out == "" and "parameters.settle_before_resume is 0" in " ".join(err.split())


def test_dot_and_graphml_of_a_trace_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    events = sum(1 for line in COUNTEREXAMPLE.open() if line.strip()) - 1
    code, out, _ = run(capsys, "export", str(COUNTEREXAMPLE), "--format", "dot")
    assert code == 0
    (graph,) = pydot.graph_from_dot_data(out)
    assert len(graph.get_edges()) == events and len(graph.get_nodes()) >= events + 1
    code, out, _ = run(
        capsys, "export", str(COUNTEREXAMPLE), "--format", "graphml", "-o", str(tmp_path / "path.graphml")
    )
    assert code == 0
    parsed = nx.read_graphml(tmp_path / "path.graphml")
    assert parsed.number_of_nodes() == events + 1 and parsed.number_of_edges() == events
    assert nx.is_directed_acyclic_graph(parsed) and max(dict(parsed.out_degree()).values()) == 1
    labels = [data["label"] for _, _, data in parsed.edges(data=True)]
    assert labels[0] == "client: client_add_request(rank=0)"


def test_state_graph_of_a_small_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    model = tmp_path / "early_stop.py"
    model.write_text(source)
    states = check(
        __import__("lockstep.models.external", fromlist=["x"]).load_model_file(model).instance("post-fix"), engine="bfs"
    ).stats.states
    code, out, _ = run(capsys, "graph", "--model-file", str(model), "--variant", "post-fix", "--format", "dot")
    assert code == 0
    (graph,) = pydot.graph_from_dot_data(out)
    assert len([node for node in graph.get_nodes() if node.get_name() not in ("node", "edge", "graph")]) == states
    code, _, _ = run(
        capsys, "graph", "--model-file", str(model), "--format", "graphml", "-o", str(tmp_path / "g.graphml")
    )
    assert code == 0 and nx.read_graphml(tmp_path / "g.graphml").number_of_nodes() == states
    code, _, err = run(
        capsys, "graph", "dp-pause", "--format", "dot", "--max-states", "50", "-o", str(tmp_path / "cut.dot")
    )
    assert code == 3 and "the graph is partial" in err


def test_show_draws_swimlanes_and_highlights_the_failure(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", str(COUNTEREXAMPLE))
    assert code == 0 and err == ""  # the picture is the result: on stdout
    assert "rank 0 in forward(worker_dp)#1; rank 1 in rpc(worker_world)#1" in out
    assert "quiescent_during_rpc is violated at step 17" in out
    sentence = get_protocol("dp-pause").instance("pre-fix").machine().property_named("quiescent_during_rpc").description
    assert " ".join(sentence.split())[:60] in " ".join(out.split())  # the property's sentence
    assert "mirrors (source)" in out and "DPEngineCoreProc" in out  # the vLLM functions of each step
    code, out, err = run(capsys, "show", str(RUNTIME), "--profile", "runtime")
    assert code == 0 and "→ forward(worker_dp)#1" in out and "rank:0" in out and "rank:1" in out
    assert "replay against dp-pause post-fix seed: conforms" in out and err == ""


def test_show_draws_a_trace_replay_refuses_without_a_highlight(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The header does not choose its judge: a header widening the check is refused, and the picture
    is drawn all the same, saying why on stderr; --trust-header or the recorder's profile accepts it."""
    code, out, err = run(capsys, "show", str(RUNTIME))
    said = " ".join(err.split())
    assert code == 0 and "→ forward(worker_dp)#1" in out and "replay against" not in out
    assert "mirrors (source)" in out  # the picture is whole: only the highlight is left out
    assert "replay refuses the trace" in said and "parameters.settle_before_resume is 0" in said
    assert "--profile runtime" in said
    code, out, err = run(capsys, "show", str(RUNTIME), "--trust-header")
    assert code == 0 and "replay against dp-pause post-fix seed: conforms" in out and err == ""
    # another variant, chosen by the caller: the same events diverge, and show highlights where
    code, out, _ = run(capsys, "show", str(RUNTIME), "--profile", "runtime", "--variant", "pre-fix")
    assert code == 0 and "the run diverges from dp-pause pre-fix seed at event" in out
    code, _, err = run(capsys, "show", str(RUNTIME), "--protocol", "no-such-protocol")
    assert code == 2 and "no-such-protocol" in err


@pytest.mark.parametrize("command", ["show", "export"])
def test_bad_trace_input_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"format": "lockstep-trace", "version": 1}\n{not json\n')
    extra = ["--format", "perfetto"] if command == "export" else []
    code, out, err = run(capsys, command, str(broken), *extra)
    assert code == 2 and out == "" and "broken.jsonl:1" in err and "Traceback" not in err


def test_show_draws_control_characters_from_a_trace_as_escapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    header = {
        "format": "lockstep-trace",
        "version": 1,
        "protocol": "dp-pause\x1b[2J",
        "variant": "post-fix",
        "instance": "seed",
        "parameters": {},
        "source": {"kind": "runtime"},
    }
    events = [
        {"index": 0, "actor": "rank:0", "action": "step\x1b]0;owned\x07", "args": {}},
        {
            "index": 1,
            "actor": "rank:0",
            "action": "enter",
            "args": {"communicator": "c\u202e", "op": "x\r"},
            "clock": {"c\u202e": 1},
        },
    ]
    trace = tmp_path / "controls.jsonl"
    trace.write_text("\n".join(json.dumps(line) for line in [header, *events]) + "\n")
    code, out, _ = run(capsys, "show", str(trace), "--no-replay")
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\r" not in out and "\u202e" not in out
    assert "step\\x1b]0;owned\\x07" in out and "dp-pause\\x1b[2J" in out and "x\\r(c\\u202e)#1" in out
