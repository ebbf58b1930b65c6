"""Proofs that say exactly what they prove (issue 40): honest exits, a real portfolio, CPU budgets,
well-definedness as a property, and the translator checked at run time.

- pdr is a prover: a property it neither proves nor refutes is ``inconclusive`` (exit 3), its
  detail saying how far BMC checked it, never ``holds-within-bound`` (exit 0, which a CI job
  gating on the exit code took for a pass on a property violated 2,000 steps deep);
- BMC keeps running beside the provers, deeper than its first phase, so a violation the provers
  do not find is still found;
- every prover's limit is CPU time: ABC's process is stopped by ``RLIMIT_CPU`` after its seconds
  of CPU, and Z3 is interrupted after its seconds of this process's CPU, so a loaded core gives
  them the same work (here: the test's core shared with two busy processes);
- ``well_defined``: a division by zero (an index out of range, the tail of an empty sequence)
  that a reachable state evaluates is a violation in every engine, with the path to it, and a
  property whose value rests on it is never proved; the translator's definedness condition is
  exactly where ``evaluate`` raises, and BMC agrees with BFS on random models that are undefined;
- certificates: an exhaustive bfs run's reachable set, re-checked by Z3 as an inductive invariant
  of the encoding, proves each safety property; a set the encoding does not keep is a translator
  error;
- a translator bug (an action dropped from ``Encoding.steps``) is an internal error naming the
  action and the state, found by comparing the encoding's successors with ``evaluate``'s on
  random walks, where it used to be ``holds, proved by PDR``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import z3
from hypothesis import given, settings
from test_compiler import DECLARED, expressions, one_action_machine, states

from lockstep.checkers import Verdict, check
from lockstep.checkers.symbolic import abc
from lockstep.checkers.symbolic.bmc import TranslationBug
from lockstep.checkers.symbolic.circuit import Circuit
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.pdr import PropertyDirectedReachability
from lockstep.checkers.symbolic.solving import ask
from lockstep.checkers.symbolic.translate import Translator
from lockstep.checkers.symbolic.values import bit_vectors, lift_value, to_z3
from lockstep.models import get_protocol
from lockstep.spec.evaluation import Environment, EvaluationError, evaluate
from lockstep.spec.expressions import render
from lockstep.spec.machine import WELL_DEFINED, Machine, PropertyKind, Step
from lockstep.spec.sorts import Value, integers
from lockstep.spec.terms import Term, lift

LOCKSTEP = Path(sys.executable).parent / "lockstep"  # the console script
needs_abc = pytest.mark.skipif(
    abc.binary() is None, reason="yosys-abc (pip install 'lockstep[proofs]') is not installed"
)
# x := (75 x + 74) mod 65537 from x = 1 visits every value of 0..65536 once; 28203 is step 2000
LCG_TARGET, LCG_STEPS = 28203, 2000
LCG_MODEL = f"""
from lockstep.spec.machine import Machine, Step
from lockstep.spec.protocol import InstanceSpec, Protocol, VariantSpec
from lockstep.spec.sorts import integers


def build(variant, parameters):
    machine = Machine("lcg")
    x = machine.variable("x", integers(0, 65536), 1)
    machine.add_action("step", lambda: Step(x >= 0, {{x: (x * 75 + 74) % 65537}}), actor="clock")
    machine.always("never_hit", x != {LCG_TARGET})
    return machine


