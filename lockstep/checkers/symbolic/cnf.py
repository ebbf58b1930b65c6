"""The CaDiCaL backend of BMC: the template bit-blasted once to CNF, its clauses renamed per frame.

Each template formula (the step, the initial state, a frame's facts, one output literal per goal,
each ordering's constraint on a selector and its flags at two adjacent frames) is turned into clauses once, by Z3's
``simplify``, ``bit-blast`` and ``tseitin-cnf`` tactics, after every bit-vector constant of the
template frames is replaced by a concatenation of named Boolean bits. A frame is then a renaming of
clause literals: the named bits of the template's ``pre``/``post`` frames to the bits of frames k
and k+1, every other (Tseitin) variable to a fresh one. CaDiCaL 1.9.5 (``python-sat``) solves the
growing clause set incrementally; a depth's goals are asked at once under an activation literal,
and once that is unsat each asked goal's output at that depth is asserted false (a lemma).
A model is read back as bit-vector values of each frame's constants and decoded through the same
terms as with Z3 (and, as there, every path is re-run through ``evaluate`` by the engine).
CaDiCaL cannot be interrupted from Python: the run's time limit is checked between queries only,
so a query may end after it, and a per-query limit is refused.
"""

from __future__ import annotations

from typing import Any

import z3
from pysat.solvers import Cadical195

from lockstep.checkers.symbolic.backends import Ordering, Valuation
from lockstep.checkers.symbolic.unrolling import POST, PRE, Goal, Renaming, Template
from lockstep.checkers.symbolic.values import Symbolic

FIRST, SECOND = "P", "Q"  # the two template frames the clauses are written over
# CaDiCaL's "--unsat" configuration: no stabilising phases and no local search, which help find
# models; BMC's deep queries are unsat until a violation (README, "Z3 engines", measured)
UNSAT_OPTIONS = {"stabilize": 0, "walk": 0}
_TACTIC = z3.Then("simplify", "bit-blast", "tseitin-cnf")


class _Clauses:
    """Clauses over local variables 1..n; ``interface[i]`` names a local variable that is a bit of a
    template frame (as ``(frame tag, name)``), the others are auxiliary."""

    def __init__(self, formula: z3.BoolRef, bits: dict[str, tuple[str, str]]) -> None:
        goal = z3.Goal()
        goal.add(formula)
        self.clauses: list[list[int]] = []
        self.interface: dict[int, tuple[str, str]] = {}
        self.count = 0
        for subgoal in _TACTIC(goal):
            self._read(subgoal.dimacs(), bits)

    def _read(self, dimacs: str, bits: dict[str, tuple[str, str]]) -> None:
        """Z3's DIMACS text: clauses, and ``c <number> <name>`` for every named variable."""
        offset = self.count
        for line in dimacs.splitlines():
            if line.startswith("p cnf"):
                self.count += int(line.split()[2])
            elif line.startswith("c "):
                _, number, name = line.split(" ", 2)
                if name in bits:
                    self.interface[offset + int(number)] = bits[name]
            elif line:
                literals = [int(literal) for literal in line.split()[:-1]]
                self.clauses.append([literal + offset if literal > 0 else literal - offset for literal in literals])


class _Bits:
    """The Boolean bits standing for one template frame's bit-vector constants."""

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str]] = {}  # bit name -> (frame tag, bit key)
        self.pairs: list[tuple[z3.ExprRef, z3.ExprRef]] = []

    def add(self, constant: z3.ExprRef, tag: str) -> None:
        name = constant.decl().name()
        key = name.replace(f"@{tag}", "", 1)
        if z3.is_bool(constant):
            self.names[name] = (tag, key)
            return
        bits = []
        for bit in range(constant.size()):
            bit_name = f"{name}!{bit}"
            self.names[bit_name] = (tag, f"{key}!{bit}")
            bits.append(z3.If(z3.Bool(bit_name), z3.BitVecVal(1, 1), z3.BitVecVal(0, 1)))
        self.pairs.append((constant, z3.Concat(*reversed(bits)) if len(bits) > 1 else bits[0]))


