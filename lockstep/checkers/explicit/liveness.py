"""Liveness under weak fairness: ``leads_to`` properties over the explicit engine's state graph.

A ``leads_to(trigger, response)`` property fails on a run where, from some point on, the trigger
has held and the response has not held since, forever. The check runs on the product of the
reachable state graph with one bit, *pending* (the trigger held and the response has not held
since): pending' = (pending or trigger(s')) and not response(s'). A violation is either

- a pending dead end: a reachable pending state with no enabled action (the run stops and the
  response never comes), or
- a *fair* cycle of pending states. Weak fairness is per action instance (an action with its
  arguments): one that stays enabled along the cycle must be taken on it. For a strongly
  connected component C of the pending subgraph this means: every action instance enabled in
  every state of C is taken on some edge inside C. This test on *maximal* components is exact for
  weak fairness: a sub-cycle of an unfair component keeps the offending instance enabled
  everywhere and still never takes it, so no sub-cycle is fair either; and a fair component has a
  fair cycle, one that walks through all of it.

The counterexample is a lasso: the shortest path in the product graph to the component, then a
cycle from that state that takes every action instance fairness demands and returns. Its
``Path.loop_start`` is the index of the first step of the cycle (for a dead end, the path's length:
the run stops there). Only actions named in the property's ``fair`` set (default: all) are
subject to fairness; the others may be starved forever.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from lockstep.checkers.result import Path, PropertyResult, Step, Verdict
from lockstep.spec.evaluation import Environment, evaluate
from lockstep.spec.expressions import Expression
from lockstep.spec.machine import Machine, Property
from lockstep.spec.semantics import State, unpack

Edge = tuple[int, tuple[object, ...], int]  # (action position, arguments, target state id)
Node = tuple[int, bool]  # (state id, pending)
Instance = tuple[int, tuple[object, ...]]  # (action position, arguments)
Move = tuple[Node, int, tuple[object, ...], Node]  # (source, action position, arguments, target)


class StateGraph:
    """The reachable states (by id, the initial state is 0) and every enabled in-bounds transition."""

    def __init__(self, machine: Machine, states: Sequence[State], edges: Sequence[Sequence[Edge]]) -> None:
        self.machine = machine
        self.states = states
        self.edges = edges


MakeStep = Callable[[int, tuple[object, ...], State], Step]


def check_leads_to(graph: StateGraph, prop: Property, make_step: MakeStep) -> PropertyResult:
    """The verdict of one ``leads_to`` property on a complete state graph."""
    assert prop.trigger is not None
    machine = graph.machine
    fair_positions = (
        set(range(len(machine.actions)))
        if prop.fair is None
        else {position for position, action in enumerate(machine.actions) if action.name in prop.fair}
    )
    trigger = [_holds(machine, prop.trigger, state) for state in graph.states]
    response = [_holds(machine, prop.predicate, state) for state in graph.states]

    def successors(node: Node) -> list[Move]:
        state_id, pending = node
        return [
            (node, action, arguments, (target, (pending or trigger[target]) and not response[target]))
            for action, arguments, target in graph.edges[state_id]
        ]

    start: Node = (0, trigger[0] and not response[0])
    parent: dict[Node, Move | None] = {start: None}
    order: list[Node] = []
    frontier = deque([start])
    while frontier:  # BFS: shortest prefixes to every product node
        node = frontier.popleft()
        order.append(node)
        for move in successors(node):
            if move[3] not in parent:
                parent[move[3]] = move
                frontier.append(move[3])

    for node in order:  # a pending dead end, the shallowest first
        if node[1] and not graph.edges[node[0]]:
            path = _path(graph, _prefix(parent, node), [], make_step)
            detail = "the run stops (no action is enabled) while the response is still pending"
            return PropertyResult(prop.name, prop.kind, Verdict.VIOLATED, path, detail, prop.builtin)

    best: tuple[list[Move], list[Move]] | None = None
    for component in _components([node for node in order if node[1]], successors):
        members = set(component)
        inside = [move for node in component for move in successors(node) if move[3] in members]
        if not inside:
            continue  # a single state without a self-loop
        taken: set[Instance] = {(action, arguments) for _, action, arguments, _ in inside}
        demanded: set[Instance] | None = None
        for node in component:
            enabled = {(action, arguments) for action, arguments, _ in graph.edges[node[0]] if action in fair_positions}
            demanded = enabled if demanded is None else demanded & enabled
        assert demanded is not None
        if not demanded <= taken:
            continue  # a fair instance stays enabled and is never taken here: no fair cycle
        entry = min(component, key=lambda node: len(_prefix(parent, node)))
        prefix, cycle = _prefix(parent, entry), _fair_cycle(entry, inside, demanded)
        if best is None or len(prefix) + len(cycle) < len(best[0]) + len(best[1]):
            best = (prefix, cycle)
    if best is None:
        return PropertyResult(prop.name, prop.kind, Verdict.HOLDS, None, "", prop.builtin)
    prefix, cycle = best
    path = _path(graph, prefix, cycle, make_step)
    steps = "1 step" if len(cycle) == 1 else f"{len(cycle)} steps"
    detail = f"a fair cycle of {steps} (from step {len(prefix) + 1}) on which the response never holds"
    return PropertyResult(prop.name, prop.kind, Verdict.VIOLATED, path, detail, prop.builtin)


def _holds(machine: Machine, expression: Expression, state: State) -> bool:
    return bool(evaluate(expression, Environment(unpack(machine, state))))


def _prefix(parent: dict[Node, Move | None], node: Node) -> list[Move]:
    """The BFS tree's moves from the start to ``node``."""
    chain = []
    cursor = parent[node]
    while cursor is not None:
        chain.append(cursor)
        cursor = parent[cursor[0]]
    chain.reverse()
    return chain


