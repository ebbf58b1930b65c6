"""lockstep's pytest plugin (entry point ``pytest11``): fixtures for other projects' suites.

Loading it imports nothing heavy (no torch, z3 or hypothesis: only pytest and the standard
library); it adds only ``--lockstep-*`` options:

- ``--lockstep-max-candidates K``: the replay's candidate-set limit (default 100000);
- ``--lockstep-fuzz-examples N`` and ``--lockstep-fuzz-seed S``: examples per fuzzing test
  (default 200) and Hypothesis's seed (default 0: the same examples every run; -1: fresh ones).

Fixtures:

- ``lockstep_assert_conforms(paths, protocol=None, variant=None, **options)``: replay traces your
  code recorded (``lockstep.record``) against the model; fails the test with the divergence
  explained, or when the trace is not evidence enough (``lockstep.testing.assert_conforms``:
  ``actors``, ``actions``, ``witnesses``, ``require_complete``, ``profile``, ``trust_header``, ...).
- ``lockstep_fuzz(model, variant=None, instance=None, steps=100)``: fuzz a protocol model (a
  built-in name, your own ``Protocol`` or ``Machine``) with Hypothesis; fails the test with the
  counterexample's steps if a safety property is violated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lockstep", "lockstep protocol models")
    group.addoption(
        "--lockstep-max-candidates",
        type=int,
        default=100_000,
        metavar="K",
        help="lockstep replay: the limit on candidate model states (default 100000)",
    )
    group.addoption(
        "--lockstep-fuzz-examples",
        type=int,
        default=200,
        metavar="N",
        help="lockstep fuzzing tests: examples per test (default 200)",
    )
    group.addoption(
        "--lockstep-fuzz-seed",
        type=int,
        default=0,
        metavar="S",
        help="lockstep fuzzing tests: Hypothesis's seed (default 0; -1 for fresh examples each run)",
    )


@pytest.fixture
def lockstep_assert_conforms(request: pytest.FixtureRequest) -> Callable[..., dict[str, Any]]:
    """``lockstep_assert_conforms(paths, protocol=None, variant=None, **options)``: fail unless the
    traces conform (``options``: those of ``lockstep.testing.assert_conforms``)."""
    limit = request.config.getoption("--lockstep-max-candidates")

    def check(paths: Any, protocol: str | None = None, variant: str | None = None, **options: Any) -> dict[str, Any]:
        from lockstep.testing import assert_conforms

        options.setdefault("max_candidates", limit)
        return assert_conforms(paths, protocol=protocol, variant=variant, **options)

    return check


@pytest.fixture
def lockstep_fuzz(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``lockstep_fuzz(model, variant=None, instance=None, steps=100)``: fail if fuzzing finds a violation."""
    examples = request.config.getoption("--lockstep-fuzz-examples")
    seed = request.config.getoption("--lockstep-fuzz-seed")

    def run(model: Any, variant: str | None = None, instance: str | None = None, steps: int = 100) -> Any:
        from lockstep.testing import assert_fuzz_clean

        return assert_fuzz_clean(
            model, variant=variant, instance=instance, examples=examples, steps=steps, seed=None if seed < 0 else seed
        )

    return run
