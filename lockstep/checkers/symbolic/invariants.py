"""Inductive invariants as proofs: their check on the original encoding, and their readable form.

An invariant is a Z3 formula over the *named state*: one constant per scalar component of the
machine's variables, named as the model names them (``mode[1]``, ``queue.length``, ``queue#0``,
``slot.owner``). It proves an ``always`` property (or that a ``sometimes`` property has no witness)
when three queries on the encoding BMC and k-induction use, with a fresh solver, are unsatisfiable:

- initiation: a state in the sort domains that is initial and violates the invariant;
- consecution: a state in the domains satisfying the invariant, and a transition (the selector
  encoding of ``Encoding.transition``) to a state in the domains that violates it (as in BMC, every
  state of a path lies in the domains: a step whose result leaves them is one the concrete
  semantics leaves undefined, such as the tail of an empty queue, and is no step);
- safety: a state in the domains satisfying the invariant and violating the property (``bad``).

``verify`` runs them and says which one fails, so an engine believes a solver's invariant only
after lockstep has checked it. ``render`` prints an invariant with the model's names, enum members
by name (``mode[0] in {IDLE, READY}``) and Python operators; ``summarize`` makes the few lines a
person reads (``Certificate.summary``): Z3's simplifier first, then every conjunct over one scalar
merged, per scalar, into the set of values it allows (``d_phase[1] in {DONE, ABORTED}``, ``n in
0..3``; nothing when it allows the whole sort), then the conjuncts over several scalars, smallest
first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

import z3

from lockstep.checkers.symbolic.encoding import Encoding, flatten, scalar_sorts
from lockstep.checkers.symbolic.solving import ask
from lockstep.checkers.symbolic.values import Symbolic, conjoin, declare, integer_constant, negate, to_z3
from lockstep.spec.machine import PropertyKind
from lockstep.spec.sorts import BoolSort, EnumSort, IndexSort, IntSort, Sort


@dataclass(frozen=True)
class Certificate:
    """A checked invariant: the formula over the named state, its rendering, its number of atoms,
    and its readable lines (``summarize``: the same invariant, simplified, one conjunct a line)."""

    formula: z3.BoolRef
    text: str
    size: int
    summary: tuple[str, ...] = ()


def named_state(encoding: Encoding) -> dict[str, Symbolic]:
    """The state whose constants carry the model's own names (invariants are written over it)."""
    return {name: declare(sort, name) for name, sort in encoding.sorts.items()}


def components(encoding: Encoding, state: dict[str, Symbolic]) -> list[z3.ExprRef]:
    """The scalar components of a state as Z3 terms, in layout order."""
    return [to_z3(component) for name, sort in encoding.sorts.items() for component in flatten(sort, state[name])]


def bad(encoding: Encoding, position: int, state: dict[str, Symbolic]) -> Symbolic:
    """What no reachable state may satisfy: an ``always`` property's violation (deadlock condition
    included), or a ``sometimes`` property's predicate (then the proof says it has no witness)."""
    prop = encoding.machine.properties[position]
    if prop.kind is PropertyKind.SOMETIMES:
        return encoding.defined_predicate(prop.predicate, state)
    return negate(encoding.holds(position, state))


def free_constants(terms: list[z3.ExprRef]) -> list[z3.ExprRef]:
    """The uninterpreted constants the terms mention, each once, in a stable order."""
    seen: set[int] = set()
    found: dict[int, z3.ExprRef] = {}
    pending = list(terms)
    while pending:
        term = pending.pop()
        if term.get_id() in seen:
            continue
        seen.add(term.get_id())
        if z3.is_const(term) and term.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            found[term.get_id()] = term
        else:
            pending.extend(term.children())
    return [found[key] for key in sorted(found)]


def verify(encoding: Encoding, position: int, invariant: z3.BoolRef, timeout: float | None = None) -> str | None:
    """None if ``invariant`` (over ``named_state``) is inductive and excludes ``bad``; otherwise
    which check fails (or could not be decided within ``timeout`` CPU seconds per query). Run in
    the arithmetic the invariant was found in."""
    return verify_inductive(encoding, invariant, timeout) or verify_safe(encoding, position, invariant, timeout)


