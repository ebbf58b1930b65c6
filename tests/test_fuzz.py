"""Tests for lockstep.checkers.fuzz and ``lockstep fuzz``: the Hypothesis state machine of a model,
what it finds (dp-pause pre-fix) and does not find (every post-fix seed), BFS re-minimisation,
exit codes and the JSON shape, the trace it writes, and the Hypothesis profiles."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.stateful import run_state_machine_as_test

from lockstep.checkers import check
from lockstep.checkers.counterexample import first_invalid_step
from lockstep.checkers.fuzz import FuzzOutcome, PropertyViolation, Recorder, fuzz, minimise, state_machine_for
from lockstep.checkers.fuzz.state_machine import END_OF_RUN
from lockstep.cli import main
from lockstep.models import PROTOCOLS
from lockstep.models.dp_pause import PROTOCOL as DP_PAUSE
from lockstep.spec.compiler import CompiledSystem
from lockstep.spec.machine import IN_BOUNDS, NO_DEADLOCK, Machine, PropertyKind, Step
from lockstep.spec.semantics import InterpretedSystem
from lockstep.spec.sorts import integers

PRE_FIX_SEED = 1  # a Hypothesis seed; any finds it (bench/fuzz.py measures how soon), this one soon


def violates(machine: Machine, property_name: str, path: object) -> bool:
    """The path's last state violates the property, by the reference interpreter."""
    system = InterpretedSystem(machine)
    state = path.final_state  # type: ignore[attr-defined]
    position = next(i for i, prop in enumerate(machine.properties) if prop.name == property_name)
    if not system.holds(position, state):
        return True
    if system.transitions(state):
        return False
    if property_name == NO_DEADLOCK:
        return not system.is_final(state)
    return not system.holds_at_deadlock(position, state)


# ---------------------------------------------------------------------------- the state machine
def test_a_rule_per_action_an_invariant_per_safety_property() -> None:
    machine = DP_PAUSE.instance("pre-fix").machine()
    state_machine = state_machine_for(CompiledSystem(machine), Recorder())
    rules = {rule.function.__name__ for rule in state_machine.setup_state().rules}
    assert rules == {action.name.replace(".", "_") for action in machine.actions} | {END_OF_RUN}
    invariants = [invariant.function.__name__ for invariant in state_machine.setup_state().invariants]
    safety = [prop.name for prop in machine.properties if prop.kind is PropertyKind.ALWAYS]
    assert [name for name in invariants if name.startswith("invariant_")] == [
        f"invariant_{position:03d}_{prop.name}"
        for position, prop in enumerate(machine.properties)
        if prop.kind is PropertyKind.ALWAYS
    ]
    assert {IN_BOUNDS, NO_DEADLOCK, "no_hang", "no_collective_mismatch"} <= set(safety)
    assert invariants[0].endswith(IN_BOUNDS), "in_bounds first: nothing else is evaluated in an out-of-sort state"


