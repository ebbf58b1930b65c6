"""The Z3 translator and bounded model checker against the concrete evaluator and the explicit engine."""

from __future__ import annotations

import json
import random
from functools import cache

import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compiler import DECLARED, OPERATOR_SAMPLES, QUANTIFIER_SAMPLES, STATE, expressions, states

from lockstep.checkers import Verdict, check
from lockstep.checkers.result import Statistics
from lockstep.checkers.symbolic import BoundedModelChecker, TranslationBug
from lockstep.checkers.symbolic import translate as translate_module
from lockstep.checkers.symbolic import values as values_module
from lockstep.checkers.symbolic.encoding import Encoding, decode, flatten, in_sort
from lockstep.checkers.symbolic.solving import ask, milliseconds
from lockstep.checkers.symbolic.translate import Translator
from lockstep.checkers.symbolic.values import bit_vectors, declare, lift_value, to_z3
from lockstep.cli import main
from lockstep.models import PROTOCOLS, get_protocol
from lockstep.spec.collectives import Communicator, all_reduce_sum, barrier
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.expressions import NODE_CLASSES, Expression, Operator, Parameter, Quantifier, walk
from lockstep.spec.machine import Machine, Step
from lockstep.spec.semantics import InterpretedSystem, State, Value
from lockstep.spec.sorts import BOOL, IndexSort, MapSort, Sort, integers
from lockstep.spec.terms import Term, all_of


def z3_value(expression: Expression, state: dict[str, Value], width: int | None) -> tuple[str, Value]:
    """The expression's value computed by Z3 from a state given as constrained Z3 constants."""
    with bit_vectors(width):
        symbols = {name: declare(sort, name) for name, sort in DECLARED.values()}
        solver = z3.Solver()
        for name, sort in DECLARED.values():
            solver.add(to_z3(translate_module.equal(symbols[name], lift_value(state[name], sort))))
        result = Translator(symbols).translate(expression)
        assert solver.check() == z3.sat
        model = solver.model()
        return "value", decode(
            expression.sort if not _unbounded(expression.sort) else integers(None, None), result, model
        )  # type: ignore[arg-type]


def _unbounded(sort: Sort) -> bool:
    return not sort.is_finite


def reference(expression: Expression, state: dict[str, Value]) -> tuple[str, Value] | None:
    try:
        return "value", evaluate(expression, Environment(state))
    except Exception:  # noqa: BLE001 - undefined concretely: Z3 may give any value
        return None


def test_every_node_class_operator_and_quantifier_is_translated() -> None:
    assert set(OPERATOR_SAMPLES) == set(Operator) and set(QUANTIFIER_SAMPLES) == set(Quantifier)
    for samples in (OPERATOR_SAMPLES, QUANTIFIER_SAMPLES):
        for key, sample in samples.items():
            built = sample()
            expression = built.expression if isinstance(built, Term) else built
            expected = reference(expression, STATE)
            assert expected is not None, key
            for width in (None, 16):
                assert z3_value(expression, STATE, width) == expected, (key, width)
    seen: set[type] = set()
    for samples in (OPERATOR_SAMPLES, QUANTIFIER_SAMPLES):
        for sample in samples.values():
            built = sample()
            seen |= {type(node) for node in walk(built.expression if isinstance(built, Term) else built)}
    parameter = Parameter("p", integers(0, 5))
    assert Translator({}, {"p": 3}).translate(parameter) == 3
    seen.add(type(parameter))
    assert seen == set(NODE_CLASSES), f"node classes no sample translates: {set(NODE_CLASSES) - seen}"


@settings(max_examples=40)
@given(expressions(depth=3), states())
def test_z3_values_equal_the_evaluator(drawn: tuple[str, Term], state: dict[str, Value]) -> None:
    _, term = drawn
    expected = reference(term.expression, state)
    if expected is None:
        return
    assert z3_value(term.expression, state, None) == expected
    assert z3_value(term.expression, state, 16) == expected


