"""BMC's reductions (partial-order, symmetry breaking, both) and its backends against unreduced Z3 BMC.

The partial-order reduction forbids commuting transitions out of canonical order, symmetry
breaking keeps the lex-least path of each orbit of the rank symmetry; neither may change a verdict
or a shortest counterexample length. Each configuration (solver and reduction) must agree with
unreduced Z3 BMC property by property (verdict and path length; every path was already re-run
through ``evaluate`` by the engine). The default tier runs every configuration on small machines
(a symmetric one among them), the partial-order reduction on two seeds (which declare no symmetry)
and symmetry breaking on dp-pause at 3 ranks; the slow tier every pinned instance to
``SLOW_DEPTH``, CaDiCaL with each reduction and Z3 with both.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from test_symbolic import small_machine

from lockstep.cache import CacheEntryRejected
from lockstep.checkers import CheckResult, Verdict, check
from lockstep.checkers.symbolic import BoundedModelChecker, TranslationBug
from lockstep.checkers.symbolic import translate as translate_module
from lockstep.checkers.symbolic import values as values_module
from lockstep.checkers.symbolic.analysis_cache import read_pairs
from lockstep.checkers.symbolic.bmc import REDUCTIONS
from lockstep.checkers.symbolic.encoding import Encoding
from lockstep.checkers.symbolic.reduction import commuting_pairs
from lockstep.checkers.symbolic.symmetry_breaking import lex_leader, transition_permutations
from lockstep.checkers.symbolic.values import bit_vectors
from lockstep.cli import main
from lockstep.cli.check import pinned_instances
from lockstep.models import get_protocol
from lockstep.spec.machine import Machine, Step
from lockstep.spec.sorts import IndexSort, MapSort, integers
from lockstep.spec.terms import Term, any_of, constant

SLOW_DEPTH = 12
INSTANCES = {
    f"{instance.protocol.name}:{instance.variant}:{instance.name}": instance for instance in pinned_instances()
}


def outcomes(result: CheckResult) -> list[tuple[str, Verdict, int | None]]:
    return [(item.name, item.verdict, None if item.path is None else item.path.length) for item in result.properties]


def agree(
    machine: Machine, depth: int, configurations: tuple[tuple[str, str], ...] | None = None
) -> list[tuple[str, Verdict, int | None]]:
    """Every (solver, reduction) configuration gives the outcomes of unreduced Z3 BMC (default: both
    solvers with every reduction); returns them."""
    reference = outcomes(BoundedModelChecker(machine, depth, solver="z3", cache_directory=None).run())
    if configurations is None:
        configurations = tuple((solver, reduction) for solver in ("z3", "cadical") for reduction in REDUCTIONS)
    with tempfile.TemporaryDirectory() as cache:  # the pair analysis once per machine, shared by por and both
        for solver, reduction in configurations:
            if (solver, reduction) == ("z3", "off"):
                continue
            folder = Path(cache)
            checker = BoundedModelChecker(machine, depth, solver=solver, reduction=reduction, cache_directory=folder)
            assert outcomes(checker.run()) == reference, (solver, reduction)
    return reference


# the seeds declare no rank symmetry: symmetry breaking is skipped there, so only por is compared
SEED_CONFIGURATIONS = (("cadical", "off"), ("cadical", "por"), ("z3", "por"))
# every pinned instance: the reductions on CaDiCaL, and all of them combined on Z3
SLOW_CONFIGURATIONS = (("cadical", "por"), ("cadical", "symmetry"), ("cadical", "both"), ("z3", "both"))


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
    found = dict((name, length) for name, _, length in agree(counters().finish(), 10, SEED_CONFIGURATIONS))
    explicit = check(counters(), engine="bfs")
    assert found["not_both_high"] == explicit.property_result("not_both_high").path.length == 7  # type: ignore[union-attr]
    assert found["first_five"] == explicit.property_result("first_five").path.length  # type: ignore[union-attr]


@pytest.mark.parametrize("fixed", [False, True])
def test_small_machine_agrees_with_and_without_reduction(fixed: bool) -> None:
    agree(small_machine(fixed).finish(), 9)


@pytest.mark.parametrize(
    ("key", "depth"), [("computed-tokens:pre-fix:seed", 13), ("cudagraph-pp:full-adjustment:seed", 8)]
)
def test_seeds_agree_with_and_without_reduction(key: str, depth: int) -> None:
    found = agree(INSTANCES[key].machine(), depth, SEED_CONFIGURATIONS)
    assert any(verdict is Verdict.VIOLATED for _, verdict, _ in found)  # the depth reaches a violation


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(INSTANCES))
def test_every_pinned_instance_agrees_with_and_without_reduction(key: str) -> None:
    agree(INSTANCES[key].machine(), SLOW_DEPTH, SLOW_CONFIGURATIONS)


@pytest.mark.slow
@pytest.mark.parametrize("variant", [variant.name for variant in get_protocol("dp-pause").variants])
def test_every_dp_pause_variant_at_three_ranks_agrees_with_symmetry_breaking(variant: str) -> None:
    """The pinned instances declare no symmetry (dp-pause declares it from 3 ranks on): each variant
    at 3 ranks, where symmetry breaking is used."""
    machine = get_protocol("dp-pause").instance(variant, ranks=3).machine()
    configurations = (("cadical", "symmetry"), ("cadical", "both"), ("z3", "symmetry"))
    agree(machine, 10, configurations)


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


def workers(symmetric_property: bool = True) -> Machine:
    """Three interchangeable workers, each counting to 2, with a shared total that the last one to
    count may double: a rank symmetry with dependent steps (the shared total) and independent ones.
    Without ``symmetric_property`` a property names worker 0, which breaks the symmetry."""
    machine = Machine("workers")
    Worker = IndexSort("Worker", 3)
    count = machine.variable("count", MapSort(Worker, integers(0, 2)), (0, 0, 0))
    total = machine.variable("total", integers(0, 9), 0)

    def bump(worker: Term) -> Step:
        return Step(count[worker] < 2, {count: count.set(worker, count[worker] + 1), total: total + 1})

    def double(worker: Term) -> Step:
        return Step((count[worker] == 2) & (total < 5), {total: total * 2})

    machine.add_action("bump", bump, actor="worker:{worker}", worker=Worker)
    machine.add_action("double", double, actor="worker:{worker}", worker=Worker)
    machine.declare_symmetric(Worker)
    machine.always("total_small", total <= 7)
    machine.sometimes("two_done", any_of(Worker, lambda w: count[w] == 2) & (total == 3))
    if not symmetric_property:
        machine.always("first_not_done", count[constant(0, Worker)] < 2)
    return machine


def test_rank_permutations_of_the_grounded_transitions() -> None:
    encoding = Encoding(get_protocol("dp-pause").instance("post-fix", ranks=3).machine())
    permutations, reason = transition_permutations(encoding)
    assert reason is None and len(permutations) == 2  # ranks 1 and 2 swap; rank 0 reports wave_complete
    identity, swap = permutations
    assert identity == tuple(range(len(encoding.grounded)))
    assert all(swap[swap[index]] == index for index in identity) and swap != identity
    for index, image in enumerate(swap):
        before, after = encoding.grounded[index], encoding.grounded[image]
        assert before.action == after.action
        assert [{1: 2, 2: 1}.get(value, value) for value in before.arguments] == list(after.arguments)


def test_symmetry_breaking_is_refused_where_the_symmetry_does_not_hold() -> None:
    assert lex_leader(Encoding(counters()))[1] == "machine counters declares no symmetric sort"
    constraint, reason = lex_leader(Encoding(workers(symmetric_property=False)))
    assert constraint is None and reason is not None and "names Worker 0" in reason
    checker = BoundedModelChecker(workers(symmetric_property=False), 6, reduction="symmetry")
    reference = BoundedModelChecker(workers(symmetric_property=False), 6)
    assert outcomes(checker.run()) == outcomes(reference.run()) and checker.symmetry is None
    assert checker.symmetry_skipped == reason


def test_symmetric_workers_agree_with_every_reduction_and_with_bfs() -> None:
    found = {name: length for name, _, length in agree(workers().finish(), 9)}
    explicit = check(workers(), engine="bfs")
    for name in ("total_small", "two_done"):
        assert found[name] == explicit.property_result(name).path.length  # type: ignore[union-attr]
    symmetric = BoundedModelChecker(workers(), 9, reduction="both", cache_directory=None)
    symmetric.run()
    assert symmetric.symmetry is not None and len(symmetric.symmetry.permutations) == 5  # 3! - 1


def test_dp_pause_at_three_ranks_agrees_with_symmetry_breaking() -> None:
    """The symmetric model: its permutation is found and used, and changes no outcome."""
    machine = get_protocol("dp-pause").instance("pre-fix", ranks=3).machine()
    reference = outcomes(BoundedModelChecker(machine, 5, solver="cadical").run())
    for solver in ("z3", "cadical"):  # (no path within 5 steps: this pins that symmetry breaking finds none either)
        checker = BoundedModelChecker(machine, 5, solver=solver, reduction="symmetry")
        assert outcomes(checker.run()) == reference and checker.symmetry is not None, solver


def test_the_commuting_pairs_are_cached_and_mapped_by_symmetry(tmp_path: Path) -> None:
    encoding = Encoding(workers())
    with bit_vectors(encoding.integer_width()):
        plain = commuting_pairs(encoding, symmetry=False)
        mapped = commuting_pairs(encoding, cache_directory=tmp_path)
        cached = commuting_pairs(encoding, cache_directory=tmp_path)
    assert plain.pairs == mapped.pairs == cached.pairs and plain.size > 0
    assert mapped.mapped > 0 and mapped.pairs_checked < plain.pairs_checked and not mapped.cached
    assert cached.cached and cached.pairs_checked == 0
    (entry,) = (tmp_path / "bmc-commuting-pairs").iterdir()
    key = entry.name.partition(".")[0]  # signed: KEY.MAC.json
    entry.write_text("{not json")  # a damaged entry is removed and rewritten
    with pytest.warns(CacheEntryRejected):
        assert read_pairs(tmp_path, key) is None
    with bit_vectors(encoding.integer_width()):
        recomputed = commuting_pairs(encoding, cache_directory=tmp_path)
    assert recomputed.pairs == plain.pairs and not recomputed.cached
    assert read_pairs(tmp_path, key) == sorted(plain.pairs)


@pytest.mark.parametrize("solver", ["z3", "cadical"])
def test_one_query_per_goal_gives_the_same_outcomes_and_logs_each_query(solver: str) -> None:
    """``separate_from`` (the bench's per-goal timing) asks each goal alone: no verdict or shortest
    length changes, and every query from that depth on names one property."""
    for machine in (small_machine(False).finish(), workers().finish()):
        batched = BoundedModelChecker(machine, 9, solver=solver, cache_directory=None)
        reference = outcomes(batched.run())
        assert any(len(query.properties) > 1 for query in batched.queries)
        separate = BoundedModelChecker(machine, 9, solver=solver, separate_from=3, cache_directory=None)
        assert outcomes(separate.run()) == reference
        depths = {query.depth for query in separate.queries}  # until every property is decided, or depth 9
        assert depths == set(range(max(depths) + 1)) and max(depths) > 3
        assert all(len(query.properties) == 1 for query in separate.queries if query.depth >= 3)
        assert any(query.answer == "sat" for query in separate.queries)  # a violation or witness is found
