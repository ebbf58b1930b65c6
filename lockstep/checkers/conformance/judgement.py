"""The one replay path: ``replay_traces`` checks a recorded trace against a model the caller chose.

``lockstep replay``, ``lockstep run`` (its own traces, ``lockstep.harness.runtime_replay``),
``fuzz --impl``, ``lockstep.testing`` and the pytest plugin all call it, so one trace gets one verdict
whichever way it is checked.

**The trace does not choose its judge.** The model's instance, parameters and unrecorded actions
come from the caller (its arguments) or from a ``RecorderProfile`` defined in code
(``lockstep.checkers.conformance.model_choice`` resolves them; ``lockstep show`` and ``export`` use it too). The
header's values are compared with the caller's:

- a parameter the run sizes (``SIZING``: ranks, requests, ...; the protocol's rank parameter) and
  the caller did not fix is taken from the header (a wrong one makes the trace diverge, it cannot
  make it pass);
- any other header parameter (``hang_bound``, ``settle_before_resume``, ``max_wave``, ...) that
  differs from the caller's value, and any ``parameters.unrecorded`` entry the caller did not
  exempt, would widen the check: ``HeaderMismatch`` (bad input, exit 2) naming the header field,
  unless the caller passes ``trust_header=True`` (``--trust-header``).

**Conforms means evidence.** The verdict carries coverage: events per actor, actions taken,
``sometimes`` witnesses reached and missed, guard conjuncts seen true and false (opt-in,
``guard_coverage``: ``lockstep.checkers.conformance.guard_coverage``), and whether the trace reached a final state (the
model's ``final`` predicate). A conforming replay is downgraded to ``inconclusive`` when the
trace has no events, when an expected actor (by default every rank of the instance that is not
exempt by the caller or a profile, not by a trusted header) has none, when a required action or witness is missing, or,
with ``require_complete``,
when the trace stops before a final state. The verdict lists every exemption with its origin.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep.checkers.conformance.guard_coverage import GuardCoverage
from lockstep.checkers.conformance.model_choice import (
    PROFILES,
    RUNTIME_PROFILES,
    SIZING,
    TRUST_HINT,
    TRUSTED,
    Exemption,
    HeaderMismatch,
    ResolvedModel,
    recorder_profile,
    resolve_exemptions,
    resolve_model,
)
from lockstep.checkers.conformance.replay import (
    CONFORMS,
    EXIT_CODES,
    INCONCLUSIVE,
    Replayer,
    ReplayOptions,
    ReplayResult,
)
from lockstep.spec.profile import RecorderProfile
from lockstep.spec.protocol import Instance, Protocol, UsageError
from lockstep.traces.merge import TraceInput, open_traces
from lockstep.traces.reader import Record, TraceInputError

PathLike = str | os.PathLike[str]
Observer = Callable[[Any, Collection[Any], Sequence[tuple[int, tuple[Any, ...]]]], None]


@dataclass
class Coverage:
    events_per_actor: dict[str, int] = field(default_factory=dict)
    actions: dict[str, int] = field(default_factory=dict)
    witnesses_reached: dict[str, int] = field(default_factory=dict)
    witnesses_missed: list[str] = field(default_factory=list)
    expected_actors: list[str] = field(default_factory=list)
    complete: bool | None = None  # None: not asked (require_complete False) or the replay stopped
    guards: dict[str, Any] | None = None  # guard conjuncts seen true/false (guard_coverage=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "events_per_actor": self.events_per_actor,
            "actions": self.actions,
            "witnesses_reached": self.witnesses_reached,
            "witnesses_missed": self.witnesses_missed,
            "expected_actors": self.expected_actors,
            "complete": self.complete,
            "guards": self.guards,
        }


@dataclass
class ReplayVerdict:
    """The replay's result with the model, the exemptions, the evidence and the final verdict."""

    result: ReplayResult
    instance: Instance
    warnings: list[str]
    exemptions: list[Exemption]
    coverage: Coverage
    parameter_origins: dict[str, str]
    missing: list[str] = field(default_factory=list)  # why a conforming replay is only inconclusive
    model_origin: dict[str, str] = field(default_factory=dict)  # protocol, variant, instance -> caller or header

    @property
    def verdict(self) -> str:
        return self.result.verdict

    @property
    def model(self) -> str:
        return self.instance.label

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.result.verdict]

    def to_json(self) -> dict[str, Any]:
        payload = self.result.to_json()
        payload.update(
            model=self.model,
            warnings=list(self.warnings),
            exempt=[exemption.to_json() for exemption in self.exemptions],
            coverage=self.coverage.to_json(),
            parameters=dict(self.instance.parameters),
            parameter_origins=dict(self.parameter_origins),
            missing_evidence=list(self.missing),
            model_origin=dict(self.model_origin),
        )
        return payload