def successors_by_z3(
    encoding: Encoding, state: State, width: int, limit: int = 10_000
) -> set[tuple[int, tuple[Value, ...], State]]:
    """Every (grounded action, target) Z3 allows from a concrete state, by blocking each model. The
    pre-state is symbolic (as in BMC) and pinned to ``state`` by constraints, so guards and updates
    go through the translator rather than folding to constants. Stops after ``limit`` + 1 finds."""
    machine = encoding.machine
    with bit_vectors(width):
        pre, post = encoding.state("pre"), encoding.state("next")
        selector = values_module.integer_constant("selector")
        solver = z3.Solver()
        for name, value in zip(machine.variables, state, strict=True):
            solver.add(to_z3(values_module.equal(pre[name], lift_value(value, machine.variables[name].sort))))
        solver.add(to_z3(encoding.domain(pre)), to_z3(encoding.domain(post)))
        solver.add(*[to_z3(constraint) for constraint in encoding.transition(pre, post, selector, "next")])
        found = set()
        components = [component for name in encoding.sorts for component in flatten(encoding.sorts[name], post[name])]
        while len(found) <= limit and solver.check() == z3.sat:
            model = solver.model()
            grounded = encoding.grounded[values_module.integer_of(model.eval(selector, model_completion=True))]
            found.add((grounded.action, grounded.arguments, encoding.decode_state(post, model)))
            solver.add(
                z3.Or(
                    selector != model.eval(selector, model_completion=True),
                    *[c != model.eval(c, model_completion=True) for c in components],
                )
            )
        return found


@cache
def reading(protocol: str, variant: str) -> tuple[InterpretedSystem, Encoding, int]:
    """A seed instance's concrete system, its Z3 encoding and integer width (built once)."""
    machine = get_protocol(protocol).instance(variant).machine()
    encoding = Encoding(machine)
    return InterpretedSystem(machine), encoding, encoding.integer_width()


def walk_to(system: InterpretedSystem, length: int, seed: int) -> State:
    """A reachable state: ``length`` random steps (seeded) from the initial one, fewer at a deadlock."""
    chooser, state = random.Random(seed), system.initial()
    for _ in range(length):
        targets = [t.target for t in system.transitions(state) if t.out_of_bounds is None]
        if not targets:
            break
        state = chooser.choice(targets)
    return state


SEEDS = [(protocol, variant) for protocol in sorted(PROTOCOLS) for variant in ("pre-fix", "post-fix")]


