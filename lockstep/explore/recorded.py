"""A trace read into explorer steps, through lockstep's one replay path.

``recorded_session`` replays a trace (a model counterexample, a runtime or vLLM recording: files or a
trace directory) against the caller's model with ``lockstep.checkers.conformance.judgement.replay_traces``,
the function ``lockstep replay`` and ``lockstep show`` call, so the explorer's verdict, divergence
and explanation are replay's own. Its ``observe`` hook hands over replay's candidate set before
each event; the candidates after an event are the model states the page shows beside it (the first
of them, and how many there are: a model counterexample has one, a recording with unrecorded
actions may have several). An event that names a model action is matched to the transition from
the previous step's state that leads into the candidates after it: such a step is a **model step**
(and a path of model steps can be taken further and exported); any other event (a collective's
``enter``/``complete`` in a recording) keeps the candidates' first state. From the event where the
trace diverges (or replay stopped) on, steps have no model state, and the divergence carries
replay's explanation (the guard conjuncts that were false, the candidates) to the page.

``events_document`` is the picture without a model (``show --html`` when replay refuses the trace or
``--no-replay`` is given): the events in their lanes, no states.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from lockstep.checkers.conformance.judgement import replay_traces
from lockstep.explore.session import (
    DOCUMENT_VERSION,
    ExploredStep,
    JSONObject,
    Session,
    json_arguments_text,
    lane_order,
)
from lockstep.spec.machine import Machine
from lockstep.spec.protocol import Protocol, UsageError
from lockstep.spec.semantics import ModelError, State, TransitionSystem
from lockstep.spec.sorts import Value
from lockstep.spec.trace_values import ValueMismatch, decode
from lockstep.traces.merge import TraceInput
from lockstep.traces.reader import Record

MAX_EVENTS = 20_000  # the explorer holds a trace whole (as ``lockstep show`` replays at most this many)
SAMPLE = 16  # candidate states kept per event (the first is shown; the others match the next transition)


def read_events(trace: TraceInput) -> list[Record]:
    """The trace's events in causal order, refused (``UsageError``) beyond ``MAX_EVENTS``."""
    records = list(itertools.islice(trace.records(), MAX_EVENTS + 1))
    if len(records) > MAX_EVENTS:
        raise UsageError(
            f"{', '.join(trace.files)}: more than {MAX_EVENTS} events; the explorer shows traces of at most "
            f"{MAX_EVENTS} events (cut it, or use `lockstep replay` and `lockstep show`)"
        )
    return records


def _model_step(
    machine: Machine,
    system: TransitionSystem,
    current: State,
    event: Mapping[str, Any],
    after: Collection[State],
) -> tuple[tuple[Value, ...], State] | None:
    """The transition from ``current`` that ``event`` names and that leads into ``after``, if any."""
    try:
        action = machine.action_named(str(event.get("action")))
    except KeyError:
        return None
    position = machine.actions.index(action)
    given = event.get("args") if isinstance(event.get("args"), Mapping) else {}
    assert isinstance(given, Mapping)
    try:
        wanted = {
            index: decode(parameter.sort, given[parameter.name], parameter.name)
            for index, parameter in enumerate(action.parameters)
            if parameter.name in given
        }
        transitions = system.transitions(current)
    except (ValueMismatch, ModelError):
        return None
    for transition in transitions:
        if (
            transition.action == position
            and all(transition.arguments[index] == value for index, value in wanted.items())
            and transition.target in after
        ):
            return transition.arguments, transition.target
    return None


def _summary(verdict: str, event: int | None, failed: str | None, label: str, explanation: Mapping[str, Any]) -> str:
    if verdict == "violated":
        return f"{failed} is violated after event {event} (replay against {label})"
    if verdict == "diverges":
        return f"the run diverges from {label} at event {event}"
    if verdict == "conforms":
        return f"the run follows {label}"
    return f"replay against {label}: {verdict}" + (f": {explanation['detail']}" if explanation.get("detail") else "")


