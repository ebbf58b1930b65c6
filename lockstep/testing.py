"""Assertions for other projects' test suites: traces conform to a lockstep model.

``assert_conforms(paths, protocol="dp-pause")`` replays trace files (or a trace directory) that a
program recorded with ``lockstep.record`` (or lockstep's runtime) against the model named by their
header, or by ``protocol``/``variant`` (the trace never widens its own check: see
``lockstep.checkers.conformance.judgement``), and raises ``AssertionError`` with the replay's explanation
unless they conform. ``assert_fuzz_clean("dp-pause", variant="post-fix")`` fuzzes a model (a
built-in protocol's instance, a ``Protocol`` of your own, or a ``Machine``) with Hypothesis and
raises ``AssertionError`` with the counterexample's steps if a safety property fails.
``state_machine(model, variant=...)`` is the model as a Hypothesis ``RuleBasedStateMachine`` class
of your own to run (``run_state_machine_as_test``, or its ``TestCase``). Wherever a model is named,
a registered name and a ``Protocol`` object (``lockstep.models.external.load_model_file``, or your
module's ``PROTOCOL``) both do. The pytest plugin (``lockstep.pytest_plugin``) exposes the
assertions as fixtures with the ``--lockstep-*`` settings. The assertion helpers hide their own
frames from pytest's tracebacks (``__tracebackhide__``). Everything heavy is imported on first use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from typing import Any

PathLike = str | os.PathLike[str]
DEFAULT_FUZZ_EXAMPLES = 200  # assert_fuzz_clean's own session, without Hypothesis settings


def replay_traces(
    paths: PathLike | Sequence[PathLike],
    *,
    protocol: Any = None,
    variant: str | None = None,
    max_candidates: int = 100_000,
    **options: Any,
) -> dict[str, Any]:
    """Replay ``paths`` against the model the caller names (``protocol``: a registered name or a
    ``Protocol``; ``lockstep.checkers.conformance.judgement``:
    ``instance``, ``parameters``, ``unrecorded``, ``profile``, ``trust_header``,
    ``expected_actors``, ``required_actions``, ``required_witnesses``, ``require_complete``); the
    replay's JSON result (``verdict``, ``event``, ``property``, ``explanation``, ``coverage``,
    ``exempt``, ...) plus ``model`` and ``warnings``."""
    from lockstep.checkers.conformance.judgement import replay_traces as replay

    return replay(paths, protocol=protocol, variant=variant, max_candidates=max_candidates, **options).to_json()


def assert_conforms(
    paths: PathLike | Sequence[PathLike],
    *,
    protocol: Any = None,
    variant: str | None = None,
    max_candidates: int = 100_000,
    actors: Collection[str] | None = None,
    actions: Collection[str] = (),
    witnesses: Collection[str] = (),
    require_complete: bool = False,
    **options: Any,
) -> dict[str, Any]:
    """Fail (``AssertionError``) unless the traces conform to the model, violate none of its
    properties and carry the evidence required: events from every actor in ``actors`` (default:
    every rank of the instance), the ``actions`` taken, the ``witnesses`` (``sometimes``
    properties) reached and, with ``require_complete``, a final state. Other ``options`` as
    ``replay_traces``; ``protocol`` a registered name or a ``Protocol``. Returns the replay
    result when they do."""
    __tracebackhide__ = True
    result = replay_traces(
        paths,
        protocol=protocol,
        variant=variant,
        max_candidates=max_candidates,
        expected_actors=actors,
        required_actions=actions,
        required_witnesses=witnesses,
        require_complete=require_complete,
        **options,
    )
    if result["verdict"] != "conforms":
        explanation = result.get("explanation") or {}
        lines = [f"trace does not conform to {result['model']}: {result['verdict']} at event {result['event']}"]
        if result.get("property"):
            lines.append(f"property violated: {result['property']}")
        if explanation.get("reason"):
            lines.append(f"reason: {explanation['reason']}")
        if explanation.get("detail"):
            lines.append(f"detail: {explanation['detail']}")
        if explanation.get("event"):
            lines.append(f"event: {json.dumps(explanation['event'])}")
        for candidate in explanation.get("candidates", [])[:3]:
            lines.extend(f"  - {why}" for why in candidate.get("why", []))
        lines.append(f"longest conforming prefix: {result['longest_conforming_prefix']} events")
        raise AssertionError("\n".join(lines))
    return result


def model_target(model: Any, variant: str | None = None, instance: str | None = None) -> Any:
    """``model`` as something to check: a registered name or a ``Protocol`` becomes its instance
    (``variant``, ``instance``: the defaults when None); an ``Instance`` or ``Machine`` is kept."""
    from lockstep.models import get_protocol
    from lockstep.spec.protocol import Protocol

    target = get_protocol(model) if isinstance(model, str) else model
    if isinstance(target, Protocol):
        return target.instance(variant, instance)
    if variant is not None or instance is not None:
        raise TypeError(f"variant and instance name an instance of a protocol; {model!r} is not one")
    return target


def state_machine(model: Any, *, variant: str | None = None, instance: str | None = None) -> Any:
    """``model`` (a registered name, a ``Protocol``, an ``Instance`` or a ``Machine``) as a new
    Hypothesis ``RuleBasedStateMachine`` class, to run as any of yours
    (``run_state_machine_as_test(cls, settings=...)``, or ``TestThis = cls.TestCase``):

    - a **rule per action**, named after it, with the precondition that its guard holds for some
      arguments; each parameter is drawn among the values for which the action is still enabled,
      so every rule call is a step of the model (and shrinks towards the first enabled value);
    - an **invariant per ``always`` property** (the built-ins ``in_bounds``, ``no_deadlock``,
      ``no_hang``... included); one that fails raises ``PropertyViolation`` (an ``AssertionError``)
      naming the property;
    - one more rule, ``step_or_end``, that takes any enabled step, or in a final state ends the run
      (so Hypothesis never finds "no progress can be made").

    Hypothesis's settings (yours, or the profile's) decide the examples, the steps per run
    (``stateful_step_count``), the seed and the example database. Large models want
    ``deadline=None``. ``lockstep.checkers.fuzz.fuzz`` runs the same machine and then re-minimises
    the failure by search."""
    import sys

    from lockstep.checkers.fuzz.state_machine import Recorder, state_machine_for
    from lockstep.spec.compiler import CompiledSystem
    from lockstep.spec.protocol import Instance

    target = model_target(model, variant, instance)
    machine = target.machine() if isinstance(target, Instance) else target.finish()
    generated = state_machine_for(CompiledSystem(machine), Recorder(max_steps=sys.maxsize))
    label = target.label if isinstance(target, Instance) else machine.name
    name = "".join(character if character.isalnum() else "_" for character in label.title()).strip("_")
    generated.__name__ = generated.__qualname__ = name if name[:1].isalpha() else f"Model_{name}"
    generated.__doc__ = f"{label} as a Hypothesis state machine (lockstep.testing.state_machine)."
    return generated


def assert_fuzz_clean(
    model: Any,
    *,
    variant: str | None = None,
    instance: str | None = None,
    examples: int | None = None,
    steps: int = 100,
    seed: int | None = 0,
    timeout: float | None = None,
    settings: Any = None,
) -> Any:
    """Fuzz ``model`` (a protocol name, a ``lockstep.spec.protocol.Protocol``, an ``Instance`` or a
    ``Machine``) and fail (``AssertionError``, with the counterexample's steps) if a safety
    property is violated. Returns the ``FuzzResult``.

    Without ``settings`` it is lockstep's own session: ``examples`` examples (default 200),
    ``seed`` fixes Hypothesis's choices (None: fresh ones each call), no example database. With
    ``settings`` (a ``hypothesis.settings``, e.g. ``settings.default``: the active profile, as the
    ``lockstep_fuzz`` fixture passes) it runs as a test of yours would: the settings' example
    database, phases and verbosity apply, ``examples`` defaults to their ``max_examples``, and
    ``seed`` None leaves the seed to Hypothesis (``--hypothesis-seed``, ``derandomize``, or fresh)."""
    __tracebackhide__ = True
    from lockstep.checkers.fuzz import fuzz

    target = model_target(model, variant, instance)
    if examples is None:
        examples = DEFAULT_FUZZ_EXAMPLES if settings is None else settings.max_examples
    result = fuzz(target, steps=steps, examples=examples, seed=seed, timeout=timeout, hypothesis_settings=settings)
    if result.path is not None and result.property_name is not None:
        label = getattr(target, "label", getattr(result.machine, "name", "the model"))
        lines = [
            f"{label}: {result.property_name} is violated after {result.path.length} steps "
            f"(found in example {result.examples_to_failure}){': ' + result.detail if result.detail else ''}"
        ]
        lines.extend(
            f"  {number}. {step.actor} "
            f"{step.action}({', '.join(f'{name}={value}' for name, value in step.arguments.items())})"
            for number, step in enumerate(result.path.steps, start=1)
        )
        raise AssertionError("\n".join(lines))
    return result
