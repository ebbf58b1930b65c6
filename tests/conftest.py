"""Hypothesis profiles for the test suite.

``ci`` (the default, and always when ``CI=true`` names no other): deterministic (derandomized, no
example database) and bounded (60 examples, 50 steps per stateful example, no deadline).
``long`` (``LOCKSTEP_HYPOTHESIS_PROFILE=long``): 1000 examples, fresh random ones each run, for a
nightly or local soak. ``LOCKSTEP_HYPOTHESIS_PROFILE`` names the profile explicitly and wins.
"""

from __future__ import annotations

import os
import signal

from hypothesis import settings

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and an ignored signal stays ignored across exec: the Ctrl-C tests' subprocesses would
# never see their SIGINT. A handler (unlike SIG_IGN) is reset to the default by exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile("ci", max_examples=60, stateful_step_count=50, deadline=None, derandomize=True, database=None)
# A profile inherits Hypothesis's default settings, which under CI=true are Hypothesis's own
# derandomized "ci" profile: ``long`` says derandomize=False itself so it stays random there too.
settings.register_profile("long", max_examples=1000, deadline=None, derandomize=False)


def profile_name(environment: dict[str, str] | os._Environ[str]) -> str:
    """The profile to load: the one ``LOCKSTEP_HYPOTHESIS_PROFILE`` names, else ``ci`` (so in CI too)."""
    return environment.get("LOCKSTEP_HYPOTHESIS_PROFILE") or "ci"


settings.load_profile(profile_name(os.environ))
