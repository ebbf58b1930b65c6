"""Why a replay diverged: the event, candidate states, and the guard or observation that failed.

``explain`` builds the JSON-ready explanation of the first event no candidate state can take:
the event (file, line, actor, action, arguments, observed values), the number of candidates, and
for up to five of them the state (rendered per variable) and the reasons, each either a guard
conjunct of the named action that is false with the values it reads (``explain_guard``), an
observed value the model's successor contradicts, or an actor that cannot take the action.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lockstep.spec.semantics import State, explain_guard
from lockstep.spec.sorts import MapSort, Sort

if TYPE_CHECKING:
    from lockstep.checkers.conformance.replay import Binding, Check, Replayer
    from lockstep.traces.reader import Record

SHOWN_CANDIDATES = 5


def render_state(replayer: Replayer, state: State) -> dict[str, str]:
    """Every non-monitor variable of ``state`` as ``name -> rendered value``."""
    return {
        name: variable.sort.render(value)
        for (name, variable), value in zip(replayer.machine.variables.items(), state)
        if not variable.monitor
    }


def explain(
    replayer: Replayer,
    record: Record,
    candidates: dict[State, None],
    bindings: list[Binding],
    checks: tuple[Check, ...],
    problem: str | None,
) -> dict[str, Any]:
    event = record.event
    shown = list(candidates)[:SHOWN_CANDIDATES]
    explanation: dict[str, Any] = {
        "file": record.path,
        "line": record.line,
        "event": {key: event[key] for key in ("index", "actor", "action", "args", "observed") if key in event},
        "candidate_count": len(candidates),
    }
    if problem is not None:
        explanation["reason"] = problem
        explanation["candidates"] = [{"state": render_state(replayer, state), "why": []} for state in shown]
        return explanation
    action_name = event["action"]
    if action_name in replayer._actions and not bindings:
        position, action = replayer._actions[action_name]
        actors = sorted({replayer._actor_of[(position, arguments)] for arguments in replayer._spaces[position]})
        explanation["reason"] = (
            f"actor {event['actor']} cannot take {action_name} with arguments {event['args']}: "
            f"the model's actors for it are {', '.join(actors)}"
        )
        explanation["candidates"] = [{"state": render_state(replayer, state), "why": []} for state in shown]
        return explanation
    rows = []
    any_enabled = False
    for state in shown:
        why: list[str] = []
        if action_name in replayer._actions:
            table = replayer._tables.get(state) or replayer._table(state)
            for position, arguments in bindings[:SHOWN_CANDIDATES]:
                action = replayer.machine.actions[position]
                label = _label(action.parameters, arguments, action.name)
                targets = table.get((position, arguments), [])
                if not targets:
                    named = {parameter.name: value for parameter, value in zip(action.parameters, arguments)}
                    for conjunct in explain_guard(replayer.machine, action, state, named):
                        why.append(f"{label} is not enabled: {conjunct}")
                    continue
                any_enabled = True
                for target, _ in targets:
                    why.extend(
                        f"{label} leads to a state where {text}" for text in _contradictions(replayer, target, checks)
                    )
        else:
            why.append(_collective_reason(replayer, state, event))
        rows.append({"state": render_state(replayer, state), "why": why})
    if action_name not in replayer._actions:
        explanation["reason"] = f"no candidate state agrees with {event['actor']} {action_name} on {event['args']}"
    elif any_enabled:
        explanation["reason"] = f"{action_name} is enabled, but the observed values contradict every successor"
    else:
        explanation["reason"] = f"no candidate state enables {action_name} for {event['actor']}"
    explanation["candidates"] = rows
    return explanation


def _label(parameters: Any, arguments: tuple[object, ...], name: str) -> str:
    rendered = ", ".join(f"{p.name}={p.sort.render(v)}" for p, v in zip(parameters, arguments))
    return f"{name}({rendered})"


def _contradictions(replayer: Replayer, state: State, checks: tuple[Check, ...]) -> list[str]:
    names = list(replayer.machine.variables)
    found = []
    for slot, position, value in checks:
        name = names[slot]
        sort: Sort = replayer.machine.variables[name].sort
        current = state[slot]
        if position >= 0:
            assert isinstance(sort, MapSort) and isinstance(current, tuple)
            name = f"{name}[{sort.key.render(sort.keys[position])}]"
            current, sort = current[position], sort.value
        if current != value:
            found.append(f"{name} = {sort.render(current)}, but {sort.render(value)} was observed")
    return found


def _collective_reason(replayer: Replayer, state: State, event: dict[str, Any]) -> str:
    name = event["args"].get("communicator") or next(iter(event.get("clock") or {"?": 0}))
    member = event["actor"].partition(":")[2]
    variable = f"{name}.queue"
    if variable not in replayer.machine.variables:
        return f"no communicator {name}"
    sort = replayer.machine.variables[variable].sort
    value = state[list(replayer.machine.variables).index(variable)]
    assert isinstance(sort, MapSort) and isinstance(value, tuple)
    pending = sort.value.render(value[int(member)]) if member.isdigit() and int(member) < len(value) else "?"
    if event["action"] == "enter":
        op = event["args"].get("op") or "an op"
        return f"member {member} has not entered {op} on {name} ({variable}[{member}] = {pending})"
    return f"member {member}'s op on {name} has not completed ({variable}[{member}] = {pending})"
