"""Writing a model at the edges: actor names, double writes, initial values, final states, hints.

Each case is a mistake or an unusual choice a new model's author makes (issue 37), met where the
model declares it, or through the command a user runs (``lockstep.cli.main``) on a model file:
an actor like ``d-worker`` checks, writes its counterexample and replays it; an actor outside the
grammar is refused at declaration with the grammar; a trace the format cannot hold never costs the
verdict; a variable written twice in one step names both writes; an enum member is an initial
value; a machine with no final state is told to declare one; hints name the documented API; and
``lockstep.checkers.check`` picks the engine the command line picks.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from test_docs import example_source

from lockstep.checkers import check
from lockstep.cli import main
from lockstep.models.external import load_model_file
from lockstep.spec import actions
from lockstep.spec.actions import ACTOR_GRAMMAR, action
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import IndexSort, MapSort, SequenceSort, integers, record
from lockstep.spec.sorts import enum as enum_sort
from lockstep.spec.terms import DefinitionError, Term
from lockstep.testing import assert_conforms
from lockstep.traces.format import event_problems
from lockstep.traces.schema import ACTOR_PATTERN as TRACE_ACTOR_PATTERN

HYPHENATED = '''
"""A worker whose actor name has a hyphen, as vLLM's disaggregated-prefill roles do."""

from collections.abc import Mapping

from lockstep.spec.actions import action
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, Protocol, VariantSpec
from lockstep.spec.sorts import IndexSort, integers
from lockstep.spec.terms import Term


@action(actor="d-worker:{worker}")
def transfer(count: Term, worker: Term) -> Step:
    """A decode worker takes one KV block."""
    return Step(count < 3, {count: count + 1})


def build(variant: str, parameters: Mapping[str, int]) -> Machine:
    machine = Machine("kv-handoff")
    count = machine.variable("count", integers(0, 3), 0)
    machine.add(transfer, count, worker=IndexSort("Worker", 2))
    machine.always("at_most_one_block", count < 2, "one block in flight")
    machine.set_final(count == 3)
    # SABOTAGE
    return machine


