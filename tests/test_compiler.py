"""Tests for lockstep.spec.compiler: the generated code agrees with the reference evaluator everywhere.

(a) every IR node class, operator and quantifier is handled by both interpreters; (b) random
well-sorted expressions and states give the same values, transitions and errors; (c) the dp-pause
model steps identically under both; (d) ``stays_in_sort`` never vouches for a value outside its sort.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.models import get_protocol
from lockstep.spec.compiler import CompiledSystem, stays_in_sort
from lockstep.spec.evaluation import Environment, EvaluationError, evaluate
from lockstep.spec.expressions import (
    NODE_CLASSES,
    Bound,
    Comprehension,
    Constant,
    Expression,
    Operation,
    Operator,
    Parameter,
    Quantifier,
    Variable,
    walk,
)
from lockstep.spec.machine import Machine, Step
from lockstep.spec.semantics import InterpretedSystem, ModelError, State, pack
from lockstep.spec.sorts import BOOL, INTEGER, IndexSort, MapSort, SequenceSort, Sort, Value, enum, integers, record
from lockstep.spec.terms import (
    Term,
    all_of,
    any_of,
    constant,
    count_of,
    if_then_else,
    lift,
    map_of,
    max_of,
    maximum,
    min_of,
    minimum,
    record_of,
    sequence_of,
    sum_of,
)

Color = enum("Color", ["RED", "GREEN", "BLUE"])
Rank = IndexSort("Rank", 3)
Small = integers(0, 3)
Signed = integers(-2, 2)
Table = MapSort(Rank, Small)
Flags = MapSort(Rank, BOOL)
Owners = MapSort(Rank, Rank)
Queue = SequenceSort(Small, 3)
Pair = record("Pair", count=Small, on=BOOL, owner=Rank)

# kind -> (state variable, its sort); every kind of expression the generator builds has one variable.
DECLARED: dict[str, tuple[str, Sort]] = {
    "int": ("n", Small),
    "signed": ("m", Signed),
    "bool": ("flag", BOOL),
    "rank": ("rank", Rank),
    "color": ("color", Color),
    "table": ("table", Table),
    "flags": ("flags", Flags),
    "owners": ("owners", Owners),
    "queue": ("queue", Queue),
    "pair": ("pair", Pair),
}
V: dict[str, Term] = {kind: Term(Variable(name, sort)) for kind, (name, sort) in DECLARED.items()}
KINDS = ("int", "bool", "rank", "color", "table", "flags", "owners", "queue", "pair")


def variables_machine(state: dict[str, Value] | None = None) -> Machine:
    machine = Machine("expressions")
    for name, sort in DECLARED.values():
        machine.variable(name, sort, next(iter(sort.values())) if state is None else state[name])
    return machine


def compiled_function(
    system: CompiledSystem, expression: Expression, parameters: tuple[str, ...] = ()
) -> Callable[..., Value]:
    """The expression compiled by the system's own emitter, as ``function(state, *parameters)``."""
    source = system._emitter.source(expression)
    arguments = "".join(f", p_{name}" for name in parameters)
    namespace = system._namespace()
    exec(f"def function(s{arguments}):\n    return {source}\n", namespace)  # noqa: S102 - test-generated code
    return namespace["function"]  # type: ignore[return-value]


def outcome(compute: Callable[..., object], *arguments: object) -> tuple[str, object]:
    """("value", v) or ("error", None): the two interpreters must agree on which, and on v."""
    try:
        return ("value", compute(*arguments))
    except Exception:  # noqa: BLE001 - the kinds of error differ by design (EvaluationError vs IndexError)
        return ("error", None)


