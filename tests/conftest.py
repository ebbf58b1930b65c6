"""Hypothesis profiles: ``ci`` (default, fast and reproducible) and ``long`` (set LOCKSTEP_HYPOTHESIS_PROFILE=long)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("long", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("LOCKSTEP_HYPOTHESIS_PROFILE", "ci"))