def recorded_session(
    trace: TraceInput,
    *,
    protocol: str | Protocol | None = None,
    variant: str | None = None,
    instance: str | None = None,
    parameters: Mapping[str, int] | None = None,
    profile: str | None = None,
    trust_header: bool = False,
) -> Session:
    """A session over ``trace``'s events, judged by the model the caller chooses (as ``lockstep
    replay`` chooses it: the header's protocol and variant unless named). Raises ``TraceInputError``
    or ``UsageError`` for bad input, as replay does."""
    records = read_events(trace)
    snapshots: list[tuple[int, tuple[State, ...]]] = []

    def observe(system: Any, candidates: Collection[Any], bindings: Sequence[Any]) -> None:
        snapshots.append((len(candidates), tuple(itertools.islice(candidates, SAMPLE))))

    verdict = replay_traces(
        trace,
        protocol=protocol,
        variant=variant,
        instance=instance,
        parameters=parameters,
        profile=profile,
        trust_header=trust_header,
        observe=observe,
    )
    result = verdict.result
    machine = verdict.instance.machine()
    from lockstep.checkers import system_for

    system = system_for(machine)
    current = system.initial()
    known = result.longest_conforming_prefix
    steps: list[ExploredStep] = []
    for position, record in enumerate(records):
        event = record.event
        arguments = event.get("args") if isinstance(event.get("args"), Mapping) else {}
        assert isinstance(arguments, Mapping)
        observed = event.get("observed") if isinstance(event.get("observed"), Mapping) else None
        common: dict[str, Any] = {"origin": "trace", "event": position, "observed": observed}
        if position >= known or position + 1 >= len(snapshots):
            steps.append(
                ExploredStep(str(event["action"]), str(event["actor"]), arguments, None, None, False, **common)
            )
            continue
        count, sample = snapshots[position + 1]
        matched = _model_step(machine, system, current, event, set(sample))
        if matched is not None:
            values, current = matched
            action = machine.action_named(str(event["action"]))
            full = {
                parameter.name: parameter.sort.to_json(value) for parameter, value in zip(action.parameters, values)
            }
            steps.append(
                ExploredStep(action.name, str(event["actor"]), full, values, current, True, candidates=count, **common)
            )
        else:
            current = sample[0]
            steps.append(
                ExploredStep(
                    str(event["action"]),
                    str(event["actor"]),
                    arguments,
                    None,
                    current,
                    False,
                    candidates=count,
                    **common,
                )
            )
    explanation = dict(result.explanation or {})
    divergence = None
    if result.verdict == "diverges":
        divergence = {**explanation, "step": known + 1, "event": result.event}
    header = trace.header
    header_parameters = header.get("parameters") if isinstance(header.get("parameters"), Mapping) else {}
    assert isinstance(header_parameters, Mapping)
    source = {
        "kind": "trace",
        "files": list(trace.files),
        "recorded_by": header["source"]["kind"],
        "property": header_parameters.get("property") if header["source"]["kind"] == "model" else None,
        "verdict": result.verdict,
        "event": result.event,
        "summary": _summary(result.verdict, result.event, result.failed_property, verdict.instance.label, explanation),
        "warnings": [*trace.warnings, *verdict.warnings],
    }
    return Session(verdict.instance, steps, machine=machine, source=source, divergence=divergence)


def events_document(trace: TraceInput, reason: str) -> JSONObject:
    """The page's document of ``trace`` without a model: the events in their lanes, no states;
    ``reason`` says why there is no model (replay refused the trace, or ``--no-replay``)."""
    records = read_events(trace)
    header = trace.header
    steps: list[JSONObject] = []
    for position, record in enumerate(records):
        event = record.event
        arguments = event.get("args") if isinstance(event.get("args"), Mapping) else {}
        assert isinstance(arguments, Mapping)
        text = json_arguments_text(arguments)
        steps.append(
            {
                "number": position + 1,
                "actor": str(event["actor"]),
                "action": str(event["action"]),
                "label": f"{event['action']}({text})" if text else str(event["action"]),
                "arguments": dict(arguments),
                "mirrors": "",
                "description": "",
                "changes": [],
                "facts": None,
                "origin": "trace",
                "event": position,
                "model_step": False,
                "candidates": 0,
                "observed": event.get("observed") if isinstance(event.get("observed"), Mapping) else None,
                "completes": None,
            }
        )
    title = f"{header.get('protocol')} {header.get('variant')} {header.get('instance') or ''}".strip()
    return {
        "format": "lockstep-explore",
        "version": DOCUMENT_VERSION,
        "interactive": False,
        "title": title,
        "model": None,
        "source": {
            "kind": "trace",
            "files": list(trace.files),
            "recorded_by": header["source"]["kind"],
            "property": None,
            "verdict": None,
            "event": None,
            "summary": f"no model states: {reason}",
            "warnings": list(trace.warnings),
        },
        "lanes": sorted({step["actor"] for step in steps}, key=lane_order),
        "properties": [],
        "communicators": [],
        "initial": {"entries": [], "facts": None},
        "steps": steps,
        "divergence": None,
        "cursor": 0,
        "enabled": [],
    }