PROTOCOL = Protocol(
    name="lcg",
    title="a linear congruential generator",
    change="example",
    variants=(VariantSpec("only", "the one variant", "example"),),
    parameters=(),
    instances=(InstanceSpec("seed", "the one instance", {{}}, {{"only": "violated"}}),),
    build=build,
    default_variant="only",
)
"""


def lcg() -> Machine:
    """x runs through 0..65536 in a scrambled order; ``never_hit`` is violated at step 2,000 only."""
    machine = Machine("lcg")
    x = machine.variable("x", integers(0, 65536), 1)
    machine.add_action("step", lambda: Step(x >= 0, {x: (x * 75 + 74) % 65537}), actor="clock")
    machine.always("never_hit", x != LCG_TARGET)
    return machine.finish()


def counter(limit: int, bad: int) -> Machine:
    """x counts up to ``limit``; ``not_bad`` (x != bad) is violated in ``bad`` steps."""
    machine = Machine("counter")
    x = machine.variable("x", integers(0, limit), 0)
    machine.add_action("up", lambda: Step(x < limit, {x: x + 1}), actor="clock")
    machine.always("not_bad", x != bad)
    machine.set_final(x == limit)
    return machine.finish()


def leap() -> Machine:
    """``up`` counts x to 9; only ``leap`` (at 9) goes past it: ``small`` is violated in 10 steps."""
    machine = Machine("leap")
    x = machine.variable("x", integers(0, 12), 0)
    machine.add_action("up", lambda: Step(x < 9, {x: x + 1}), actor="clock")
    machine.add_action("leap", lambda: Step(x == 9, {x: 12}), actor="clock")
    machine.always("small", x <= 9)
    machine.set_final(x >= 9)  # (so a translation without leap has no deadlock to give it away)
    return machine.finish()


# ------------------------------------------------------------------------------ honest exits
def test_a_property_pdr_cannot_prove_is_inconclusive_with_what_bmc_covered() -> None:
    """``never_hit`` is violated at step 2,000 (BFS), beyond BMC and the provers in a second of CPU:
    inconclusive, exit 3, saying how many steps BMC checked; it was ``holds-within-bound``, exit 0."""
    assert check(lcg(), "bfs").property_result("never_hit").path.length == LCG_STEPS  # type: ignore[union-attr]
    result = check(lcg(), "pdr", solver_timeout=1)
    item = result.property_result("never_hit")
    assert item.verdict is Verdict.INCONCLUSIVE, item.detail
    assert item.detail.startswith("no violation within ") and "steps (BMC)" in item.detail, item.detail
    assert result.exit_code == 3


def test_the_pdr_command_exits_3_on_a_model_file_it_cannot_prove(tmp_path: Path) -> None:
    model = tmp_path / "lcg.py"
    model.write_text(LCG_MODEL)
    finished = subprocess.run(
        [str(LOCKSTEP), "check", "--model-file", str(model), "--engine", "pdr", "--solver-timeout", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode == 3, output
    assert "inconclusive" in output and "(BMC)" in output and "Traceback" not in output


def test_bmc_runs_beside_the_provers_past_its_first_phase() -> None:
    """No prover stage, a first BMC phase of 1 step: BMC, beside, still finds the 33-step violation
    (its first phase used to be all the BMC pdr ran)."""
    prover = PropertyDirectedReachability(
        counter(40, 33), depth=1, stages=(), houdini=False, property_timeout=20, beside=True
    )
    item = prover.run().property_result("not_bad")
    assert item.verdict is Verdict.VIOLATED and item.path is not None and item.path.length == 33
    assert prover.bmc_depth >= 33


# ------------------------------------------------------------------------------ CPU budgets
@pytest.fixture
def loaded_core() -> Iterator[None]:
    """This process (and every child it starts) on one core, shared with two busy processes."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()
        os.sched_setaffinity(0, before)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@needs_abc
def test_abc_gets_its_seconds_of_cpu_on_a_loaded_core(loaded_core: None) -> None:
    """ABC cannot settle ``never_hit`` (violated 2,000 steps deep); given 2 s, it uses 2 s of CPU
    however long that takes on a shared core, and says so (``pdr -T`` alone counts wall time: it
    stopped after about a third of its CPU here)."""
    encoding = Encoding(lcg())
    position = [prop.name for prop in encoding.machine.properties].index("never_hit")
    aiger = Circuit(encoding).aiger(position)
    before = _children_cpu()
    answer = abc.prove(abc.binary() or "", aiger, 2)
    used = _children_cpu() - before
    assert answer.answer == "unknown"
    assert "used its 2 s of CPU" in answer.reason, answer.reason
    assert used >= 1.9 and answer.seconds >= 1.9, (used, answer.seconds)