def verify_inductive(encoding: Encoding, invariant: z3.BoolRef, timeout: float | None = None) -> str | None:
    """``verify``'s initiation and consecution checks (they do not depend on the property): None
    if both hold, else which fails."""
    names = {term.get_id() for term in components(encoding, named_state(encoding))}
    strangers = [str(term) for term in free_constants([invariant]) if term.get_id() not in names]
    if strangers:
        return f"the invariant mentions {', '.join(sorted(strangers)[:3])}, which are not state variables"
    before, after = encoding.state("check"), encoding.state("check'")
    selector = integer_constant("action@check")
    domain = to_z3(encoding.domain(before))
    return _unsatisfiable(
        {
            "initiation (an initial state violates it)": [
                domain,
                to_z3(encoding.initial(before)),
                z3.Not(_at(encoding, invariant, before)),
            ],
            "consecution (a step from a state satisfying it leads to one that does not)": [
                domain,
                _at(encoding, invariant, before),
                *[to_z3(part) for part in encoding.transition(before, after, selector, "check")],
                to_z3(encoding.domain(after)),
                z3.Not(_at(encoding, invariant, after)),
            ],
        },
        timeout,
    )


def verify_safe(encoding: Encoding, position: int, invariant: z3.BoolRef, timeout: float | None = None) -> str | None:
    """``verify``'s safety check: no state in the domains satisfying ``invariant`` is ``bad`` for
    property ``position``; None if so, else why not."""
    before = encoding.state("check")
    assertions = [
        to_z3(encoding.domain(before)),
        _at(encoding, invariant, before),
        to_z3(conjoin([bad(encoding, position, before)])),
    ]
    return _unsatisfiable({"safety (a state satisfying it violates the property)": assertions}, timeout)


def _at(encoding: Encoding, invariant: z3.BoolRef, state: dict[str, Symbolic]) -> z3.BoolRef:
    """``invariant`` (over the named state) read in ``state``."""
    named = components(encoding, named_state(encoding))
    return z3.substitute(invariant, *zip(named, components(encoding, state), strict=True))


def _unsatisfiable(queries: dict[str, list[z3.BoolRef]], timeout: float | None) -> str | None:
    """None if every query is unsatisfiable, else the first that is not (or is not decided)."""
    for label, assertions in queries.items():
        solver = z3.Solver()
        solver.add(*assertions)
        answer, _ = ask(solver, cpu=timeout)
        if answer == z3.sat:
            return f"the invariant fails {label}"
        if answer != z3.unsat:
            return f"the re-check of {label.split(' ')[0]} was not decided ({answer})"
    return None


def conjuncts(formula: z3.BoolRef) -> list[z3.BoolRef]:
    if z3.is_and(formula):
        return [part for child in formula.children() for part in conjuncts(child)]
    if z3.is_true(formula):
        return []
    return [formula]


def without_domain(encoding: Encoding, invariant: z3.BoolRef, timeout: float = 5.0) -> z3.BoolRef:
    """The invariant less the conjuncts the sort domains imply (``verify`` assumes the domains)."""
    domain = to_z3(encoding.domain(named_state(encoding)))
    kept = []
    for part in conjuncts(z3.simplify(invariant)):
        solver = z3.Solver()
        solver.add(domain, z3.Not(part))
        if ask(solver, cpu=timeout)[0] != z3.unsat:
            kept.append(part)
    if not kept:
        return z3.BoolVal(True)
    return z3.And(*kept) if len(kept) > 1 else kept[0]


def size(formula: z3.ExprRef) -> int:
    """The number of atoms (comparisons and Boolean variables) of a formula."""
    if z3.is_and(formula) or z3.is_or(formula) or z3.is_not(formula) or z3.is_implies(formula):
        return sum(size(child) for child in formula.children())
    if z3.is_true(formula) or z3.is_false(formula):
        return 0
    return 1


def certificate(encoding: Encoding, invariant: z3.BoolRef) -> Certificate:
    scalars = {
        str(term): sort
        for name, variable_sort in encoding.sorts.items()
        for term, sort in zip(
            flatten(variable_sort, named_state(encoding)[name]), scalar_sorts(variable_sort), strict=True
        )
    }
    domain = to_z3(encoding.domain(named_state(encoding)))
    return Certificate(invariant, render(invariant, scalars), size(invariant), summarize(invariant, scalars, domain))


# ------------------------------------------------------------------------------------ the summary
ENUMERABLE = 256  # a scalar whose sort has at most this many values has its allowed set computed
SIMPLIFY_MILLISECONDS = 5000


