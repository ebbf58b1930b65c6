"""Checking flight-recorder dumps against a model: is each rank's per-group op sequence a projection
of some execution of the model, and if the job hung, which model state is it in?

``check_dumps`` maps the dump's process groups to the model's communicators (``GroupMapping``:
from a small JSON file, or guessed by op pattern and creation order, ``lockstep.checkers.
flight_recorder_mapping``) and runs a bounded breadth-first search over pairs (model state,
progress), where progress counts, per (rank, communicator), the dump's ops matched so far. A
model step may post an op on a mapped communicator only if it is that member's next op in the
dump (same kind: all_reduce, barrier, broadcast, send/recv with the same peer); every other action
is unrecorded and free. Ops a dump cannot show are free too: p2p ops on a gloo group (torch 2.13
records none) and, when the ring buffer wrapped, the ops lost before a rank's first entry (their
number is known from the sequence ids, their kinds are not: the projection then starts
mid-execution, so a verdict says nothing about the lost prefix).

A state where every dump op has been matched is consistent with the dump. Breadth-first, the
first such state that violates an ``always`` property (``no_hang``, ``no_collective_mismatch``, a
deadlock with ops pending, or the model's own) is reported with the shortest path into it:
verdict ``hang`` or ``desync``. Consistent states that violate nothing: ``consistent`` (the
model completes what was pending). No consistent state, search exhausted: ``diverges``, naming
the deepest progress reached, the first dump op no model state could post and what the model
posts there instead. Search bound reached first: ``inconclusive``; and so is a check that maps
no group of the dumps to a communicator (nothing was compared with the model, so it cannot say
``consistent``). Returns values; never prints.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lockstep.checkers.flight_recorder.diagnosis import group_key
from lockstep.checkers.flight_recorder.projection import (
    ObservedOperation,
    ProjectionPlan,
    describe_posted,
    plan_projection,
)
from lockstep.spec.collectives import Communicator
from lockstep.spec.machine import NO_COLLECTIVE_MISMATCH, NO_HANG, PropertyKind
from lockstep.spec.protocol import Instance, Protocol
from lockstep.spec.semantics import State, Transition, TransitionSystem
from lockstep.traces.flight_recorder import FlightRecorderDirectory

ModelVerdict = Literal["consistent", "hang", "desync", "diverges", "inconclusive"]
EXIT_CODES: dict[str, int] = {"consistent": 0, "hang": 1, "desync": 1, "diverges": 1, "inconclusive": 3}
DEFAULT_MAX_STATES = 200_000


@dataclass
class ModelCheck:
    """The dumps of one directory judged against one model instance."""

    verdict: ModelVerdict
    model: str  # the instance's label
    mapping: dict[str, str]  # dump group key -> communicator
    mapping_source: str  # "file PATH" or "automatic (N candidates tried)"
    states: int  # (state, progress) pairs explored
    complete: bool  # the bounded search ran out of pairs (not of budget)
    consistent_states: int = 0
    violated: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)  # the shortest model path into the reported state
    pending: list[str] = field(default_factory=list)  # "rank 1 in broadcast(pp)" in the reported state
    divergence: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "model": self.model,
            "mapping": dict(self.mapping),
            "mapping_source": self.mapping_source,
            "states": self.states,
            "complete": self.complete,
            "consistent_states": self.consistent_states,
            "violated": list(self.violated),
            "path": list(self.path),
            "pending": list(self.pending),
            "divergence": self.divergence,
            "notes": list(self.notes),
        }


def model_instance(chosen: Protocol, variant: str | None, instance: str | None, ranks: int | None) -> Instance:
    """The caller's model, sized to the dump's ranks when the caller named no instance."""
    if instance is None and ranks is not None and chosen.rank_parameter is not None:
        return chosen.instance(variant, None, ranks=ranks)
    return chosen.instance(variant, instance)


def check_dumps(
    directory: FlightRecorderDirectory,
    model: Instance,
    *,
    mapping: Mapping[str, str | None] | None = None,
    mapping_file: str | None = None,
    acknowledged: tuple[str, ...] = (),
    runtime_only: tuple[str, ...] = (),
    max_states: int = DEFAULT_MAX_STATES,
) -> ModelCheck:
    """Check ``directory``'s dumps against ``model`` (see the module doc). ``mapping``: dump group
    key (name, or ``pg_id N``) -> communicator, or None to leave a group out; without it the
    mapping is guessed and every plausible guess is tried, best first."""
    from lockstep.checkers import system_for

    system = system_for(model.machine())
    plans = plan_projection(directory, system.machine, mapping, acknowledged, runtime_only, mapping_file)
    source = f"file {mapping_file}" if mapping_file else "given" if mapping is not None else "automatic"
    if not any(plan.mapping for plan in plans):
        unmapped = ModelCheck("inconclusive", model.label, {}, source, 0, False)
        groups = sorted({group_key(entry) for dump in directory.dumps for entry in dump.entries})
        unmapped.notes.append(
            "nothing was checked against the model: no group of the dumps maps to one of its communicators "
            f"({', '.join(communicator.name for communicator in plans[0].all_communicators) or 'none'}); "
            f"the dumps' groups: {', '.join(groups[:10]) or 'none'}"
            + (f" and {len(groups) - 10} more" if len(groups) > 10 else "")
            + ("" if mapping is not None else "; give --mapping FILE naming each group's communicator")
        )
        unmapped.notes.extend(plans[0].notes)
        return unmapped
    best: ModelCheck | None = None
    for number, plan in enumerate(plans, start=1):
        result = _search(system, plan, model.label, max_states)
        if mapping is None:
            result.mapping_source = f"automatic (guess {number} of {len(plans)})"
        else:
            result.mapping_source = source
        if result.verdict not in ("diverges", "inconclusive"):
            return result
        if best is None:
            best = result
    assert best is not None  # plan_projection returns at least one plan
    if len(plans) > 1:
        best.notes.append(
            f"no guessed mapping of groups to communicators fits ({len(plans)} tried); this is the first "
            "guess's result: give --mapping FILE if the guess is wrong"
        )
    return best


@dataclass
class _Node:
    state: State
    progress: tuple[int, ...]
    parent: int
    via: Transition | None


def _search(system: TransitionSystem, plan: ProjectionPlan, label: str, max_states: int) -> ModelCheck:
    machine = system.machine
    slots = [system.names.index(f"{communicator.name}.queue") for communicator in plan.communicators]
    targets = tuple(len(plan.sequences[key]) for key in plan.keys)
    position = {key: index for index, key in enumerate(plan.keys)}
    completions = {name for communicator in plan.communicators for name in communicator.completion_actions}
    action_names = [action.name for action in machine.actions]
    always = [
        (index, prop)
        for index, prop in enumerate(machine.properties)
        if prop.kind is PropertyKind.ALWAYS or prop.at_deadlock is not None
    ]
    nodes = [_Node(system.initial(), tuple(0 for _ in targets), -1, None)]
    seen = {(nodes[0].state, nodes[0].progress)}
    frontier: deque[int] = deque([0])
    deepest, consistent = 0, 0
    reported: tuple[int, list[str]] | None = None
    first_consistent: int | None = None
    quiet: int | None = None
    exhausted = True
    while frontier:
        if len(nodes) >= max_states:
            exhausted = False
            break
        node_id = frontier.popleft()
        node = nodes[node_id]
        if sum(node.progress) > sum(nodes[deepest].progress):
            deepest = node_id
        transitions = system.transitions(node.state)
        if node.progress == targets:
            consistent += 1
            first_consistent = node_id if first_consistent is None else first_consistent
            violated = _violations(system, node.state, always, not transitions)
            if violated and reported is None:
                reported = (node_id, violated)
            if violated and violated[0] in (NO_HANG, NO_COLLECTIVE_MISMATCH):
                reported = (node_id, violated)  # the built-ins name a hang or desync: worth the longer path
                break
            if not _pending(plan.all_communicators, system, node.state):
                quiet = node_id  # nothing pending: the dumps need no hang
                break
        for transition in transitions:
            if transition.out_of_bounds is not None:
                continue
            progress = _advance(node, transition, plan, slots, position, completions, action_names)
            if progress is None:
                continue
            key = (transition.target, progress)
            if key in seen:
                continue
            seen.add(key)
            nodes.append(_Node(transition.target, progress, node_id, transition))
            frontier.append(len(nodes) - 1)
    result = ModelCheck("consistent", label, dict(plan.mapping), "", len(nodes), exhausted and reported is None)
    result.notes.extend(plan.notes)
    result.consistent_states = consistent
    builtin = reported is not None and reported[1][0] in (NO_HANG, NO_COLLECTIVE_MISMATCH)
    if reported is not None and (builtin or quiet is None):
        node_id, violated = reported
        result.verdict = "desync" if NO_COLLECTIVE_MISMATCH in violated else "hang"
        result.violated = violated
        result.path = _path(system, nodes, node_id)
        result.pending = _pending(plan.all_communicators, system, nodes[node_id].state)
        result.complete = False
        if not builtin:
            result.notes.append(
                f"no state consistent with the dumps within the search violates {NO_HANG} or {NO_COLLECTIVE_MISMATCH}"
            )
        return result
    if quiet is not None:
        result.path = _path(system, nodes, quiet)
        return result
    if first_consistent is not None:  # every consistent state has ops pending, and the model completes them
        result.verdict = "diverges" if exhausted else "inconclusive"
        result.path = _path(system, nodes, first_consistent)
        result.pending = _pending(plan.all_communicators, system, nodes[first_consistent].state)
        posts = _next_posts(system, plan, nodes[first_consistent].state, slots, completions, action_names)
        result.divergence = {
            "reason": "the dumps end with ops pending ("
            + "; ".join(result.pending)
            + ") that the model does not leave hanging: in every state consistent with the dumps it can still "
            "complete them" + (f" (it would post next: {', '.join(posts)})" if posts else ""),
            "matched": sum(targets),
            "unmatched": [],
            "model_posts_instead": posts,
        }
        if not exhausted:
            result.notes.append(f"the search stopped at {max_states} states (raise --max-states)")
        return result
    result.verdict = "diverges" if exhausted else "inconclusive"
    result.divergence = _divergence(system, plan, nodes[deepest], slots, position, completions, action_names)
    result.path = _path(system, nodes, deepest)
    if not exhausted:
        result.notes.append(f"the search stopped at {max_states} states (raise --max-states)")
    return result


def _advance(
    node: _Node,
    transition: Transition,
    plan: ProjectionPlan,
    slots: list[int],
    position: Mapping[tuple[int, int], int],
    completions: set[str],
    action_names: list[str],
) -> tuple[int, ...] | None:
    """The progress after ``transition``, or None if it posts an op the dump does not show next."""
    if action_names[transition.action] in completions:
        return node.progress
    progress = list(node.progress)
    for index, slot in enumerate(slots):
        before, after = node.state[slot], transition.target[slot]
        if before == after:
            continue
        assert isinstance(before, tuple) and isinstance(after, tuple)
        for member, (old, new) in enumerate(zip(before, after)):
            assert isinstance(old, tuple) and isinstance(new, tuple)
            for posted in new[len(old) :]:
                key = (member, index)
                at = position.get(key)
                if at is None:  # a rank with no dump: unobserved
                    continue
                operation = plan.decode(index, posted)
                sequence = plan.sequences[key]
                if not plan.observed(index, operation):
                    continue  # e.g. p2p on a gloo group: not recorded
                if progress[at] >= len(sequence) or not sequence[progress[at]].admits(operation):
                    return None
                progress[at] += 1
    return tuple(progress)


def _violations(system: TransitionSystem, state: State, always: list[tuple[int, Any]], deadlock: bool) -> list[str]:
    violated = []
    for index, prop in always:
        if prop.kind is PropertyKind.ALWAYS and not system.holds(index, state):
            violated.append(prop.name)
        elif deadlock and prop.at_deadlock is not None and not system.holds_at_deadlock(index, state):
            violated.append(prop.name + (" (no action enabled)" if prop.name != NO_HANG else ""))
    return sorted(set(violated), key=lambda name: (name not in (NO_HANG, NO_COLLECTIVE_MISMATCH), name))


def _path(system: TransitionSystem, nodes: list[_Node], node_id: int) -> list[str]:
    steps = []
    while nodes[node_id].via is not None:
        transition = nodes[node_id].via
        assert transition is not None
        action = system.machine.actions[transition.action]
        arguments = {parameter.name: value for parameter, value in zip(action.parameters, transition.arguments)}
        rendered = ", ".join(
            f"{parameter.name}={parameter.sort.render(arguments[parameter.name])}" for parameter in action.parameters
        )
        steps.append(f"{action.actor_for(arguments)} {action.name}" + (f"({rendered})" if rendered else ""))
        node_id = nodes[node_id].parent
    return steps[::-1]


def _pending(communicators: tuple[Communicator, ...], system: TransitionSystem, state: State) -> list[str]:
    values = dict(zip(system.names, state))
    pending = []
    for communicator in communicators:
        for member in range(communicator.members.count):
            waiting = communicator.waiting_in(values, member)
            if waiting is not None:
                pending.append(f"rank {member} in {waiting}")
    return pending


def _divergence(
    system: TransitionSystem,
    plan: ProjectionPlan,
    node: _Node,
    slots: list[int],
    position: Mapping[tuple[int, int], int],
    completions: set[str],
    action_names: list[str],
) -> dict[str, Any]:
    """Where the deepest progress stops: the first unmatched dump op and what the model posts instead."""
    unmatched: list[dict[str, Any]] = []
    for (member, index), at in sorted(position.items(), key=lambda item: item[1]):
        sequence = plan.sequences[(member, index)]
        if node.progress[at] < len(sequence):
            unmatched.append(_unmatched(plan, member, index, sequence[node.progress[at]]))
    instead = _next_posts(system, plan, node.state, slots, completions, action_names)
    matched = sum(node.progress)
    first = unmatched[0] if unmatched else {}
    reason = (
        f"after {matched} of {sum(len(sequence) for sequence in plan.sequences.values())} dump ops, no model state "
        f"posts {first.get('operation', '?')} as op #{first.get('sequence', '?')} of rank {first.get('rank', '?')} "
        f"on {first.get('communicator', '?')}"
    )
    return {
        "reason": reason,
        "matched": matched,
        "unmatched": unmatched,
        "model_posts_instead": instead,
    }


def _next_posts(
    system: TransitionSystem,
    plan: ProjectionPlan,
    state: State,
    slots: list[int],
    completions: set[str],
    action_names: list[str],
) -> list[str]:
    """The ops the model's next steps from ``state`` post on the mapped communicators."""
    posts: list[str] = []
    for transition in system.transitions(state):
        if action_names[transition.action] in completions:
            continue
        for index, slot in enumerate(slots):
            before, after = state[slot], transition.target[slot]
            assert isinstance(before, tuple) and isinstance(after, tuple)
            for member, (old, new) in enumerate(zip(before, after)):
                assert isinstance(old, tuple) and isinstance(new, tuple)
                for posted in new[len(old) :]:
                    posts.append(f"rank {member} {describe_posted(plan, index, plan.decode(index, posted))}")
    return sorted(set(posts))


def _unmatched(plan: ProjectionPlan, member: int, index: int, operation: ObservedOperation) -> dict[str, Any]:
    communicator = plan.communicators[index]
    return {
        "rank": member,
        "communicator": communicator.name,
        "group": plan.group_of[communicator.name],
        "sequence": operation.sequence,
        "operation": operation.describe(),
    }