@pytest.mark.parametrize(("protocol", "variant"), SEEDS)
@settings(max_examples=max(4, settings.default.max_examples // 6))  # a sixth of the profile's: ~1.5 s each
@given(length=st.integers(min_value=0, max_value=80), seed=st.integers(min_value=0, max_value=2**32))
def test_z3_successor_sets_equal_the_explicit_ones(protocol: str, variant: str, length: int, seed: int) -> None:
    """For a reachable state of every model's seed (a random walk of up to 80 seeded steps that
    Hypothesis draws: past every seed's diameter), the (action, arguments, successor) triples Z3
    allows for one transition are exactly the explicit engine's."""
    system, encoding, width = reading(protocol, variant)
    state = walk_to(system, length, seed)
    explicit = {(t.action, t.arguments, t.target) for t in system.transitions(state) if t.out_of_bounds is None}
    assert successors_by_z3(encoding, state, width, limit=len(explicit)) == explicit


# ------------------------------------------------------------------------------------------------ BMC
def small_machine(fixed: bool) -> Machine:
    """Two ranks; each posts a SUM then may post a barrier; the unfixed one lets rank 1 skip to it."""
    machine = Machine("small", hang_bound=4)
    Rank = IndexSort("Rank", 2)
    stage = machine.variable("stage", MapSort(Rank, integers(0, 3)), (0, 0))
    total = machine.variable("total", integers(0, 4 if fixed else 2), 0)  # too small when not fixed
    group = Communicator(
        machine, "group", Rank, {"sum": all_reduce_sum(), "barrier": barrier()}, payload=integers(0, 1)
    )

    def post_sum(rank: Term) -> Step:
        return Step(stage[rank] == 0, {stage: stage.set(rank, 1), **group.post(rank, "sum", 1)})

    def skip(rank: Term) -> Step:
        return Step(
            (stage[rank] == 0) & (rank == 1) & (not fixed), {stage: stage.set(rank, 2), **group.post(rank, "barrier")}
        )

    def after_sum(rank: Term) -> Step:
        return Step(
            (stage[rank] == 1) & group.done(rank),
            {stage: stage.set(rank, 2), total: total + group.result_of(rank), **group.post(rank, "barrier")},
        )

    def finish(rank: Term) -> Step:
        return Step((stage[rank] == 2) & group.done(rank), {stage: stage.set(rank, 3), **group.consume(rank)})

    for name, function in (("post_sum", post_sum), ("skip", skip), ("after_sum", after_sum), ("finish", finish)):
        machine.add_action(name, function, actor="rank:{rank}", rank=Rank)
    machine.always("small_total", total <= 4)
    machine.sometimes("both_finished", all_of(Rank, lambda r: stage[r] == 3))
    machine.set_final(all_of(Rank, lambda r: stage[r] == 3))
    return machine


@pytest.mark.parametrize("fixed", [False, True])
def test_bmc_agrees_with_bfs_on_a_small_machine(fixed: bool) -> None:
    explicit = check(small_machine(fixed), engine="bfs")
    symbolic = check(small_machine(fixed), "bmc", depth=explicit.stats.depth + 1)
    assert symbolic.stats.states is None and symbolic.stats.transitions is None
    for mine, theirs in zip(symbolic.properties, explicit.properties, strict=True):
        assert mine.name == theirs.name
        always = theirs.kind.value == "always"
        if theirs.verdict is Verdict.VIOLATED and always:
            assert mine.verdict is Verdict.VIOLATED and mine.path is not None and theirs.path is not None
            assert mine.path.length == theirs.path.length, mine.name
        elif theirs.verdict is Verdict.HOLDS and always:
            assert mine.verdict is Verdict.HOLDS_WITHIN_BOUND, mine.name
        elif theirs.verdict is Verdict.VIOLATED:  # a sometimes with no witness anywhere: none within the bound
            assert mine.verdict is Verdict.INCONCLUSIVE
        else:  # sometimes, witnessed: equal shortest witnesses
            assert mine.verdict is theirs.verdict and mine.path is not None and theirs.path is not None
            assert mine.path.length == theirs.path.length
    if not fixed:
        assert explicit.property_result("no_collective_mismatch").verdict is Verdict.VIOLATED
        bounds = symbolic.property_result("in_bounds")
        assert bounds.verdict is Verdict.VIOLATED and bounds.detail == explicit.property_result("in_bounds").detail


def test_a_translator_bug_is_caught_by_the_concrete_re_run(monkeypatch: pytest.MonkeyPatch) -> None:
    real_equal = translate_module.equal

    def broken_equal(left: object, right: object) -> object:  # a deliberately wrong translation of ==
        return values_module.negate(real_equal(left, right))  # type: ignore[arg-type]

    monkeypatch.setattr(translate_module, "equal", broken_equal)
    with pytest.raises(TranslationBug):
        BoundedModelChecker(small_machine(False).finish(), 6).run()


def test_in_sort_rejects_values_outside_the_sort() -> None:
    sort = MapSort(IndexSort("Rank", 2), integers(0, 2))
    with bit_vectors(8):
        assert values_module.known_scalar(in_sort(sort, (1, 2))) is True
        assert values_module.known_scalar(in_sort(sort, (1, 3))) is False
        assert values_module.known_scalar(in_sort(BOOL, True)) is True


@pytest.mark.slow
def test_bmc_finds_the_dp_pause_pre_fix_violations_at_the_explicit_lengths() -> None:
    instance = get_protocol("dp-pause").instance("pre-fix")
    explicit = check(instance, engine="bfs")
    symbolic = check(instance, "bmc", depth=20)
    for name in ("quiescent_during_rpc", "no_hang", "no_deadlock"):
        mine, theirs = symbolic.property_result(name), explicit.property_result(name)
        assert mine.verdict is Verdict.VIOLATED and mine.path is not None and theirs.path is not None
        assert mine.path.length == theirs.path.length, name
    assert symbolic.counterexample is not None and explicit.counterexample is not None
    assert symbolic.counterexample.path.length == explicit.counterexample.path.length  # type: ignore[union-attr]


def test_k_induction_proves_the_fixed_small_machine() -> None:
    result = check(small_machine(True), "induction")
    verdicts = {item.name: (item.verdict, item.detail) for item in result.properties}
    assert verdicts["small_total"] == (Verdict.HOLDS, "proved by 1-induction")
    assert verdicts["no_collective_mismatch"][0] is Verdict.HOLDS and verdicts["no_hang"][0] is Verdict.HOLDS
    assert verdicts["no_deadlock"][0] is Verdict.HOLDS and verdicts["in_bounds"][0] is Verdict.HOLDS
    assert result.verdict is Verdict.HOLDS and result.engine == "induction"


def test_k_induction_reports_base_violations_and_failed_steps() -> None:
    broken = check(small_machine(False), "induction")
    assert broken.property_result("no_collective_mismatch").verdict is Verdict.VIOLATED  # found by the base case
    # k = 1 is too weak for no_hang: the failed step is shown as 2 states and the action between them
    weak = check(small_machine(True), "induction", induction_k=1)
    hang = weak.property_result("no_hang")
    assert hang.verdict is Verdict.INCONCLUSIVE and hang.path is not None and hang.path.length == 1
    assert hang.detail == "the induction step fails at k=1 (not necessarily reachable)"


def test_a_strengthening_invariant_makes_a_property_inductive() -> None:
    """x and y step together; "y <= 3" is not 1-inductive alone (y could start at 3 with x below it),
    but with the strengthening "x == y" it is, and a wrong strengthening proves nothing."""

    def build(strengthening: Term | None) -> Machine:
        machine = Machine("pair")
        x = machine.variable("x", integers(0, 5), 0)
        y = machine.variable("y", integers(0, 5), 0)
        machine.add_action("tick", lambda: Step(x < 3, {x: x + 1, y: y + 1}), actor="clock")
        machine.always("y_small", y <= 3)
        machine.set_final(x == 3)
        if strengthening is not None:
            machine.strengthen(strengthening(x, y))  # type: ignore[operator]
        return machine

    plain = check(build(None), "induction", induction_k=1)
    assert plain.property_result("y_small").verdict is Verdict.INCONCLUSIVE
    strengthened = check(build(lambda x, y: x == y), "induction", induction_k=1)  # type: ignore[arg-type]
    assert strengthened.property_result("y_small").verdict is Verdict.HOLDS
    wrong = check(build(lambda x, y: x == y + 1), "induction", induction_k=1)  # type: ignore[arg-type]
    assert wrong.property_result("y_small").verdict is not Verdict.HOLDS


def test_bmc_checks_only_the_selected_properties() -> None:
    result = check(small_machine(False), "bmc", depth=3, properties=["no_collective_mismatch"])
    assert [item.name for item in result.properties] == ["no_collective_mismatch"]
    assert result.properties[0].verdict is Verdict.VIOLATED and result.properties[0].path is not None
    assert result.properties[0].path.length == 2


@pytest.mark.parametrize("solver", ["z3", "cadical"])
def test_a_stopped_bmc_run_says_how_many_steps_each_property_was_checked(solver: str) -> None:
    """A run stopped between depths (here by an interrupt once depth 3 is done) leaves its open
    properties inconclusive, each saying how far it was checked: depth 3 for the state goals, one
    step more for ``in_bounds`` (its goal at depth 3 is an out-of-sort step from frame 3)."""

    def interrupt(statistics: Statistics) -> None:
        if statistics.depth == 4:
            raise KeyboardInterrupt

    checker = BoundedModelChecker(small_machine(True), 10, progress=interrupt, solver=solver)
    result = checker.run()
    assert result.stopped == "interrupted" and result.stats.depth == 3
    details = {item.name: (item.verdict, item.detail) for item in result.properties}
    assert details["small_total"] == (Verdict.INCONCLUSIVE, "no violation within 3 steps; stopped (interrupted)")
    assert details["both_finished"] == (Verdict.INCONCLUSIVE, "no witness within 3 steps; stopped (interrupted)")
    assert details["in_bounds"] == (Verdict.INCONCLUSIVE, "no violation within 4 steps; stopped (interrupted)")
    names = [prop.name for prop in checker.machine.properties]
    assert checker.steps_checked(names.index("small_total")) == 3
    assert checker.steps_checked(names.index("in_bounds")) == 4


def test_a_finished_bmc_run_checked_every_property_to_its_depth() -> None:
    checker = BoundedModelChecker(small_machine(True), 5)
    result = checker.run()
    held = [position for position, item in enumerate(result.properties) if item.verdict is Verdict.HOLDS_WITHIN_BOUND]
    assert held and all(checker.steps_checked(position) == 5 for position in held)
    assert all(result.properties[position].detail == "no violation within 5 steps" for position in held)


def test_an_unknown_answer_ends_a_propertys_checked_depths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past an unknown answer the checked depths are not contiguous: the count stays where it was,
    though the property's deeper queries answer unsat. (CaDiCaL never answers unknown, so its answer
    for ``small_total`` at depth 2 is replaced by one; every other answer is the solver's.)"""
    original = BoundedModelChecker._backend

    def backend_with_one_unknown(self: BoundedModelChecker, started: float) -> tuple[object, object]:
        template, backend = original(self, started)
        query = backend.query
        target = [prop.name for prop in self.machine.properties].index("small_total")

        def answer(goals: list, depth: int, seconds: float | None) -> tuple[str, object]:  # type: ignore[type-arg]
            if depth == 2 and any(goal.position == target for goal in goals):
                return "unknown", None
            return query(goals, depth, seconds)

        backend.query = answer
        return template, backend

    monkeypatch.setattr(BoundedModelChecker, "_backend", backend_with_one_unknown)
    checker = BoundedModelChecker(small_machine(True), 5, solver="cadical")
    result = checker.run()
    later = [query for query in checker.queries if query.depth > 2 and "small_total" in query.properties]
    assert later and all(query.answer == "unsat" for query in later)
    assert result.property_result("small_total").verdict is Verdict.INCONCLUSIVE
    assert result.property_result("small_total").detail == "no violation within 1 step; the solver answered unknown"
    assert result.property_result("in_bounds").detail == "no violation within 5 steps"


def test_bmc_names_bool_action_parameters() -> None:
    """An action with a Bool parameter: BMC names its argument with a Bool constant (an integer
    constant was a Z3 sort mismatch) and finds the violation at the explicit length."""
    machine = Machine("bool-parameter")
    flag = machine.variable("flag", BOOL, False)
    count = machine.variable("count", integers(0, 3), 0)

    @machine.action(actor="client", up=BOOL)
    def bump(up: Term) -> Step:
        return Step(count < 3, {count: count + 1, flag: up})

    machine.always("never_set_twice", ~(flag & (count == 2)))
    explicit = check(machine, engine="bfs")
    symbolic = check(machine, "bmc", depth=2)
    mine, theirs = symbolic.property_result("never_set_twice"), explicit.property_result("never_set_twice")
    assert theirs.path is not None and theirs.path.length == 2
    assert mine.verdict is Verdict.VIOLATED and mine.path is not None and mine.path.length == 2
    assert mine.path.steps[-1].arguments == {"up": True}


@pytest.mark.parametrize(
    "limit", [["--solver-timeout", "0.001"], ["--solver-timeout", "0.0001"], ["--timeout", "0.05"]]
)
def test_a_tiny_solver_timeout_is_inconclusive_with_valid_json(
    capsys: pytest.CaptureFixture[str], limit: list[str]
) -> None:
    """Z3 cancelled after ~1 ms can answer sat with a model that breaks its own assertions; that
    answer used to be decoded (a TranslationBug traceback, exit 1). It is unknown: exit 3, JSON."""
    code = main(["check", "computed-tokens", "--engine", "bmc", "--depth", "12", *limit, "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 3 and payload["verdict"] == "inconclusive"
    assert {item["verdict"] for item in payload["properties"]} <= {"inconclusive", "holds", "holds-within-bound"}
    assert "inconclusive" in {item["verdict"] for item in payload["properties"]}


def test_a_tiny_solver_timeout_leaves_k_induction_inconclusive() -> None:
    result = check(get_protocol("computed-tokens").instance("post-fix"), "induction", solver_timeout=0.001)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert all(item.verdict is not Verdict.VIOLATED for item in result.properties)


def test_ask_returns_checked_models_and_whole_millisecond_timeouts() -> None:
    solver = z3.SolverFor("QF_BV")
    x = z3.BitVec("x", 8)
    solver.add(x * 3 == 9, x < 10)
    answer, model = ask(solver)
    assert answer == z3.sat and model is not None and model.eval(x).as_long() == 3
    solver.add(x == 4)
    assert ask(solver) == (z3.unsat, None)
    assert milliseconds(0.0001) == 1 and milliseconds(0.0015) == 2 and milliseconds(2) == 2000