def summarize(formula: z3.BoolRef, scalars: dict[str, Sort], domain: z3.BoolRef | None = None) -> tuple[str, ...]:
    """The invariant as lines a person reads, equivalent to it in the sort domains: one line per
    scalar it restricts on its own (the set of values allowed), then one per conjunct relating
    several scalars, smallest first, less those ``domain`` (the sort domains) implies. Empty when
    the invariant is ``True`` in the domains."""
    allowed: dict[str, set[int]] = {}
    order: list[str] = []
    relations: list[z3.BoolRef] = []
    for part in conjuncts(_simplified(formula)):
        names = {str(constant) for constant in _constants(part)}
        (name,) = names if len(names) == 1 else (None,)
        values = None if name is None else _allowed(part, name, scalars)
        if name is None or values is None:
            relations.append(part)
            continue
        if name not in allowed:
            allowed[name], order = set(values), [*order, name]
        else:
            allowed[name] &= values
    lines = _by_index(
        [
            (name, _membership(allowed[name], scalars[name]))
            for name in order
            if allowed[name] != set(_domain(scalars[name]) or ())
        ]
    )
    if domain is not None:
        relations = [part for part in relations if not _implied(domain, part)]
    relations.sort(key=size)
    return (*lines, *dict.fromkeys(render(part, scalars) for part in relations))


IMPLIED_SECONDS = 1.0  # CPU for asking whether the domains imply one conjunct (unknown: it is kept)


def _implied(domain: z3.BoolRef, part: z3.BoolRef) -> bool:
    solver = z3.Solver()
    solver.add(domain, z3.Not(part))
    return ask(solver, cpu=IMPLIED_SECONDS)[0] == z3.unsat


def _simplified(formula: z3.BoolRef) -> z3.BoolRef:
    """Z3's contextual simplifier (bounded in time; the formula as it is when it runs out)."""
    goal = z3.Goal()
    goal.add(formula)
    tactic = z3.TryFor(z3.Then("simplify", "propagate-values", "ctx-simplify", "simplify"), SIMPLIFY_MILLISECONDS)
    try:
        (subgoal,) = tactic(goal)
    except (z3.Z3Exception, ValueError):
        return formula
    parts = list(subgoal)
    if not parts:
        return z3.BoolVal(True)
    return z3.And(*parts) if len(parts) > 1 else parts[0]


def _constants(term: z3.ExprRef) -> Iterator[z3.ExprRef]:
    """The uninterpreted constants (the state's scalars) of ``term``."""
    seen: set[int] = set()
    stack = [term]
    while stack:
        node = stack.pop()
        if node.get_id() in seen:
            continue
        seen.add(node.get_id())
        if z3.is_const(node) and node.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            yield node
        else:
            stack.extend(node.children())


def _domain(sort: Sort | None) -> list[int] | None:
    """The values of a scalar of ``sort`` as Z3 numbers them (members by position), when few enough."""
    if sort is None:
        return None
    if isinstance(sort, EnumSort):
        return list(range(len(sort.members)))
    if isinstance(sort, BoolSort):
        return [0, 1]
    if isinstance(sort, IntSort) and not sort.is_finite:
        return None
    if isinstance(sort, IntSort | IndexSort):
        values = [value for value in islice(sort.values(), ENUMERABLE + 1) if isinstance(value, int)]
        return values if 0 < len(values) <= ENUMERABLE else None
    return None


def _allowed(part: z3.BoolRef, name: str, scalars: dict[str, Sort]) -> set[int] | None:
    """The values of the scalar ``name`` that ``part`` (over it alone) allows; None if not enumerable."""
    domain = _domain(scalars.get(name))
    if domain is None:
        return None
    (constant,) = set(_constants(part))
    values = set()
    for value in domain:
        if z3.is_bool(constant):
            number: z3.ExprRef = z3.BoolVal(bool(value))
        elif z3.is_bv(constant):
            number = z3.BitVecVal(value, constant.size())
        else:
            number = z3.IntVal(value)
        answer = z3.simplify(z3.substitute(part, (constant, number)))
        if not (z3.is_true(answer) or z3.is_false(answer)):
            return None
        if z3.is_true(answer):
            values.add(value)
    return values


_INDEX = re.compile(r"\[(\d+)\]")