def _components(nodes: list[Node], successors: Callable[[Node], list[Move]]) -> list[list[Node]]:
    """Strongly connected components of the subgraph on ``nodes`` (iterative Tarjan)."""
    wanted = set(nodes)

    def inside(node: Node) -> list[Node]:
        return [move[3] for move in successors(node) if move[3] in wanted]

    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    on_stack: set[Node] = set()
    stack: list[Node] = []
    components: list[list[Node]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(inside(root)))]
        while work:
            node, children = work[-1]
            descended = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(inside(child))))
                    descended = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if descended:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def _fair_cycle(entry: Node, inside: list[Move], demanded: set[Instance]) -> list[Move]:
    """A cycle from ``entry`` inside the component that takes every demanded instance, then returns
    to ``entry``; each leg is a shortest path within the component."""
    outgoing: dict[Node, list[Move]] = {}
    for move in inside:
        outgoing.setdefault(move[0], []).append(move)

    def leg(source: Node, goal: Callable[[Move], bool]) -> list[Move]:
        """Shortest moves from ``source`` ending with a move that satisfies ``goal``."""
        came: dict[Node, list[Move]] = {source: []}
        frontier = deque([source])
        while frontier:
            node = frontier.popleft()
            for move in outgoing.get(node, []):
                if goal(move):
                    return came[node] + [move]
                if move[3] not in came:
                    came[move[3]] = came[node] + [move]
                    frontier.append(move[3])
        raise AssertionError("the component is strongly connected")  # pragma: no cover

    cycle: list[Move] = []
    cursor = entry
    for instance in sorted(demanded, key=repr):
        if any((move[1], move[2]) == instance for move in cycle):
            continue
        cycle += leg(cursor, lambda move, wanted=instance: (move[1], move[2]) == wanted)  # type: ignore[misc]
        cursor = cycle[-1][3]
    if not cycle or cursor != entry:
        cycle += leg(cursor, lambda move: move[3] == entry)
    return cycle


def _path(graph: StateGraph, prefix: list[Move], cycle: list[Move], make_step: MakeStep) -> Path:
    steps = [
        make_step(action, arguments, graph.states[target[0]]) for _, action, arguments, target in [*prefix, *cycle]
    ]
    return Path(graph.states[0], tuple(steps), loop_start=len(prefix))