def test_z3_is_limited_in_cpu_seconds_on_a_loaded_core(loaded_core: None) -> None:
    """A query Z3 cannot answer quickly (factoring a 60-bit semiprime) stops once this process has
    spent its second of CPU, not its second of wall time."""
    a, b = z3.BitVec("a", 64), z3.BitVec("b", 64)
    solver = z3.Solver()
    solver.add(a * b == 1000000016000000063, z3.ULT(a, 2**32), z3.ULT(b, 2**32), z3.UGT(a, 1), z3.UGT(b, 1))
    started = resource.getrusage(resource.RUSAGE_SELF)
    answer, _ = ask(solver, cpu=1.0)
    finished = resource.getrusage(resource.RUSAGE_SELF)
    used = (finished.ru_utime + finished.ru_stime) - (started.ru_utime + started.ru_stime)
    assert answer == z3.unknown
    assert used >= 0.95, used


# --------------------------------------------------------------------------- the translator
@pytest.fixture
def leap_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A translator bug planted in ``Encoding.steps``: the ``leap`` action never fires."""
    original = Encoding.steps

    def without_leap(self: Encoding, state: dict) -> list:  # type: ignore[type-arg]
        steps = original(self, state)
        return [
            (False, {}, False) if self.machine.actions[grounded.action].name == "leap" else step
            for grounded, step in zip(self.grounded, steps, strict=True)
        ]

    monkeypatch.setattr(Encoding, "steps", without_leap)


@pytest.mark.usefixtures("leap_dropped")
@pytest.mark.parametrize(("engine", "options"), [("pdr", {"solver_timeout": 5}), ("bmc", {"depth": 5})])
def test_an_action_dropped_from_the_encoding_is_a_translator_error(engine: str, options: dict) -> None:  # type: ignore[type-arg]
    """``small`` is violated in 10 steps (``up`` nine times, then ``leap``); with ``leap`` dropped the
    encoding has no such path, and pdr proved ``small`` (BMC to 5 steps bounds it); the successors of
    the walks' state x = 9 differ from evaluate's, so both are a translator error instead."""
    assert check(leap(), "bfs").property_result("small").path.length == 10  # type: ignore[union-attr]
    with pytest.raises(TranslationBug) as raised:
        check(leap(), engine, **options)
    message = str(raised.value)
    assert "leap()" in message and "(9,)" in message and "evaluate" in message, message


# ------------------------------------------------------------------------------ well_defined
def issue_example() -> Machine:
    """The issue's property: ``(60 // (x - 3) == 7) or x >= 0`` divides by zero at x = 3 (3 steps)."""
    machine = Machine("divide")
    x = machine.variable("x", integers(0, 6), 0)
    machine.add_action("up", lambda: Step(x < 6, {x: x + 1}), actor="clock")
    machine.always("odd", ((lift(60) // (x - 3)) == 7) | (x >= 0))
    machine.set_final(x == 6)
    return machine.finish()


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        ("bfs", {}),
        ("dfs", {}),
        ("bfs-vec", {}),
        ("bmc", {"depth": 8}),
        ("induction", {}),
        ("pdr", {"solver_timeout": 5}),
    ],
)
def test_a_property_resting_on_a_division_by_zero_is_never_proved(engine: str, options: dict) -> None:  # type: ignore[type-arg]
    """It came out ``holds, proved by Houdini`` under pdr (Z3 divides by zero without complaint);
    now every engine reports ``well_defined`` violated at x = 3 with the path there, and the
    property, whose value is undefined there, violated too."""
    result = check(issue_example(), engine, **options)
    undefined = result.property_result(WELL_DEFINED)
    assert undefined.verdict is Verdict.VIOLATED and undefined.path is not None and undefined.path.length == 3
    assert "division by zero" in undefined.detail, undefined.detail
    odd = result.property_result("odd")
    assert odd.verdict is Verdict.VIOLATED and odd.path is not None and odd.path.length == 3
    assert result.exit_code == 1


@settings(max_examples=300, deadline=None)
@given(expressions(), states())
def test_the_translators_definedness_is_where_evaluate_does_not_raise(
    drawn: tuple[str, Term], state: dict[str, Value]
) -> None:
    """``Translator.defined``, folded in a concrete state, is true exactly where ``evaluate``
    computes the expression (every partial operator, short-circuit forms read as evaluate reads them)."""
    _, term = drawn
    lifted = {name: lift_value(state[name], sort) for name, sort in DECLARED.values()}
    with bit_vectors(None):
        defined = Translator(lifted).defined(term.expression)
        folded = defined if isinstance(defined, bool) else z3.is_true(z3.simplify(to_z3(defined)))
    try:
        evaluate(term.expression, Environment(state))
        raised = False
    except (EvaluationError, ZeroDivisionError, IndexError):
        raised = True
    assert folded is not raised, render(term.expression)


@settings(max_examples=40, deadline=None)
@given(expressions("bool", 2), expressions(), expressions("bool", 2), states())
def test_bmc_finds_what_bfs_finds_where_a_random_model_is_undefined(
    guard: tuple[str, Term], update: tuple[str, Term], invariant: tuple[str, Term], state: dict[str, Value]
) -> None:
    """Random one-action models, many with undefined guards, updates or invariants: BMC's verdicts
    and counterexample lengths are BFS's, ``well_defined`` included (and its run-time check of the
    encoding finds nothing to object to)."""
    machine = one_action_machine(state, guard[1], update[0], update[1], invariant[1])
    explicit = check(machine, "bfs")
    symbolic = check(machine, "bmc", depth=explicit.stats.depth + 1)
    for mine, theirs in zip(symbolic.properties, explicit.properties, strict=True):
        assert mine.name == theirs.name
        if theirs.verdict is Verdict.HOLDS:
            assert mine.verdict is Verdict.HOLDS_WITHIN_BOUND, (mine.name, mine.detail)
        else:
            assert mine.verdict is theirs.verdict, (mine.name, mine.detail, theirs.detail)
            assert (mine.path.length if mine.path else None) == (theirs.path.length if theirs.path else None)


# ------------------------------------------------------------------------------ certificates
def test_an_exhaustive_run_becomes_a_z3_checked_certificate() -> None:
    """computed-tokens post-fix: bfs's 56 reachable states, as a decision diagram, are re-checked by
    Z3 as an inductive invariant of the encoding, and prove every safety property (``no_deadlock``
    among them, which pdr's ABC needs ~25 s for)."""
    result = check(get_protocol("computed-tokens").instance("post-fix"), "certify")
    assert result.engine == "certify" and result.verdict is Verdict.HOLDS
    safety = [item for item in result.properties if item.kind is PropertyKind.ALWAYS]
    assert len(safety) >= 9
    for item in safety:
        assert item.verdict is Verdict.HOLDS and item.detail.startswith("proved by a certificate"), item


def test_a_certificate_the_encoding_does_not_keep_is_a_translator_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A translator bug that adds behaviour (``up``'s guard dropped: the encoding lets x go from 9 to
    10, which no run of the model reaches): bfs's reachable set is not inductive under the encoding,
    an internal error saying so, not a proof."""
    original = Encoding.steps

    def unguarded(self: Encoding, state: dict) -> list:  # type: ignore[type-arg]
        steps = original(self, state)
        return [
            (True, updates, leaves) if self.machine.actions[grounded.action].name == "up" else (guard, updates, leaves)
            for grounded, (guard, updates, leaves) in zip(self.grounded, steps, strict=True)
        ]

    monkeypatch.setattr(Encoding, "steps", unguarded)
    with pytest.raises(TranslationBug, match="not inductive under the encoding .the invariant fails consecution"):
        check(leap(), "certify")