PROTOCOL = Protocol(
    name="kv-handoff",
    title="a hyphenated actor",
    change="example",
    variants=(VariantSpec("only", "the one variant", "example"),),
    parameters=(),
    instances=(InstanceSpec("seed", "the one instance", {}, {"only": "violated"}),),
    build=build,
    default_variant="only",
)
'''


Rank = IndexSort("Rank", 2)


def run(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str, str]:
    code = main(list(arguments))
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


# --------------------------------------------------------------------------------------- actors
def test_a_model_whose_actor_is_d_worker_checks_writes_and_replays_its_counterexample(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "kv_handoff.py"
    model.write_text(HYPHENATED)
    trace = tmp_path / "counterexample.jsonl"
    code, out, err = run(capsys, "check", "--model-file", str(model), "--trace-out", str(trace), "--json")
    assert code == 1 and json.loads(out)["verdict"] == "violated", err
    events = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    assert [event["actor"] for event in events] == ["d-worker:0", "d-worker:0"]
    code, out, err = run(capsys, "replay", str(trace), "--model-file", str(model), "--json")
    assert code == 1 and json.loads(out)["verdict"] == "violated" and json.loads(out)["event"] == 1, err
    # the testing helpers take the model file's Protocol, as they take a registered name
    with pytest.raises(AssertionError, match="property violated: at_most_one_block"):
        assert_conforms(trace, protocol=load_model_file(model))


@pytest.mark.parametrize(
    ("declare", "shown"),
    [
        (lambda machine: action(actor="D Worker")(lambda count: Step(True)), "'D Worker'"),
        (lambda machine: action(actor="rank:{rank}:{step}")(lambda count: Step(True)), "'rank:{rank}:{step}'"),
        (lambda machine: machine.add_action("a", lambda rank: Step(True), actor="{rank}", rank=Rank), "'0'"),
        (lambda machine: machine.action(actor="Worker:{rank}", rank=Rank)(lambda rank: Step(True)), "'Worker:{rank}'"),
        (
            lambda machine: machine.add(action(actor="{role}")(lambda role: Step(True)), role=enum_sort("R", ["P"])),
            "'P' (template '{role}' with role=P)",
        ),
    ],
)
def test_an_actor_outside_the_grammar_is_refused_where_it_is_declared_with_the_grammar(
    declare: Callable[[Machine], object], shown: str
) -> None:
    with pytest.raises(DefinitionError) as raised:
        declare(Machine("m"))
    assert shown in str(raised.value) and f"does not fit the actor grammar: an actor is {ACTOR_GRAMMAR}" in str(
        raised.value
    )


def test_models_and_traces_share_one_actor_grammar() -> None:
    assert actions.ACTOR_PATTERN == TRACE_ACTOR_PATTERN
    for actor in ("d-worker", "prefill-worker:0", "rank:1", "coordinator", "group:dp"):
        assert actions.is_actor(actor) and event_problems(_event(actor)) == [], actor
    for actor in ("D-worker", "-worker", "rank 1", "rank:1:2", "", "0"):
        assert not actions.is_actor(actor) and event_problems(_event(actor)) != [], actor


def _event(actor: str) -> dict[str, object]:
    return {"index": 0, "actor": actor, "action": "a", "args": {}}


def test_a_trace_the_format_refuses_never_costs_the_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A counterexample the writer cannot hold (here an actor changed behind the declaration's
    back) is an error line beside the verdict and its exit code, in text and in JSON."""
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "sabotaged.py"
    model.write_text(
        HYPHENATED.replace(
            "    # SABOTAGE", '    machine.actions[0] = dataclasses.replace(machine.actions[0], actor="Bad Actor")'
        ).replace("from collections.abc import Mapping", "import dataclasses\nfrom collections.abc import Mapping")
    )
    code, out, err = run(capsys, "check", "--model-file", str(model), "--json")
    payload = json.loads(out)
    assert code == 1 and payload["verdict"] == "violated" and payload["counterexample"]["trace_file"] is None
    assert "cannot write the trace" in err and "'Bad Actor'" in err and "internal error" not in err
    code, out, err = run(capsys, "check", "--model-file", str(model))
    assert code == 1 and "cannot write the trace" in err and "expected violated: as pinned" in err


# --------------------------------------------------------------------------------- double writes
def counter() -> tuple[Machine, Term, Term]:
    machine = Machine("counter")
    return machine, machine.variable("x", integers(0, 3), 0), machine.variable("y", integers(0, 3), 0)


def test_a_variable_written_twice_in_one_step_is_an_error_naming_both_writes() -> None:
    machine, x, y = counter()

    def helper() -> dict[Term, Term]:
        return {x: x + 1, y: y + 1}

    @action(actor="worker")
    def spread(x: Term) -> Step:  # a helper's updates as a group of their own, and x again
        return Step(x < 3, {x: 0}, helper())

    with pytest.raises(DefinitionError) as raised:
        machine.add(spread, x)
    assert str(raised.value) == (
        "action 'spread': variable 'x' is written twice in one step: x := 0 and x := (x + 1); a variable takes "
        "one value per step: write it once (if_then_else chooses between two values)"
    )
    with pytest.raises(DefinitionError, match=r"'y' is written twice in one step: y := 1 and y := 2"):
        Step(True, [(y, 1), (x, 1), (y, 2)])
    machine.add_action("both", lambda: Step(x < 3, {x: x + 1}, [(y, 2)]), actor="worker")  # distinct variables
    assert dict(machine.action_named("both").updates).keys() == {"x", "y"}


# ------------------------------------------------------------------------------- initial values
Phase = enum_sort("Phase", ["READY", "DONE"])


class PythonPhase(enum.Enum):
    READY = 0
    DONE = 1


@pytest.mark.parametrize(
    ("sort", "initial", "value"),
    [
        (Phase, PythonPhase.DONE, 1),
        (MapSort(Rank, Phase), (Phase.READY, Phase.DONE), (0, 1)),
        (MapSort(Rank, Phase), (Phase.DONE,) * 2, (1, 1)),
        (MapSort(Rank, Phase), {0: "DONE", 1: Phase.READY}, (1, 0)),
        (SequenceSort(Phase, 2), [Phase.DONE], (1,)),
        (record("Slot", phase=Phase, count=integers(0, 2)), {"phase": Phase.DONE, "count": 2}, (1, 2)),
    ],
)
def test_enum_members_are_initial_values_wherever_they_sit(sort: object, initial: object, value: object) -> None:
    machine = Machine("m")
    machine.variable("v", sort, initial)  # type: ignore[arg-type]
    assert machine.initial_state()["v"] == value


def test_an_initial_value_that_is_none_says_how_to_write_one() -> None:
    with pytest.raises(DefinitionError) as raised:
        Machine("m").variable("phase", MapSort(Rank, Phase), Phase.READY)
    assert "write a tuple of one Phase per key of Rank in key order (2 entries, e.g. (value,) * 2)" in str(raised.value)
    assert "write a member as Phase.READY or 'READY' (members: READY, DONE)" in str(raised.value)


# ---------------------------------------------------------------------------- final states, hints
def test_no_deadlock_without_a_final_state_says_to_declare_set_final(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = tmp_path / "early_stop.py"
    model.write_text(example_source().replace("    machine.set_final(stopped)\n", ""))
    code, out, _ = run(capsys, "check", "--model-file", str(model), "--variant", "post-fix", "--json")
    deadlock = next(item for item in json.loads(out)["properties"] if item["name"] == "no_deadlock")
    assert code == 1 and deadlock["verdict"] == "violated"
    assert "declares no final state: declare legitimate ends with machine.set_final(...)" in deadlock["description"]
    code, _, err = run(capsys, "check", "--model-file", str(model), "--variant", "post-fix")
    assert "declare legitimate ends with machine.set_final(...)" in err


def test_hints_name_the_documented_api() -> None:
    """A binding mistake is answered with ``machine.add``, the call docs/adding-a-protocol.md shows."""
    document = (Path(__file__).resolve().parent.parent / "docs" / "adding-a-protocol.md").read_text()
    machine, x, _ = counter()

    @action(actor="rank:{rank}")
    def bump(x: Term, rank: Term) -> Step:
        return Step(x < 3, {x: x + 1})

    with pytest.raises(DefinitionError) as raised:
        machine.add(bump, x)
    assert "machine.add(bump, state, rank=<its sort>)" in str(raised.value)
    named = set(re.findall(r"\b(?:machine\.)?[a-z_]+\(", str(raised.value))) | set(
        re.findall(r"@\w+", str(raised.value))
    )
    assert named and all(call in document for call in named), named


def test_check_defaults_to_the_engine_the_command_line_uses() -> None:
    """``auto``, as ``lockstep check``: the vectorised kernels wherever they compile the model."""
    machine, x, _ = counter()
    machine.add_action("bump", lambda: Step(x < 3, {x: x + 1}), actor="worker")
    machine.set_final(x == 3)
    assert check(machine).engine == "bfs-vec"