def test_hypothesis_finds_the_pre_fix_violation_with_a_fixed_seed() -> None:
    machine = DP_PAUSE.instance("pre-fix").machine()
    recorder = Recorder()
    state_machine = hypothesis_seed(PRE_FIX_SEED)(state_machine_for(CompiledSystem(machine), recorder))
    options = settings(
        max_examples=500,
        stateful_step_count=100,
        phases=[Phase.generate],
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    with pytest.raises(PropertyViolation) as raised:
        run_state_machine_as_test(state_machine, settings=options)
    assert recorder.first_failure is not None and recorder.first_failure <= 500
    run = recorder.last
    assert run is not None and run.violation is raised.value
    assert machine.property_named(raised.value.property_name).kind is PropertyKind.ALWAYS


def test_a_model_as_a_public_hypothesis_state_machine_finds_the_pre_fix_violation() -> None:
    """``lockstep.testing.state_machine``: a ``RuleBasedStateMachine`` class of the user's own, run
    as Hypothesis runs any (here both ways: ``run_state_machine_as_test`` and its ``TestCase``)."""
    import unittest

    from hypothesis.stateful import RuleBasedStateMachine

    from lockstep.testing import state_machine

    DpPause = state_machine(DP_PAUSE, variant="pre-fix")  # a Protocol object, as a registered name
    assert issubclass(DpPause, RuleBasedStateMachine) and DpPause.__name__ == "Dp_Pause_Pre_Fix_Seed"
    machine = DP_PAUSE.instance("pre-fix").machine()
    rules = {rule.function.__name__ for rule in DpPause.setup_state().rules}
    assert rules == {action.name.replace(".", "_") for action in machine.actions} | {END_OF_RUN}
    options = settings(
        max_examples=500,
        stateful_step_count=100,
        phases=[Phase.generate],
        database=None,
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    with pytest.raises(PropertyViolation) as raised:
        run_state_machine_as_test(
            hypothesis_seed(PRE_FIX_SEED)(state_machine("dp-pause", variant="pre-fix")), settings=options
        )
    assert machine.property_named(raised.value.property_name).kind is PropertyKind.ALWAYS
    case = hypothesis_seed(PRE_FIX_SEED)(state_machine("dp-pause", variant="pre-fix")).TestCase
    case.settings = options
    outcome = unittest.TestResult()
    case("runTest").run(outcome)
    assert len(outcome.failures) == 1 and "is violated" in outcome.failures[0][1]


def test_fuzz_finds_shrinks_and_minimises_the_pre_fix_failure() -> None:
    instance = DP_PAUSE.instance("pre-fix")
    result = fuzz(instance, seed=PRE_FIX_SEED, examples=500, shrink_seconds=3)
    assert result.outcome is FuzzOutcome.VIOLATED and result.exit_code == 1
    assert result.examples_to_failure is not None and result.examples_to_failure <= 500
    assert result.property_name is not None and result.path is not None and result.shrunk is not None
    assert result.first_failing is not None
    machine = instance.machine()
    for path in (result.first_failing, result.shrunk, result.path):
        assert first_invalid_step(InterpretedSystem(machine), path) is None, "every run is a run of the model"
        assert violates(machine, result.property_name, path)
    assert result.path.length <= result.shrunk.length
    shortest = (
        check(instance, engine="bfs", properties=[result.property_name]).property_result(result.property_name).path
    )
    assert shortest is not None and result.path.length >= shortest.length, "BFS over every state is the floor"


def test_post_fix_dp_pause_finds_nothing() -> None:
    result = fuzz(DP_PAUSE.instance("post-fix"), seed=0, examples=settings().max_examples)
    assert result.outcome is FuzzOutcome.NOTHING_FOUND and result.exit_code == 0
    assert result.runs >= settings().max_examples and result.steps_run > 0
    assert "resumed" in result.witnessed and 0 < result.completed <= result.runs, "runs reach the end of the scenario"


SEEDS_THAT_HOLD = sorted(
    name
    for name, protocol in PROTOCOLS.items()
    if protocol.instance_spec(protocol.default_instance).expected.get(protocol.default_variant) == "holds"
)


@pytest.mark.parametrize("name", SEEDS_THAT_HOLD)
def test_post_fix_seed_instances_find_nothing(name: str) -> None:
    protocol = PROTOCOLS[name]
    result = fuzz(protocol.instance(), seed=0, examples=max(20, settings().max_examples // 3))
    assert result.outcome is FuzzOutcome.NOTHING_FOUND, (result.property_name, result.path)


# ----------------------------------------------------------------------- built-ins on toy models
def counter(limit: int, *, final: bool) -> Machine:
    machine = Machine("counter")
    count = machine.variable("count", integers(0, 3), 0)
    machine.add_action("increment", lambda: Step(count < limit, {count: count + 1}), actor="a")
    machine.add_action("reset", lambda: Step(count == 1, {count: 0}), actor="b")
    if final:
        machine.set_final(count == min(limit, 3))
    return machine


def test_in_bounds_is_the_step_that_leaves_the_sort() -> None:
    machine = counter(5, final=False)  # count reaches 3, then increment would make it 4
    result = fuzz(machine, seed=0, examples=50, steps=20)
    assert result.property_name == IN_BOUNDS and result.path is not None
    assert "count would become 4" in result.detail
    assert [step.action for step in result.path.steps] == ["increment"] * 4, "BFS finds the shortest"
    assert first_invalid_step(InterpretedSystem(machine.finish()), result.path, ends_out_of_bounds=True) is None


def test_deadlock_and_final_states() -> None:
    stuck = fuzz(counter(2, final=False), seed=0, examples=50, steps=20)
    assert stuck.property_name == NO_DEADLOCK and stuck.detail == "no action is enabled"
    assert stuck.path is not None and stuck.path.length == 2
    done = fuzz(counter(2, final=True), seed=0, examples=30, steps=20)
    assert done.outcome is FuzzOutcome.NOTHING_FOUND, "a final state ends the run; Hypothesis never lacks a rule"


def test_minimise_keeps_a_violation_and_never_lengthens() -> None:
    instance = DP_PAUSE.instance("pre-fix")
    result = fuzz(instance, seed=PRE_FIX_SEED, examples=500, shrink=False)
    assert result.first_failing is not None and result.property_name is not None
    system = CompiledSystem(instance.machine())
    for radius in (0, 1, 3):
        path = minimise(system, result.property_name, [result.first_failing], max_radius=radius)
        assert path is not None and path.length <= result.first_failing.length
        assert first_invalid_step(system, path) is None and violates(system.machine, result.property_name, path)


def test_a_timeout_before_any_failure_is_inconclusive() -> None:
    result = fuzz(DP_PAUSE.instance("post-fix"), seed=0, examples=1000, timeout=1e-6)
    assert result.outcome is FuzzOutcome.INCONCLUSIVE and result.exit_code == 3 and result.stopped == "timeout"


def test_a_large_instance_builds_and_runs_a_few_examples_quickly() -> None:
    started = time.monotonic()
    result = fuzz(DP_PAUSE.instance("post-fix", "large"), seed=0, examples=5, steps=100)
    assert time.monotonic() - started < 30
    assert result.outcome is FuzzOutcome.NOTHING_FOUND and result.runs >= 5 and result.completed == 0, (
        "100 steps are too few"
    )
    assert result.machine.name == "dp-pause/post-fix" and DP_PAUSE.instance("pre-fix", "large").parameters["ranks"] == 8
    # the scenario's end is ~700-1300 steps away: beyond one rule per step in Hypothesis's buffer, so step_or_end bursts
    whole = fuzz(DP_PAUSE.instance("post-fix", "large"), seed=0, examples=5, steps=1300)
    assert whole.outcome is FuzzOutcome.NOTHING_FOUND and whole.completed > 0 and "resumed" in whole.witnessed
    assert time.monotonic() - started < 60


# ---------------------------------------------------------------------------------------- CLI
def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["fuzz", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_nothing_found_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "dp-pause", "--examples", "10", "--seed", "0", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["outcome"] == "nothing-found" and payload["exit_code"] == 0
    assert payload["engine"] == "fuzz" and payload["variant"] == "post-fix" and payload["instance"] == "seed"
    assert payload["steps"] == 100 and payload["examples"] == 10 and payload["seed"] == 0
    assert set(payload["stats"]) == {
        "runs",
        "steps_run",
        "completed_runs",
        "examples_to_failure",
        "seconds",
        "generate_seconds",
        "seconds_per_example",
    }
    assert payload["counterexample"] is None and payload["stats"]["examples_to_failure"] is None


def test_cli_violation_json_trace_replay_and_show(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from lockstep.cli import main as lockstep_main

    trace = tmp_path / "fuzz.jsonl"
    code, out, _ = run_cli(
        capsys,
        "dp-pause",
        "--variant",
        "pre-fix",
        "--seed",
        str(PRE_FIX_SEED),
        "--examples",
        "500",
        "--shrink-seconds",
        "1",
        "--json",
        "--trace-out",
        str(trace),
    )
    payload = json.loads(out)
    assert code == 1 and payload["outcome"] == "violated"
    counterexample = payload["counterexample"]
    assert counterexample["trace_file"] == str(trace) and counterexample["length"] <= counterexample["shrunk_length"]
    header, *events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert (
        header["source"]["backend"] == "lockstep-fuzz"
        and header["parameters"]["property"] == counterexample["property"]
    )
    assert len(events) == counterexample["length"]
    assert lockstep_main(["replay", str(trace), "--json"]) == 1
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["verdict"] == "violated" and replayed["property"] == counterexample["property"]
    assert lockstep_main(["show", str(trace)]) == 0
    shown = capsys.readouterr().out
    assert f"counterexample of {counterexample['property']}" in shown


def test_cli_human_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(
        capsys,
        "dp-pause",
        "--variant",
        "pre-fix",
        "--seed",
        str(PRE_FIX_SEED),
        "--examples",
        "500",
        "--shrink-seconds",
        "1",
        "--trace-out",
        str(tmp_path / "t.jsonl"),
    )
    assert code == 1
    assert "violated" in err and "counterexample:" in err and "found in example" in err and "trace:" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no-such-protocol"], "no-such-protocol"),
        (["dp-pause", "--variant", "nope"], "has no variant 'nope'"),
        (["dp-pause", "--instance", "nope"], "has no instance 'nope'"),
        (["dp-pause", "--set", "ranks"], "--set expects NAME=VALUE"),
        (["dp-pause", "--ranks", "99"], "must be at least 2"),
        ([], "name a protocol"),
    ],
)
def test_cli_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv", [["dp-pause", "--examples", "0"], ["dp-pause", "--steps", "x"], ["dp-pause", "--seed", "-1"]]
)
def test_cli_bad_numbers_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["fuzz", *argv])
    assert raised.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_cli_timeout_is_inconclusive(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "dp-pause", "--timeout", "0.000001", "--json")
    assert code == 3 and json.loads(out)["outcome"] == "inconclusive" and json.loads(out)["stopped"] == "timeout"


# ------------------------------------------------------------------------------------ profiles
def test_hypothesis_profiles() -> None:
    # tests/conftest.py by its path: ``import conftest`` finds whichever conftest was imported first
    # (tests/reliability/ has one too)
    specification = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).with_name("conftest.py"))
    assert specification is not None and specification.loader is not None
    module = importlib.util.module_from_spec(specification)
    specification.loader.exec_module(module)
    profile_name = module.profile_name

    ci, long = settings.get_profile("ci"), settings.get_profile("long")
    assert ci.derandomize and ci.database is None and ci.max_examples <= 100 and ci.deadline is None
    assert not long.derandomize and long.max_examples >= 1000
    assert profile_name({}) == "ci" and profile_name({"CI": "true"}) == "ci"
    assert profile_name({"LOCKSTEP_HYPOTHESIS_PROFILE": "long"}) == "long"


def test_a_session_without_a_seed_reports_one_that_re_runs_it_and_leaves_no_hypothesis_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    arguments = [
        "fuzz",
        "computed-tokens",
        "--variant",
        "pre-fix",
        "--examples",
        "5",
        "--json",
        "--trace-out",
        str(tmp_path / "t.jsonl"),
    ]
    assert main(arguments) == 1
    first = json.loads(capsys.readouterr().out)
    assert isinstance(first["seed"], int)
    assert main([*arguments, "--seed", str(first["seed"])]) == 1
    again = json.loads(capsys.readouterr().out)
    assert again["seed"] == first["seed"] and again["counterexample"] == first["counterexample"]
    assert again["stats"]["runs"] == first["stats"]["runs"]
    assert not (tmp_path / ".hypothesis").exists()