def replay_traces(
    source: PathLike | Sequence[PathLike] | TraceInput,
    *,
    protocol: str | Protocol | None = None,
    variant: str | None = None,
    instance: str | None = None,
    parameters: Mapping[str, int] | None = None,
    unrecorded: Iterable[str] = (),
    profile: RecorderProfile | str | None = None,
    trust_header: bool = False,
    expected_actors: Collection[str] | None = None,
    required_actions: Collection[str] = (),
    required_witnesses: Collection[str] = (),
    require_complete: bool = False,
    guard_coverage: bool = False,
    observe: Observer | None = None,
    max_candidates: int = 100_000,
    closure_depth: int = 16,
) -> ReplayVerdict:
    """Replay ``source`` (trace files, a trace directory, or an opened ``TraceInput``) against the
    model the caller names (see the module doc); ``profile`` a ``RecorderProfile`` or its name
    (``runtime``, ``vllm-dp-pause``). ``observe(system, candidates, bindings)`` is called before
    each event with the candidate states and the event's model bindings (action position,
    arguments), and once at the end with no bindings (``lockstep.checkers.conformance.goals``). Raises
    ``TraceInputError`` (``HeaderMismatch`` among them) or ``UsageError`` for bad input."""
    if isinstance(source, TraceInput):
        trace = source
    else:
        trace = open_traces([source] if isinstance(source, (str, os.PathLike)) else list(source))
    header = trace.header
    resolved = resolve_model(
        trace,
        protocol=protocol,
        variant=variant,
        instance=instance,
        parameters=parameters,
        profile=profile,
        trust_header=trust_header,
    )
    model = resolved.instance
    from lockstep.checkers import system_for

    system = system_for(model.machine())
    exemptions = resolve_exemptions(system, trace, unrecorded, resolved.profile, trust_header)
    own = resolved.protocol.name == header["protocol"] and resolved.variant == header["variant"]
    options = ReplayOptions(
        max_candidates, closure_depth, frozenset(exemption.name for exemption in exemptions), strict=own
    )
    try:
        replayer = Replayer(system, options)
    except ValueError as error:
        raise UsageError(str(error)) from None
    events_per_actor: Counter[str] = Counter()
    actions: Counter[str] = Counter()
    guards = GuardCoverage(system.machine, replayer._spaces) if guard_coverage else None
    for record in _counted(trace.records(), events_per_actor, actions):
        if guards is not None and replayer.candidates:
            guards.observe(next(iter(replayer.candidates)))
        if observe is not None and replayer.candidates:
            observe(system, replayer.candidates, _bindings(replayer, record))
        if not replayer.feed(record):
            break
    if observe is not None and replayer.candidates:
        observe(system, replayer.candidates, ())
    result = replayer.result()
    exempt_actors = {exemption.name for exemption in exemptions if exemption.origin != TRUSTED}
    if expected_actors is None:
        expected = sorted(
            actor
            for actor in replayer.actors
            if actor.startswith("rank:") and actor not in exempt_actors and "rank:*" not in exempt_actors
        )
    else:
        expected = sorted(expected_actors)
    sometimes = [prop.name for prop in system.machine.properties if prop.kind.name == "SOMETIMES"]
    coverage = Coverage(
        dict(sorted(events_per_actor.items())),
        dict(sorted(actions.items())),
        dict(result.witnessed),
        [name for name in sometimes if name not in result.witnessed],
        expected,
    )
    coverage.guards = guards.to_json() if guards is not None else None
    if require_complete and replayer.stopped is None:
        coverage.complete = _complete(replayer)
    verdict = ReplayVerdict(result, model, list(trace.warnings), exemptions, coverage, resolved.parameter_origins)
    verdict.model_origin = dict(resolved.model_origin)
    verdict.missing = _missing(coverage, result, required_actions, required_witnesses, require_complete)
    if result.verdict == CONFORMS and verdict.missing:
        result.verdict = INCONCLUSIVE
        result.explanation = {
            "detail": "the trace follows the model but is not evidence enough: " + "; ".join(verdict.missing)
        }
    return verdict


def _bindings(replayer: Replayer, record: Record) -> Sequence[tuple[int, tuple[Any, ...]]]:
    try:
        return replayer._bindings(record)
    except (TraceInputError, KeyError):
        return ()  # the replay itself reports the event


def _counted(records: Iterable[Record], actors: Counter[str], actions: Counter[str]) -> Iterator[Record]:
    for record in records:
        event = record.event
        actors[str(event.get("actor"))] += 1
        actions[str(event.get("action"))] += 1
        yield record


def _missing(
    coverage: Coverage,
    result: ReplayResult,
    actions: Collection[str],
    witnesses: Collection[str],
    require_complete: bool,
) -> list[str]:
    missing: list[str] = []
    if result.events == 0:
        missing.append("the trace has no events")
    silent = [actor for actor in coverage.expected_actors if not coverage.events_per_actor.get(actor)]
    if silent and result.events:
        missing.append(f"no events from {', '.join(silent)}")
    absent = sorted(action for action in actions if not coverage.actions.get(action))
    if absent:
        missing.append(f"required actions not taken: {', '.join(absent)}")
    unreached = sorted(name for name in witnesses if name not in result.witnessed)
    if unreached:
        missing.append(f"required witnesses not reached: {', '.join(unreached)}")
    if require_complete and coverage.complete is False:
        missing.append(f"the trace stops after {result.events} events, before a final state of the model")
    return missing


def _complete(replayer: Replayer) -> bool:
    """Whether some candidate (after unrecorded steps) is a final state: the model's ``final``
    predicate holds in it (every model sets one: the run finished, channels drained)."""
    closed = replayer._close(replayer.candidates) if replayer._unrecorded else replayer.candidates
    states = closed if closed is not None else replayer.candidates
    return any(replayer.system.is_final(state) for state in states)


__all__ = [
    "PROFILES",
    "RUNTIME_PROFILES",
    "SIZING",
    "TRUSTED",
    "TRUST_HINT",
    "Coverage",
    "Exemption",
    "HeaderMismatch",
    "ReplayVerdict",
    "ResolvedModel",
    "recorder_profile",
    "resolve_exemptions",
    "resolve_model",
    "replay_traces",
]