# ------------------------------------------------------------------------------------------- (a) coverage
STATE: dict[str, Value] = {
    "n": 2,
    "m": -1,
    "flag": True,
    "rank": 1,
    "color": 2,
    "table": (3, 0, 1),
    "flags": (False, True, False),
    "owners": (2, 2, 0),
    "queue": (1, 3),
    "pair": (2, False, 1),
}
n, flag, rank, table, queue, pair = V["int"], V["bool"], V["rank"], V["table"], V["queue"], V["pair"]
OPERATOR_SAMPLES: dict[Operator, Callable[[], Term | Expression]] = {
    Operator.NOT: lambda: ~flag,
    Operator.AND: lambda: flag & (n > 1),
    Operator.OR: lambda: ~flag | (n > 2),
    Operator.IMPLIES: lambda: flag.implies(n > 2),
    Operator.EQUAL: lambda: n == 2,
    Operator.NOT_EQUAL: lambda: n != 2,
    Operator.LESS: lambda: n < 3,
    Operator.LESS_EQUAL: lambda: n <= 1,
    Operator.GREATER: lambda: n > 1,
    Operator.GREATER_EQUAL: lambda: n >= 3,
    Operator.ADD: lambda: n + 5,
    Operator.SUBTRACT: lambda: n - 5,
    Operator.MULTIPLY: lambda: n * -3,
    Operator.FLOOR_DIVIDE: lambda: (n - 7) // 2,
    Operator.MODULO: lambda: (n - 7) % 3,
    Operator.NEGATE: lambda: -n,
    Operator.MINIMUM: lambda: minimum(n, 1, 4),
    Operator.MAXIMUM: lambda: maximum(n),
    Operator.IF_THEN_ELSE: lambda: if_then_else(flag, n, 0),
    Operator.SELECT: lambda: table[rank],
    Operator.STORE: lambda: table.set(rank, n),
    Operator.LENGTH: lambda: queue.length(),
    Operator.AT: lambda: queue[1],
    Operator.APPEND: lambda: queue.append(n),
    Operator.TAIL: lambda: queue.tail(),
    Operator.FIELD: lambda: pair.field("owner"),
    Operator.WITH_FIELD: lambda: pair.with_field("on", True),
    Operator.RECORD: lambda: record_of(Pair, count=n, on=flag, owner=0),
    Operator.SEQUENCE: lambda: sequence_of(Queue, n, 1),
    Operator.MAP: lambda: Operation(Operator.MAP, (Constant(1, Small), n.expression, Constant(0, Small)), Table),
}
QUANTIFIER_SAMPLES: dict[Quantifier, Callable[[], Term]] = {
    Quantifier.ALL: lambda: all_of(Rank, lambda r: table[r] >= 0),
    Quantifier.ANY: lambda: any_of(Color, lambda c: c == V["color"]),
    Quantifier.SUM: lambda: sum_of(integers(1, 3), lambda v: v * n),
    Quantifier.COUNT: lambda: count_of(BOOL, lambda b: b | flag),
    Quantifier.MAXIMUM: lambda: max_of(Rank, lambda r: table[r]),
    Quantifier.MINIMUM: lambda: min_of(integers(-2, 0), lambda v: v),
    Quantifier.MAP: lambda: map_of(Rank, lambda r: V["owners"][r], Rank),
}


def _as_expression(built: Term | Expression) -> Expression:
    return built.expression if isinstance(built, Term) else built


def test_every_node_class_operator_and_quantifier_is_handled_by_both_interpreters() -> None:
    assert set(OPERATOR_SAMPLES) == set(Operator), f"no sample for {set(Operator) - set(OPERATOR_SAMPLES)}"
    assert set(QUANTIFIER_SAMPLES) == set(Quantifier), f"no sample for {set(Quantifier) - set(QUANTIFIER_SAMPLES)}"
    samples = [_as_expression(build()) for build in (*OPERATOR_SAMPLES.values(), *QUANTIFIER_SAMPLES.values())]
    samples.append(Parameter("who", Rank))
    covered = {type(node) for sample in samples for node in walk(sample)}
    assert covered == set(NODE_CLASSES), f"no sample reaches {set(NODE_CLASSES) - covered}"
    machine = variables_machine(STATE)
    system = CompiledSystem(machine)
    state = pack(machine, STATE)
    for sample in samples:
        reference = evaluate(sample, Environment(STATE, {"who": 2}))
        assert compiled_function(system, sample, ("who",))(state, 2) == reference, sample


# ------------------------------------------------------------------------------------------- (b) generator
QUANTIFIED: dict[str, Sort] = {"rank": Rank, "color": Color, "int": integers(1, 3), "bool": BOOL}


def _returning(term: Term) -> Callable[[], Term]:
    return lambda: term


