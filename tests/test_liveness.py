"""Liveness: ``leads_to`` under weak fairness in the explicit engine, with lasso counterexamples."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockstep.checkers import Verdict, check
from lockstep.checkers.counterexample import first_invalid_step
from lockstep.checkers.explicit.liveness import _components
from lockstep.spec.machine import Machine, Step
from lockstep.spec.semantics import InterpretedSystem
from lockstep.spec.sorts import IndexSort, MapSort, integers
from lockstep.spec.terms import DefinitionError, all_of


def server(*, fair: tuple[str, ...] | None, spin: bool) -> Machine:
    """request → serve → reset; with ``spin`` an idle self-loop competes with ``serve``."""
    machine = Machine("server")
    x = machine.variable("x", integers(0, 2), 0)
    machine.add_action("request", lambda: Step(x == 0, {x: 1}), actor="client")
    machine.add_action("serve", lambda: Step(x == 1, {x: 2}), actor="server")
    if spin:
        machine.add_action("idle", lambda: Step(x == 1, {}), actor="other")
    machine.add_action("reset", lambda: Step(x == 2, {x: 0}), actor="client")
    machine.leads_to("served", x == 1, x == 2, "every request is served", fair=fair)
    return machine


def test_weak_fairness_of_every_action_makes_the_server_live() -> None:
    assert check(server(fair=None, spin=True), engine="bfs").property_result("served").verdict is Verdict.HOLDS
    assert check(server(fair=None, spin=False), engine="bfs").property_result("served").verdict is Verdict.HOLDS


def test_an_unfair_server_starves_on_a_lasso() -> None:
    machine = server(fair=("request", "reset", "idle"), spin=True)
    result = check(machine, engine="bfs")
    served = result.property_result("served")
    assert served.verdict is Verdict.VIOLATED and served.path is not None
    assert [step.action for step in served.path.steps] == ["request", "idle"]
    assert served.path.loop_start == 1
    # the cycle returns to the state it starts from, and the whole lasso is an execution of the model
    assert served.path.steps[0].state == served.path.steps[-1].state
    assert first_invalid_step(InterpretedSystem(machine), served.path) is None
    assert "fair cycle of 1 step (from step 2)" in served.detail
    assert result.verdict is Verdict.VIOLATED


def test_a_dead_end_with_the_response_pending_is_a_violation() -> None:
    machine = Machine("stuck")
    x = machine.variable("x", integers(0, 2), 0)
    machine.add_action("request", lambda: Step(x == 0, {x: 1}), actor="client")
    machine.set_final(x == 1)
    machine.leads_to("served", x == 1, x == 2)
    served = check(machine, engine="bfs").property_result("served")
    assert served.verdict is Verdict.VIOLATED and served.path is not None
    assert served.path.length == 1 and served.path.loop_start == 1
    assert "the run stops" in served.detail


def test_fairness_is_per_action_instance() -> None:
    """Rank 1 may work and undo forever while rank 0's `work` stays enabled: weak fairness per action
    instance forces work(rank=0), where per-action fairness would accept the cycle (`work` is taken,
    as work(rank=1)). Without fairness for `work`, the cycle is a violation."""

    def build(fair: tuple[str, ...] | None) -> Machine:
        machine = Machine("ranks")
        Rank = IndexSort("Rank", 2)
        done = machine.variable("done", MapSort(Rank, integers(0, 1)), (0, 0))
        machine.add_action(
            "work", lambda rank: Step(done[rank] == 0, {done: done.set(rank, 1)}), actor="rank:{rank}", rank=Rank
        )
        machine.add_action(
            "undo", lambda: Step((done[1] == 1) & (done[0] == 0), {done: done.set(1, 0)}), actor="rank:1"
        )
        machine.leads_to("all_done", done[0] == 0, all_of(Rank, lambda r: done[r] == 1), fair=fair)
        machine.set_final(all_of(Rank, lambda r: done[r] == 1))
        return machine

    assert check(build(None), engine="bfs").property_result("all_done").verdict is Verdict.HOLDS
    starved = check(build(("undo",)), engine="bfs").property_result("all_done")
    assert starved.verdict is Verdict.VIOLATED and starved.path is not None
    assert [step.action for step in starved.path.steps] == ["work", "undo"] and starved.path.loop_start == 0
    assert starved.path.steps[0].arguments == {"rank": 1}


def test_symbolic_engines_and_symmetry_leave_leads_to_inconclusive() -> None:
    bmc = check(server(fair=None, spin=True), "bmc", depth=3).property_result("served")
    assert bmc.verdict is Verdict.INCONCLUSIVE and "explicit engines" in bmc.detail
    machine = Machine("pair")
    Rank = IndexSort("Rank", 2)
    done = machine.variable("done", MapSort(Rank, integers(0, 1)), (0, 0))
    machine.add_action(
        "work", lambda rank: Step(done[rank] == 0, {done: done.set(rank, 1)}), actor="rank:{rank}", rank=Rank
    )
    machine.leads_to("all_done", done[0] == 0, all_of(Rank, lambda r: done[r] == 1))
    machine.set_final(all_of(Rank, lambda r: done[r] == 1))
    machine.declare_symmetric(Rank)
    reduced = check(machine, engine="bfs", symmetry=True).property_result("all_done")
    assert reduced.verdict is Verdict.INCONCLUSIVE and "without --symmetry" in reduced.detail


def test_fair_actions_must_exist() -> None:
    machine = server(fair=("request", "teleport"), spin=False)
    with pytest.raises(DefinitionError, match=r"fair actions \['teleport'\] are not actions of server"):
        machine.finish()


@given(
    st.integers(1, 12).flatmap(
        lambda size: st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)), max_size=30).map(
            lambda edges: (size, edges)
        )
    )
)
def test_strongly_connected_components_equal_networkx(graph: tuple[int, list[tuple[int, int]]]) -> None:
    size, edges = graph
    nodes = [(node, True) for node in range(size)]
    successors = {
        node: [((node, True), 0, (), (target, True)) for source, target in edges if source == node]
        for node in range(size)
    }
    mine = {
        frozenset(member[0] for member in component)
        for component in _components(nodes, lambda node: successors[node[0]])
    }
    reference = nx.DiGraph()
    reference.add_nodes_from(range(size))
    reference.add_edges_from(edges)
    assert mine == {frozenset(component) for component in nx.strongly_connected_components(reference)}
