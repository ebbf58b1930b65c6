"""Assertions for other projects' test suites: traces conform to a lockstep model.

``assert_conforms(paths, protocol="dp-pause")`` replays trace files (or a trace directory) that a
program recorded with ``lockstep.record`` (or lockstep's runtime) against the model named by their
header, or by ``protocol``/``variant`` (the trace never widens its own check: see
``lockstep.checkers.conformance``), and raises ``AssertionError`` with the replay's explanation
unless they conform. ``assert_fuzz_clean("dp-pause", variant="post-fix")`` fuzzes a model (a
built-in protocol's instance, a ``Protocol`` of your own, or a ``Machine``) with Hypothesis and
raises ``AssertionError`` with the counterexample's steps if a safety property fails. The pytest
plugin (``lockstep.pytest_plugin``) exposes both as fixtures with the command line's
``--lockstep-*`` settings. Everything heavy is imported on first use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from typing import Any

PathLike = str | os.PathLike[str]


def replay_traces(
    paths: PathLike | Sequence[PathLike],
    *,
    protocol: str | None = None,
    variant: str | None = None,
    max_candidates: int = 100_000,
    **options: Any,
) -> dict[str, Any]:
    """Replay ``paths`` against the model the caller names (``lockstep.checkers.conformance``:
    ``instance``, ``parameters``, ``unrecorded``, ``profile``, ``trust_header``,
    ``expected_actors``, ``required_actions``, ``required_witnesses``, ``require_complete``); the
    replay's JSON result (``verdict``, ``event``, ``property``, ``explanation``, ``coverage``,
    ``exempt``, ...) plus ``model`` and ``warnings``."""
    from lockstep.checkers.conformance import replay_traces as replay

    return replay(paths, protocol=protocol, variant=variant, max_candidates=max_candidates, **options).to_json()


def assert_conforms(
    paths: PathLike | Sequence[PathLike],
    *,
    protocol: str | None = None,
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
    ``replay_traces``. Returns the replay result when they do."""
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


def assert_fuzz_clean(
    model: Any,
    *,
    variant: str | None = None,
    instance: str | None = None,
    examples: int = 200,
    steps: int = 100,
    seed: int | None = 0,
    timeout: float | None = None,
) -> Any:
    """Fuzz ``model`` (a protocol name, a ``lockstep.spec.protocol.Protocol`` or a ``Machine``) and
    fail (``AssertionError``, with the counterexample's steps) if a safety property is violated.
    ``seed`` fixes Hypothesis's choices (None: fresh ones each call). Returns the ``FuzzResult``."""
    from lockstep.checkers.fuzz import fuzz
    from lockstep.models import get_protocol
    from lockstep.spec.protocol import Protocol

    target = get_protocol(model) if isinstance(model, str) else model
    if isinstance(target, Protocol):
        target = target.instance(variant, instance)
    result = fuzz(target, steps=steps, examples=examples, seed=seed, timeout=timeout)
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