class CadicalBackend:
    """BMC's unrolling as CNF for CaDiCaL (see the module doc)."""

    def __init__(self, template: Template, orderings: list[Ordering], options: dict[str, int] | None = None) -> None:
        self.template = template
        self.solver = Cadical195()
        if options:  # CaDiCaL's own options (src/options.hpp), e.g. UNSAT_OPTIONS
            self.solver.configure(options)
        self.variables = 0
        self.named: dict[tuple[int, str], int] = {}  # (frame, bit key) -> solver variable
        bits = _Bits()
        pairs = [*template.frame(PRE, FIRST), *template.frame(POST, SECOND)]
        self.constants: dict[str, list[z3.ExprRef]] = {FIRST: [], SECOND: []}
        for tag in (FIRST, SECOND):
            for _, term in template.frame(PRE if tag == FIRST else POST, tag):
                for constant in _uninterpreted(term):
                    bits.add(constant, tag)
                    self.constants[tag].append(constant)
        selectors = {tag: z3.BitVec(f"action@{tag}", template.selector.size()) for tag in (FIRST, SECOND)}
        for tag, selector in selectors.items():
            bits.add(selector, tag)
        to_frames = Renaming([*pairs, (template.selector, selectors[FIRST])])
        to_bits = Renaming(bits.pairs)

        def clauses(formula: z3.BoolRef) -> _Clauses:
            return _Clauses(to_bits(to_frames(formula)), bits.names)

        self.step = clauses(template.step)
        self.facts = clauses(template.facts)
        self.initial = clauses(template.initial)
        self.goal_outputs: dict[int, str] = {}
        self.goals: dict[int, _Clauses] = {}
        for goal in template.goals:
            output = z3.Bool(f"goal!{goal.position}@{FIRST}")
            bits.add(output, FIRST)
            self.goal_outputs[goal.position] = f"goal!{goal.position}"
            self.goals[goal.position] = clauses(output == goal.formula)
        self.orders: list[_Clauses] = []
        initial_orders: list[_Clauses] = []
        for ordering in orderings:
            flags = {tag: {name: z3.Bool(f"{name}@{tag}") for name in ordering.flags} for tag in (FIRST, SECOND)}
            for tag, named in flags.items():
                for flag in named.values():
                    bits.add(flag, tag)
            self.orders.append(clauses(ordering.step(selectors[FIRST], flags[FIRST], flags[SECOND])))
            initial_orders.append(clauses(ordering.initial(flags[FIRST])))
        self.selector_size = template.selector.size()
        for initial in [self.facts, self.initial, *initial_orders]:
            self._add(initial, 0)
        self.goals_added: set[tuple[int, int]] = set()

    def _fresh(self) -> int:
        self.variables += 1
        return self.variables

    def _variable(self, frame: int, key: str) -> int:
        found = self.named.get((frame, key))
        if found is None:
            found = self.named[(frame, key)] = self._fresh()
        return found

    def _add(self, clauses: _Clauses, frame: int) -> None:
        """Add ``clauses`` with template frame P at ``frame`` and Q at ``frame + 1``."""
        mapping = [0] * (clauses.count + 1)
        for number in range(1, len(mapping)):
            where = clauses.interface.get(number)
            if where is None:
                mapping[number] = self._fresh()
            else:
                tag, key = where
                mapping[number] = self._variable(frame if tag == FIRST else frame + 1, key)
        for clause in clauses.clauses:
            self.solver.add_clause([mapping[literal] if literal > 0 else -mapping[-literal] for literal in clause])

    def extend(self, frame: int) -> None:
        self._add(self.step, frame)
        self._add(self.facts, frame + 1)
        for order in self.orders:
            self._add(order, frame)

    def query(self, goals: list[Goal], depth: int, seconds: float | None) -> tuple[str, Valuation | None]:
        for goal in goals:
            if (goal.position, depth) not in self.goals_added:
                self._add(self.goals[goal.position], depth)
                self.goals_added.add((goal.position, depth))
        activation = self._fresh()
        outputs = [self._variable(depth, self.goal_outputs[goal.position]) for goal in goals]
        self.solver.add_clause([-activation, *outputs])
        satisfiable = self.solver.solve(assumptions=[activation])
        model = self.solver.get_model() if satisfiable else None
        self.solver.add_clause([-activation])  # retire this query's disjunction
        if model is None:
            for output in outputs:  # a lemma: no goal asked holds at this depth, in every longer unrolling too
                self.solver.add_clause([-output])
            return "unsat", None
        return "sat", _CnfValuation(self, set(literal for literal in model if literal > 0))


class _CnfValuation:
    def __init__(self, backend: CadicalBackend, true: set[int]) -> None:
        self.backend, self.true = backend, true

    def _bit(self, frame: int, key: str) -> bool:
        variable = self.backend.named.get((frame, key))
        return variable is not None and variable in self.true

    def _value(self, frame: int, key: str, size: int) -> int:
        return sum(1 << bit for bit in range(size) if self._bit(frame, f"{key}!{bit}"))

    def holds(self, goal: Goal, frame: int) -> bool:
        return self._bit(frame, self.backend.goal_outputs[goal.position])

    def selector(self, frame: int) -> int:
        return self._value(frame, "action", self.backend.selector_size)

    def state(self, frame: int) -> tuple[dict[str, Symbolic], Any]:
        pairs: list[tuple[z3.ExprRef, z3.ExprRef]] = []
        for constant in self.backend.constants[FIRST]:
            key = constant.decl().name().replace(f"@{FIRST}", "", 1)
            target = constant.decl().name().replace(f"@{FIRST}", f"@{frame}", 1)
            if z3.is_bool(constant):
                pairs.append((z3.Bool(target), z3.BoolVal(self._bit(frame, key))))
            else:
                value = self._value(frame, key, constant.size())
                pairs.append((z3.BitVec(target, constant.size()), z3.BitVecVal(value, constant.size())))
        return self.backend.template.state_at(frame), _Evaluator(Renaming(pairs))


class _Evaluator:
    """A stand-in for a Z3 model: a term's value under the frame's constants."""

    def __init__(self, renaming: Renaming) -> None:
        self.renaming = renaming

    def eval(self, term: z3.ExprRef, model_completion: bool = True) -> z3.ExprRef:
        return z3.simplify(self.renaming(term))


def _uninterpreted(term: z3.ExprRef) -> list[z3.ExprRef]:
    found: dict[str, z3.ExprRef] = {}
    stack = [term]
    while stack:
        current = stack.pop()
        if z3.is_const(current) and current.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            found[current.decl().name()] = current
        stack.extend(current.children())
    return list(found.values())