class ExpressionBuilder:
    """Draws a random well-sorted Term of a given kind; comprehensions bind variables in scope."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.scope: dict[str, list[Term]] = {kind: [] for kind in QUANTIFIED}

    def pick(self, options: list[Callable[[], Term]]) -> Term:
        return options[self.draw(st.integers(0, len(options) - 1))]()

    def quantify(self, kind: str, body: Callable[[Term], Term]) -> Callable[[Term], Term]:
        def bound_body(bound: Term) -> Term:
            self.scope[kind].append(bound)
            try:
                return body(bound)
            finally:
                self.scope[kind].pop()

        return bound_body

    def domain(self) -> str:
        return self.draw(st.sampled_from(sorted(QUANTIFIED)))

    def leaf(self, kind: str) -> Term:
        literal = {
            "int": lambda: lift(self.draw(st.integers(-3, 4))),
            "bool": lambda: lift(self.draw(st.booleans())),
            "rank": lambda: constant(self.draw(st.integers(0, 2)), Rank),
            "color": lambda: constant(self.draw(st.sampled_from(Color.members)), Color),
        }
        options: list[Callable[[], Term]] = [lambda: V[kind]]
        if kind in literal:
            options.append(literal[kind])
        if kind == "int":
            options.append(lambda: V["signed"])
        options.extend(_returning(term) for term in self.scope.get(kind, ()))
        return self.pick(options)

    def make(self, kind: str, depth: int) -> Term:  # noqa: C901 - one table per kind
        if depth <= 0 or self.draw(st.integers(0, 3)) == 0:
            return self.leaf(kind)
        d = depth - 1

        def sub(sub_kind: str) -> Term:
            return self.make(sub_kind, d)

        def ite() -> Term:
            return if_then_else(sub("bool"), sub(kind), sub(kind))

        quantify = self.quantify
        options: dict[str, list[Callable[[], Term]]] = {
            "int": [
                lambda: sub("int") + sub("int"),
                lambda: sub("int") - sub("int"),
                lambda: sub("int") * sub("int"),
                lambda: sub("int") // sub("int"),
                lambda: sub("int") % sub("int"),
                lambda: -sub("int"),
                lambda: minimum(sub("int"), sub("int")),
                lambda: maximum(sub("int")),
                ite,
                lambda: sub("rank"),
                lambda: if_then_else(sub("bool"), sub("rank"), sub("int")),
                lambda: sub("table")[sub("rank")],
                lambda: sub("table")[sub("int")],
                lambda: sub("queue").length(),
                lambda: sub("queue")[sub("int")],
                lambda: sub("queue").head(),
                lambda: sub("pair").field("count"),
                lambda: sum_of(QUANTIFIED[k := self.domain()], quantify(k, lambda _: sub("int"))),
                lambda: count_of(QUANTIFIED[k := self.domain()], quantify(k, lambda _: sub("bool"))),
                lambda: max_of(QUANTIFIED[k := self.domain()], quantify(k, lambda _: sub("int"))),
                lambda: min_of(QUANTIFIED[k := self.domain()], quantify(k, lambda _: sub("int"))),
            ],
            "bool": [
                lambda: ~sub("bool"),
                lambda: sub("bool") & sub("bool"),
                lambda: sub("bool") | sub("bool"),
                lambda: sub("bool").implies(sub("bool")),
                lambda: sub("int") == sub("int"),
                lambda: sub("int") != sub("int"),
                lambda: sub("int") < sub("int"),
                lambda: sub("int") <= sub("int"),
                lambda: sub("int") > sub("int"),
                lambda: sub("int") >= sub("int"),
                lambda: sub("rank") == sub("rank"),
                lambda: sub("color") != sub("color"),
                lambda: sub("flags")[sub("rank")],
                lambda: sub("table") == sub("table"),
                lambda: sub("queue") == sub("queue"),
                lambda: sub("pair") == sub("pair"),
                lambda: sub("owners") != sub("owners"),
                lambda: sub("queue").is_empty(),
                lambda: sub("pair").field("on"),
                ite,
                lambda: all_of(QUANTIFIED[k := self.domain()], quantify(k, lambda _: sub("bool"))),
                lambda: any_of(QUANTIFIED[k := self.domain()], quantify(k, lambda _: sub("bool"))),
            ],
            "rank": [lambda: sub("owners")[sub("rank")], lambda: sub("pair").field("owner"), ite],
            "color": [ite, lambda: if_then_else(sub("bool"), "GREEN", sub("color"))],
            "table": [
                lambda: sub("table").set(sub("rank"), sub("int")),
                lambda: sub("table").set(sub("int"), sub("int")),
                ite,
                lambda: map_of(Rank, quantify("rank", lambda _: sub("int")), Small),
            ],
            "flags": [
                lambda: sub("flags").set(sub("rank"), sub("bool")),
                ite,
                lambda: map_of(Rank, quantify("rank", lambda _: sub("bool")), BOOL),
            ],
            "owners": [
                lambda: sub("owners").set(sub("rank"), sub("int")),
                ite,
                lambda: map_of(Rank, quantify("rank", lambda _: sub("int")), Rank),
            ],
            "queue": [
                lambda: sub("queue").append(sub("int")),
                lambda: sub("queue").tail(),
                ite,
                lambda: sequence_of(Queue, *[sub("int") for _ in range(self.draw(st.integers(0, 3)))]),  # type: ignore[call-overload]
            ],
            "pair": [
                lambda: sub("pair").with_field("count", sub("int")),
                lambda: sub("pair").with_field("owner", sub("int")),
                lambda: sub("pair").with_field("on", sub("bool")),
                ite,
                lambda: record_of(Pair, count=sub("int"), on=sub("bool"), owner=sub("rank")),
            ],
        }
        return self.pick(options[kind])


@st.composite
def expressions(draw: st.DrawFn, kind: str | None = None, depth: int = 3) -> tuple[str, Term]:
    chosen = kind or draw(st.sampled_from(KINDS))
    return chosen, ExpressionBuilder(draw).make(chosen, depth)


@st.composite
def states(draw: st.DrawFn) -> dict[str, Value]:
    return {name: draw(st.sampled_from(list(sort.values()))) for name, sort in DECLARED.values()}


@given(expressions(), states())
def test_compiled_expressions_equal_the_evaluator(drawn: tuple[str, Term], state: dict[str, Value]) -> None:
    _, term = drawn
    machine = variables_machine(state)
    function = compiled_function(CompiledSystem(machine), term.expression)
    packed = pack(machine, state)
    assert outcome(lambda: function(packed)) == outcome(lambda: evaluate(term.expression, Environment(state)))


def one_action_machine(state: dict[str, Value], guard: Term, kind: str, value: Term, invariant: Term) -> Machine:
    machine = variables_machine(state)
    machine.add_action("store", lambda: Step(guard, {V[kind]: value}), actor="tester")
    machine.always("invariant", invariant)
    machine.set_final(~guard)
    return machine.finish()


@given(expressions("bool", 2), expressions(), expressions("bool", 2), states())
def test_compiled_transitions_and_properties_equal_the_interpreter(
    guard: tuple[str, Term], update: tuple[str, Term], invariant: tuple[str, Term], state: dict[str, Value]
) -> None:
    machine = one_action_machine(state, guard[1], update[0], update[1], invariant[1])
    interpreted, compiled = InterpretedSystem(machine), CompiledSystem(machine)
    packed = interpreted.initial()
    assert compiled.initial() == packed
    assert outcome(lambda: compiled.transitions(packed)) == outcome(lambda: interpreted.transitions(packed))
    for position in range(len(machine.properties)):
        assert outcome(compiled.holds, position, packed) == outcome(interpreted.holds, position, packed)
        assert outcome(compiled.holds_at_deadlock, position, packed) == outcome(
            interpreted.holds_at_deadlock, position, packed
        )
    assert outcome(lambda: compiled.is_final(packed)) == outcome(lambda: interpreted.is_final(packed))


def test_an_update_outside_its_sort_is_flagged_by_both() -> None:
    state = {**{name: next(iter(sort.values())) for name, sort in DECLARED.values()}, "n": 3, "rank": 2, "flag": True}
    updates = [
        ("int", n + 1),
        ("owners", V["owners"].set(rank, rank + 1)),
        ("rank", if_then_else(flag, rank + 1, rank)),
        ("pair", pair.with_field("owner", rank + 1)),
    ]
    for kind, value in updates:
        machine = one_action_machine(state, lift(True), kind, value, lift(True))
        expected = InterpretedSystem(machine).transitions(InterpretedSystem(machine).initial())
        assert [transition.out_of_bounds for transition in expected] == [DECLARED[kind][0]], value
        assert CompiledSystem(machine).transitions(CompiledSystem(machine).initial()) == expected, value


def test_a_store_at_a_key_outside_the_map_is_a_model_error_in_both() -> None:
    state = {**{name: next(iter(sort.values())) for name, sort in DECLARED.values()}, "rank": 2}
    machine = one_action_machine(state, lift(True), "table", V["table"].set(rank + 1, 0), lift(True))
    for system in (InterpretedSystem(machine), CompiledSystem(machine)):
        with pytest.raises(ModelError, match="store") as raised:
            system.transitions(system.initial())
        # One bounds check, one error type: both engines fail through lockstep.spec.evaluation.store.
        assert isinstance(raised.value.__cause__, EvaluationError)
        assert "key 3 outside a map of 3 keys" in str(raised.value.__cause__)


# ------------------------------------------------------------------------------------------- (c) dp-pause
@pytest.mark.parametrize("order", ["bfs", "dfs"])
@pytest.mark.parametrize("variant", ["pre-fix", "post-fix"])
def test_dp_pause_compiled_steps_equal_interpreted_steps(variant: str, order: str) -> None:
    """BFS covers the early interleavings, DFS reaches the collective_rpc and resume phases."""
    machine = get_protocol("dp-pause").instance(variant, overrides={"ranks": 2, "requests": 2}).machine()
    interpreted, compiled = InterpretedSystem(machine), CompiledSystem(machine)
    initial = interpreted.initial()
    assert compiled.initial() == initial
    seen: set[State] = {initial}
    frontier: deque[State] = deque([initial])
    actions_fired: set[int] = set()
    while frontier and len(seen) < 1500:
        state = frontier.popleft() if order == "bfs" else frontier.pop()
        expected = interpreted.transitions(state)
        assert compiled.transitions(state) == expected
        for position in range(len(machine.properties)):
            assert compiled.holds(position, state) == interpreted.holds(position, state)
            assert compiled.holds_at_deadlock(position, state) == interpreted.holds_at_deadlock(position, state)
        assert compiled.is_final(state) == interpreted.is_final(state)
        for transition in expected:
            actions_fired.add(transition.action)
            if transition.target not in seen:
                seen.add(transition.target)
                frontier.append(transition.target)
    assert len(seen) >= 1500, "the comparison must cover a few thousand states"
    if order == "dfs":
        missing = {machine.actions[position].name for position in set(range(len(machine.actions))) - actions_fired}
        assert len(missing) <= len(machine.actions) // 10, f"the explored states never fire {sorted(missing)}"


# ------------------------------------------------------------------------------------------- (d) stays_in_sort
TARGETS: dict[str, tuple[Sort, ...]] = {
    "int": (Small, Signed, Rank, INTEGER),
    "bool": (BOOL,),
    "rank": (Rank, Small),
    "color": (Color,),
    "table": (Table, MapSort(Rank, Signed)),
    "flags": (Flags,),
    "owners": (Owners, Table),
    "queue": (Queue, SequenceSort(Small, 1), SequenceSort(Signed, 3)),
    "pair": (Pair,),
}


@given(expressions(), states())
def test_stays_in_sort_never_vouches_for_a_value_outside_the_sort(
    drawn: tuple[str, Term], state: dict[str, Value]
) -> None:
    kind, term = drawn
    for sort in TARGETS[kind]:
        if stays_in_sort(term.expression, sort):
            result = outcome(lambda: evaluate(term.expression, Environment(state)))
            assert result[0] == "error" or sort.contains(result[1]), (sort.name, term)


@pytest.mark.parametrize(
    ("build", "sort", "proved"),
    [
        (lambda: V["table"].set(rank, 2), Table, True),
        (lambda: V["table"].set(rank, n), Table, True),
        (lambda: V["table"].set(rank, n + 1), Table, False),
        (lambda: V["table"].set(rank + 0, 1), Table, False),
        (lambda: V["owners"].set(rank, rank), Owners, True),
        (lambda: V["owners"].set(rank, 1), Owners, True),
        (lambda: V["owners"].set(rank, rank + 1), Owners, False),
        (lambda: V["owners"].set(rank, rank + 1)[rank], Rank, False),
        (lambda: V["owners"][rank], Rank, True),
        (lambda: if_then_else(flag, rank, rank + 1), Rank, False),
        (lambda: if_then_else(flag, rank, 2), Rank, True),
        (lambda: map_of(Rank, lambda r: V["table"][r], Small), Table, True),
        (lambda: map_of(Rank, lambda r: r + 1, Rank), Owners, False),
        (lambda: V["queue"].tail(), Queue, True),
        (lambda: V["queue"].append(1), Queue, False),
        (lambda: pair.with_field("count", 3), Pair, True),
        (lambda: record_of(Pair, count=n, on=flag, owner=rank), Pair, True),
        (lambda: record_of(Pair, count=n, on=flag, owner=n), Pair, False),
        (lambda: V["color"], Color, True),
        (lambda: n == 1, BOOL, True),
        (lambda: n - 1, Small, False),
        (lambda: lift(4), Small, False),
    ],
)
def test_stays_in_sort_examples(build: Callable[[], Term], sort: Sort, proved: bool) -> None:
    assert stays_in_sort(build().expression, sort) is proved


def test_bound_variables_compile_to_their_domain_values() -> None:
    machine = variables_machine(STATE)
    system = CompiledSystem(machine)
    sample = map_of(Rank, lambda r: sum_of(integers(2, 4), lambda v: v * r), integers(0, 20))
    assert isinstance(sample.expression, Comprehension) and isinstance(sample.expression.variable, Bound)
    assert compiled_function(system, sample.expression)(pack(machine, STATE)) == (0, 9, 18)
