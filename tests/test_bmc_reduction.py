"""BMC's partial-order reduction and its backends against unreduced Z3 BMC.

The reduction forbids adjacent steps of commuting transitions out of canonical order; it must not
change a verdict or a shortest counterexample length. Each instance is checked with and without
it, on Z3 and on CaDiCaL, and the four runs must agree property by property (verdict and path
length; every path was already re-run through ``evaluate`` by the engine). The default tier runs
small machines and two seeds at modest depths; the slow tier every pinned instance to ``SLOW_DEPTH``.
"""

from __future__ import annotations

import json

import pytest
from test_symbolic import small_machine

from lockstep.checkers import CheckResult, Verdict, check
from lockstep.checkers.symbolic import BoundedModelChecker, TranslationBug
from lockstep.checkers.symbolic import translate as translate_module
from lockstep.checkers.symbolic import values as values_module
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.reduction import commuting_pairs
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.cli import main
from lockstep.cli.check import pinned_instances
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import integers

SLOW_DEPTH = 12
INSTANCES = {
    f"{instance.protocol.name}:{instance.variant}:{instance.name}": instance for instance in pinned_instances()
}


def outcomes(result: CheckResult) -> list[tuple[str, Verdict, int | None]]:
    return [(item.name, item.verdict, None if item.path is None else item.path.length) for item in result.properties]


def agree(machine: Machine, depth: int) -> list[tuple[str, Verdict, int | None]]:
    """The four configurations' outcomes are equal; returns them."""
    reference = outcomes(BoundedModelChecker(machine, depth, solver="z3", reduction=False).run())
    for solver in ("z3", "cadical"):
        for reduction in (False, True):
            result = BoundedModelChecker(machine, depth, solver=solver, reduction=reduction).run()
            assert outcomes(result) == reference, (solver, reduction)
    return reference


def counters() -> Machine:
    """Two independent counters and a third action that doubles the first: ``bump_a`` and ``bump_b``
    commute, ``bump_a`` and ``double_a`` do not (x+1 then 2x differs from 2x then x+1)."""
    machine = Machine("counters")
    first = machine.variable("first", integers(0, 6), 0)
    second = machine.variable("second", integers(0, 3), 0)

    @machine.action(actor="a")
    def bump_a() -> Step:
        return Step(first < 6, {first: first + 1})

    @machine.action(actor="b")
    def bump_b() -> Step:
        return Step(second < 3, {second: second + 1})

    @machine.action(actor="a")
    def double_a() -> Step:
        return Step((first > 0) & (first < 4), {first: first * 2})

    machine.always("not_both_high", ~((first == 6) & (second == 3)))
    machine.sometimes("first_five", first == 5)
    return machine


def test_commuting_pairs_are_found_and_dependent_ones_kept() -> None:
    encoding = Encoding(counters())
    with bit_vectors(encoding.integer_width()):
        reduction = commuting_pairs(encoding)
    names = [encoding.machine.actions[grounded.action].name for grounded in encoding.grounded]
    forbidden = {(names[a], names[b]) for a, followers in reduction.forbidden.items() for b in followers}
    assert ("bump_b", "bump_a") in forbidden  # disjoint footprints
    assert ("double_a", "bump_b") in forbidden
    assert ("double_a", "bump_a") not in forbidden  # a semantic query: they do not commute


def test_counters_agree_with_and_without_reduction_and_with_bfs() -> None:
    found = dict((name, length) for name, _, length in agree(counters().finish(), 10))
    explicit = check(counters())
    assert found["not_both_high"] == explicit.property_result("not_both_high").path.length == 7  # type: ignore[union-attr]
    assert found["first_five"] == explicit.property_result("first_five").path.length  # type: ignore[union-attr]


@pytest.mark.parametrize("fixed", [False, True])
def test_small_machine_agrees_with_and_without_reduction(fixed: bool) -> None:
    agree(small_machine(fixed).finish(), 9)


@pytest.mark.parametrize(
    ("key", "depth"), [("computed-tokens:pre-fix:seed", 13), ("cudagraph-pp:full-adjustment:seed", 8)]
)
def test_seeds_agree_with_and_without_reduction(key: str, depth: int) -> None:
    found = agree(INSTANCES[key].machine(), depth)
    assert any(verdict is Verdict.VIOLATED for _, verdict, _ in found)  # the depth reaches a violation


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(INSTANCES))
def test_every_pinned_instance_agrees_with_and_without_reduction(key: str) -> None:
    agree(INSTANCES[key].machine(), SLOW_DEPTH)


def test_bmc_options_are_refused_for_other_engines_and_combinations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "computed-tokens", "--reduction", "off"]) == 2
    assert "--reduction applies to --engine bmc" in capsys.readouterr().err
    assert main(["check", "computed-tokens", "--engine", "induction", "--solver", "z3"]) == 2
    assert "--solver applies to --engine bmc" in capsys.readouterr().err
    code = main(
        ["check", "computed-tokens", "--engine", "bmc", "--depth", "3", "--solver-timeout", "1", "--solver", "cadical"]
    )
    assert code == 2 and "--solver-timeout needs --solver z3" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options", [["--solver", "z3", "--reduction", "off"], ["--solver", "cadical", "--reduction", "on"]]
)
def test_the_cli_finds_the_same_witness_length_either_way(
    capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    arguments = ["check", "computed-tokens", "--variant", "pre-fix", "--engine", "bmc", "--depth", "9", "--json"]
    code = main([*arguments, *options])
    payload = json.loads(capsys.readouterr().out)
    witness = {item["name"]: item for item in payload["properties"]}["optimistic_bound"]
    assert code == 3 and witness["verdict"] == "holds" and witness["witness"]["length"] == 9


def test_a_translator_bug_is_caught_on_the_cadical_path_too(monkeypatch: pytest.MonkeyPatch) -> None:
    real_equal = translate_module.equal

    def broken_equal(left: object, right: object) -> object:  # a deliberately wrong translation of ==
        return values_module.negate(real_equal(left, right))  # type: ignore[arg-type]

    monkeypatch.setattr(translate_module, "equal", broken_equal)
    with pytest.raises(TranslationBug):
        BoundedModelChecker(small_machine(False).finish(), 6, solver="cadical", reduction=True).run()
