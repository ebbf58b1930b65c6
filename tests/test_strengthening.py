"""ABC's pdr relative to assumed lemmas (strengthening.py): the re-check conjoins every lemma assumed,
so a proof under true lemmas is kept and one under a lemma that is not an invariant is refused."""

from __future__ import annotations

import pathlib

import pytest

from lockstep.checkers import Verdict
from lockstep.checkers.symbolic import abc
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.invariants import conjuncts, named_state, verify
from lockstep.checkers.symbolic.pdr import PropertyDirectedReachability
from lockstep.checkers.symbolic.strengthening import Strengthening
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import integers

needs_abc = pytest.mark.skipif(abc.binary() is None, reason="yosys-abc (pip install 'lockstep[proofs]') is missing")
PROGRAM = abc.binary() or ""


def counter(limit: int = 3, *, tied: bool = False) -> Machine:
    """x and y count up together to ``limit``; ``y_small`` (y <= 3) needs x == y and x <= 3."""
    machine = Machine("pair")
    x = machine.variable("x", integers(0, 5), 0)
    y = machine.variable("y", integers(0, 5), 0)
    machine.add_action("tick", lambda: Step(x < limit, {x: x + 1, y: y + 1}), actor="clock")
    if tied:
        machine.always("tied", (x == y) & (x <= 3))
    machine.always("y_small", y <= 3)
    machine.set_final(x == limit)
    return machine.finish()


def position_of(encoding: Encoding, name: str) -> int:
    return [prop.name for prop in encoding.machine.properties].index(name)


def assume(strengthening: Strengthening, label: str) -> None:
    """Assume the predicate ``x == y`` (label "tied"), ``x == 0`` ("zero") or ``y <= 3`` ("small")."""
    readings = []
    for width in (None, strengthening.encoding.integer_width()):
        with bit_vectors(width):
            state = named_state(strengthening.encoding)
            x, y = state["x"], state["y"]
            readings.append({"tied": x == y, "zero": x == 0, "small": y <= 3}[label])
    strengthening.assume_predicate(label, readings[0], readings[1])


@needs_abc
@pytest.mark.parametrize("stutter", [False, True])
def test_a_proof_under_a_true_lemma_is_rechecked_with_the_lemma_conjoined(stutter: bool) -> None:
    encoding = Encoding(counter())
    strengthening = Strengthening(encoding, stutter=stutter)
    assume(strengthening, "tied")
    outcome = strengthening.prove(PROGRAM, position_of(encoding, "y_small"), 20)
    assert outcome.answer.answer == "safe" and outcome.rejected is None and outcome.invariant is not None
    with bit_vectors(None):
        parts = [str(part) for part in conjuncts(outcome.invariant)]
        assert "x == y" in parts  # the assumed lemma is part of what was re-checked
        assert verify(encoding, position_of(encoding, "y_small"), outcome.invariant) is None


@needs_abc
@pytest.mark.parametrize("stutter", [False, True])
@pytest.mark.parametrize(
    ("limit", "lemma", "failing"),
    [
        (3, "zero", "consecution"),  # x == 0 is not an invariant: the first tick breaks it
        (5, "small", "consecution"),  # assuming the property itself would hide a real violation
    ],
)
def test_a_proof_under_a_lemma_that_is_not_an_invariant_is_refused(
    limit: int, lemma: str, failing: str, stutter: bool
) -> None:
    encoding = Encoding(counter(limit))
    strengthening = Strengthening(encoding, stutter=stutter)
    assume(strengthening, lemma)
    outcome = strengthening.prove(PROGRAM, position_of(encoding, "y_small"), 20)
    assert outcome.answer.answer == "safe"  # ABC never sees a state that violates the lemma as bad
    assert outcome.invariant is None and outcome.rejected is not None and failing in outcome.rejected
    with pytest.raises(ValueError, match="re-checked"):
        strengthening.learn("y_small", outcome)


@needs_abc
def test_the_portfolio_assumes_an_earlier_abc_proof_and_rechecks_the_conjunction() -> None:
    prover = PropertyDirectedReachability(
        counter(tied=True), depth=1, stages=(("abc", 1.0),), houdini=False, property_timeout=20
    )
    result = prover.run()
    assert result.property_result("tied").verdict is Verdict.HOLDS
    later = result.property_result("y_small")
    assert later.verdict is Verdict.HOLDS and "assuming" in later.detail
    certificate = prover.attempts["y_small"].certificate
    assert certificate is not None
    with bit_vectors(None):
        assert verify(prover.encoding, position_of(prover.encoding, "y_small"), certificate.formula) is None
    labels = [lemma.label for lemma in prover.strengthening.lemmas]
    assert labels[: labels.index("y_small")] and "tied" in labels


@needs_abc
def test_a_witness_beyond_the_bmc_depth_is_found_by_abcs_bmc3_and_replayed() -> None:
    machine = Machine("pair")
    x = machine.variable("x", integers(0, 5), 0)
    machine.add_action("tick", lambda: Step(x < 5, {x: x + 1}), actor="clock")
    machine.sometimes("four", x == 4)
    machine.set_final(x == 5)
    prover = PropertyDirectedReachability(machine.finish(), depth=1, stages=(("abc", 1.0),), houdini=False)
    witness = prover.run().property_result("four")
    assert witness.verdict is Verdict.HOLDS and witness.path is not None
    assert [step.action for step in witness.path.steps] == ["tick"] * 4
    assert "bmc3" in witness.detail and "replayed" in witness.detail


def test_when_pdr_with_ctg_generalisation_stops_on_an_assertion_plain_pdr_gets_the_time_left(
    tmp_path: pathlib.Path,
) -> None:
    """A stand-in for ``yosys-abc`` that fails as ABC 0.5x's ``pdr -n -c`` can (an internal assertion)."""
    program = tmp_path / "abc-stand-in"
    program.write_text(
        "#!/bin/sh\n"
        'case "$2" in\n'
        '  *"pdr -v -n -c"*) echo "pdrCore.c:768: ZPdr_ManDown: Assertion micResult != -1 failed."; exit 134;;\n'
        '  *) echo "Reached timeout (3 seconds) in frame 4."; echo "Property UNDECIDED.";;\n'
        "esac\n"
    )
    program.chmod(0o755)
    answer = abc.prove(str(program), b"aig 0 0 0 0 0\n", 5)
    assert answer.answer == "unknown"
    assert "Reached timeout" in answer.reason and "after pdr -n -c stopped" in answer.reason
    assert "Assertion" in answer.reason