def _by_index(restrictions: list[tuple[str, str]]) -> list[str]:
    """``name condition`` lines; the names that differ in one index only and share a condition
    (``steps[0] != 3``, ``steps[1] != 3``) become one line (``steps[i] != 3 for i in 0, 1``)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, condition in restrictions:
        groups.setdefault((_INDEX.sub("[]", name), condition), []).append(name)
    lines: list[str] = []
    for (_, condition), names in groups.items():
        indices = [_INDEX.findall(name) for name in names]
        varying = [position for position in range(len(indices[0])) if len({row[position] for row in indices}) > 1]
        if len(names) == 1 or len(varying) != 1:
            lines.extend(f"{name} {condition}" for name in names)
            continue
        matches = list(_INDEX.finditer(names[0]))[varying[0]]
        pattern = names[0][: matches.start()] + "[i]" + names[0][matches.end() :]
        lines.append(
            f"{pattern} {condition} for i in {', '.join(sorted((row[varying[0]] for row in indices), key=int))}"
        )
    return lines


def _membership(values: set[int], sort: Sort) -> str:
    """The condition (``== v``, ``!= v``, ``in {…}``, ``in a..b``) a scalar of ``sort`` meets
    exactly at ``values``."""
    domain = _domain(sort) or []
    if not values:
        return "in {}  (no value allowed: the invariant is False)"
    if len(values) == 1:
        return f"== {_spell(sort, next(iter(values)))}"
    missing = [value for value in domain if value not in values]
    if len(missing) == 1:
        return f"!= {_spell(sort, missing[0])}"
    ordered = sorted(values)
    if not isinstance(sort, EnumSort | BoolSort):
        runs: list[tuple[int, int]] = []
        for value in ordered:
            if runs and value == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], value)
            else:
                runs.append((value, value))
        if len(runs) < len(ordered):
            return "in " + ", ".join(f"{low}..{high}" if high > low else str(low) for low, high in runs)
    return f"in {{{', '.join(_spell(sort, value) for value in ordered)}}}"


def _spell(sort: Sort, value: int) -> str:
    if isinstance(sort, EnumSort):
        return sort.members[value]
    return str(bool(value)) if isinstance(sort, BoolSort) else str(value)


# ------------------------------------------------------------------------------------ rendering
_CONNECTIVES = {z3.Z3_OP_AND: (" and ", 2), z3.Z3_OP_OR: (" or ", 1), z3.Z3_OP_IMPLIES: (" implies ", 0)}
_COMPARISONS = {
    z3.Z3_OP_EQ: "==",
    z3.Z3_OP_LE: "<=",
    z3.Z3_OP_GE: ">=",
    z3.Z3_OP_LT: "<",
    z3.Z3_OP_GT: ">",
    z3.Z3_OP_SLEQ: "<=",
    z3.Z3_OP_SGEQ: ">=",
    z3.Z3_OP_SLT: "<",
    z3.Z3_OP_SGT: ">",  # bit-vectors: signed
}
_NEGATED = {
    z3.Z3_OP_LE: ">",
    z3.Z3_OP_GE: "<",
    z3.Z3_OP_LT: ">=",
    z3.Z3_OP_GT: "<=",
    z3.Z3_OP_SLEQ: ">",
    z3.Z3_OP_SGEQ: "<",
    z3.Z3_OP_SLT: ">=",
    z3.Z3_OP_SGT: "<=",
}
_ARITHMETIC = {
    z3.Z3_OP_ADD: (" + ", 5),
    z3.Z3_OP_MUL: (" * ", 6),
    z3.Z3_OP_SUB: (" - ", 5),
    z3.Z3_OP_BADD: (" + ", 5),
    z3.Z3_OP_BMUL: (" * ", 6),
    z3.Z3_OP_BSUB: (" - ", 5),
}
_ATOM = 9


def render(formula: z3.ExprRef, scalars: dict[str, Sort]) -> str:
    """A formula with the model's names, enum members by name, Python-like operators."""
    return _render(formula, scalars)[0]


