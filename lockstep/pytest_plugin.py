"""lockstep's pytest plugin (entry point ``pytest11``): fixtures for other projects' suites.

Loading it imports nothing heavy (no torch, z3 or hypothesis: only pytest and the standard
library); it adds only ``--lockstep-*`` options, each also settable in the configuration file
(``[tool.pytest.ini_options]`` of ``pyproject.toml``, ``pytest.ini``, ``tox.ini``, ``setup.cfg``)
under its name with underscores (``lockstep_fuzz_examples = 50``); the command line wins:

- ``--lockstep-max-candidates K`` (``lockstep_max_candidates``): the replay's candidate-set limit
  (default 100000);
- ``--lockstep-fuzz-examples N`` (``lockstep_fuzz_examples``): examples per fuzzing test (default:
  the Hypothesis settings profile's ``max_examples``);
- ``--lockstep-fuzz-seed S`` (``lockstep_fuzz_seed``): Hypothesis's seed for fuzzing tests (default,
  or -1: Hypothesis chooses, as for any test of yours: ``--hypothesis-seed``, the profile's
  ``derandomize``, or a fresh seed).

Fixtures:

- ``lockstep_assert_conforms(paths, protocol=None, variant=None, **options)``: replay traces your
  code recorded (``lockstep.record``) against the model; fails the test with the divergence
  explained, or when the trace is not evidence enough (``lockstep.testing.assert_conforms``:
  ``actors``, ``actions``, ``witnesses``, ``require_complete``, ``profile``, ``trust_header``, ...).
- ``lockstep_fuzz(model, variant=None, instance=None, steps=100)``: fuzz a protocol model (a
  built-in name, your own ``Protocol`` or ``Machine``) with Hypothesis under the active settings
  profile (``--hypothesis-profile``), its example database (a failure found once is replayed first
  next time) and seed; fails the test with the counterexample's steps if a safety property is
  violated. Returns the ``FuzzResult``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

SETTINGS = (  # (name, metavar, help)
    ("max_candidates", "K", "lockstep replay: the limit on candidate model states (default 100000)"),
    (
        "fuzz_examples",
        "N",
        "lockstep fuzzing tests: examples per test (default: the Hypothesis profile's max_examples)",
    ),
    (
        "fuzz_seed",
        "S",
        "lockstep fuzzing tests: Hypothesis's seed (default, or -1: Hypothesis chooses, as --hypothesis-seed says)",
    ),
)
DEFAULT_MAX_CANDIDATES = 100_000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lockstep", "lockstep protocol models")
    for name, metavar, text in SETTINGS:
        group.addoption(f"--lockstep-{name.replace('_', '-')}", type=int, default=None, metavar=metavar, help=text)
        parser.addini(f"lockstep_{name}", f"{text}; the command line's option wins", default="")


def pytest_configure(config: pytest.Config) -> None:
    for name, _, _ in SETTINGS:  # a configuration value that is no integer stops the run at once
        setting(config, name)


def setting(config: pytest.Config, name: str) -> int | None:
    """The integer set for ``name`` on the command line, else in the configuration file, else None."""
    given = config.getoption(f"--lockstep-{name.replace('_', '-')}")
    if given is not None:
        return int(given)
    value = config.getini(f"lockstep_{name}")
    if value is None or str(value).strip() == "":
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        where = config.inipath or "the configuration file"
        raise pytest.UsageError(f"{where}: lockstep_{name} must be an integer, not {value!r}") from None


@pytest.fixture
def lockstep_assert_conforms(request: pytest.FixtureRequest) -> Callable[..., dict[str, Any]]:
    """``lockstep_assert_conforms(paths, protocol=None, variant=None, **options)``: fail unless the
    traces conform (``options``: those of ``lockstep.testing.assert_conforms``)."""
    limit = setting(request.config, "max_candidates")

    def check(paths: Any, protocol: Any = None, variant: str | None = None, **options: Any) -> dict[str, Any]:
        __tracebackhide__ = True
        from lockstep.testing import assert_conforms

        options.setdefault("max_candidates", DEFAULT_MAX_CANDIDATES if limit is None else limit)
        return assert_conforms(paths, protocol=protocol, variant=variant, **options)

    return check


@pytest.fixture
def lockstep_fuzz(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``lockstep_fuzz(model, variant=None, instance=None, steps=100)``: fail if fuzzing finds a
    violation; Hypothesis's settings profile, example database and seed apply."""
    examples = setting(request.config, "fuzz_examples")
    seed = setting(request.config, "fuzz_seed")

    def run(model: Any, variant: str | None = None, instance: str | None = None, steps: int = 100) -> Any:
        __tracebackhide__ = True
        from hypothesis import settings

        from lockstep.testing import assert_fuzz_clean

        return assert_fuzz_clean(
            model,
            variant=variant,
            instance=instance,
            examples=examples,
            steps=steps,
            seed=None if seed is None or seed < 0 else seed,
            settings=settings.default,  # the profile loaded (--hypothesis-profile), as a test of yours sees it
        )

    return run