def _render(term: z3.ExprRef, scalars: dict[str, Sort]) -> tuple[str, int]:  # noqa: C901 - one branch per operator
    """The text of ``term`` and its precedence (higher binds tighter)."""
    if z3.is_true(term):
        return "True", _ATOM
    if z3.is_false(term):
        return "False", _ATOM
    if z3.is_int_value(term) or z3.is_bv_value(term):
        value = term.as_signed_long() if z3.is_bv_value(term) else term.as_long()
        return str(value), _ATOM if value >= 0 else 4
    if z3.is_const(term):
        return str(term), _ATOM
    kind, children = term.decl().kind(), term.children()
    if kind in _CONNECTIVES:
        separator, level = _CONNECTIVES[kind]
        return separator.join(_wrap(child, scalars, level + 1) for child in children), level
    if kind == z3.Z3_OP_NOT:
        child = children[0]
        if z3.is_eq(child):
            return _comparison("!=", child.children(), scalars), 4
        flipped = _NEGATED.get(child.decl().kind()) if z3.is_app(child) else None
        if flipped is not None:
            return _comparison(flipped, child.children(), scalars), 4
        return "not " + _wrap(child, scalars, 3), 3
    if kind == z3.Z3_OP_DISTINCT and len(children) == 2:
        return _comparison("!=", children, scalars), 4
    if kind in _COMPARISONS:
        return _comparison(_COMPARISONS[kind], children, scalars), 4
    if kind == z3.Z3_OP_ADD:
        text = _wrap(children[0], scalars, 5)
        for child in children[1:]:
            negative = _negated(child)
            text += " - " + _wrap(negative, scalars, 6) if negative is not None else " + " + _wrap(child, scalars, 6)
        return text, 5
    if kind in _ARITHMETIC:
        separator, level = _ARITHMETIC[kind]
        if kind == z3.Z3_OP_MUL and len(children) == 2 and z3.is_int_value(children[0]) and children[0].as_long() == -1:
            return "-" + _wrap(children[1], scalars, 7), 7
        return separator.join(_wrap(child, scalars, level + 1) for child in children), level
    if kind in (z3.Z3_OP_UMINUS, z3.Z3_OP_BNEG):
        return "-" + _wrap(children[0], scalars, 7), 7
    if kind in (z3.Z3_OP_IDIV, z3.Z3_OP_DIV):
        return f"{_wrap(children[0], scalars, 6)} // {_wrap(children[1], scalars, 7)}", 6
    if kind == z3.Z3_OP_MOD:
        return f"{_wrap(children[0], scalars, 6)} % {_wrap(children[1], scalars, 7)}", 6
    if kind == z3.Z3_OP_ITE:
        condition, then, otherwise = (_render(child, scalars)[0] for child in children)
        return f"({then} if {condition} else {otherwise})", _ATOM
    return str(term), _ATOM  # anything else in Z3's own syntax (never seen in Spacer's invariants)


def _wrap(term: z3.ExprRef, scalars: dict[str, Sort], level: int) -> str:
    text, own = _render(term, scalars)
    return text if own >= level else f"({text})"


def _negated(term: z3.ExprRef) -> z3.ExprRef | None:
    """``y`` for ``-1 * y`` (how Z3 writes a subtraction), else None."""
    if z3.is_mul(term) and len(term.children()) == 2:
        coefficient, rest = term.children()
        if z3.is_int_value(coefficient) and coefficient.as_long() == -1:
            return rest
    return None


def _comparison(operator: str, operands: list[z3.ExprRef], scalars: dict[str, Sort]) -> str:
    left, right = operands
    if z3.is_int_value(left) and z3.is_const(right) and not z3.is_int_value(right):  # constant on the right
        left, right = right, left
        operator = {"<=": ">=", ">=": "<=", "<": ">", ">": "<"}.get(operator, operator)
    sort = scalars.get(str(left)) if z3.is_const(left) else None
    if isinstance(sort, EnumSort) and z3.is_int_value(right):
        value = right.as_long()
        if operator in ("==", "!=") and 0 <= value < len(sort.members):
            return f"{left} {operator} {sort.members[value]}"
        members = [member for position, member in enumerate(sort.members) if _compare(operator, position, value)]
        return f"{left} in {{{', '.join(members)}}}"
    if operator in ("<", ">") and (z3.is_int_value(right) or z3.is_bv_value(right)):  # x > -1 reads x >= 0
        bound = right.as_signed_long() if z3.is_bv_value(right) else right.as_long()
        operator, bound = (">=", bound + 1) if operator == ">" else ("<=", bound - 1)
        return f"{_wrap(left, scalars, 5)} {operator} {bound}"
    if operator == "==" and z3.is_bool(left):
        return f"{_wrap(left, scalars, 4)} == {_wrap(right, scalars, 4)}"
    return f"{_wrap(left, scalars, 5)} {operator} {_wrap(right, scalars, 4)}"


def _compare(operator: str, left: int, right: int) -> bool:
    return {
        "==": left == right,
        "!=": left != right,
        "<=": left <= right,
        ">=": left >= right,
        "<": left < right,
        ">": left > right,
    }[operator]
